"""Choosing the retrieval encoder by a dev split (SPEC §7-§8).

The thesis's retrieval encoder was its PolicySM-fine-tuned char body merged back with the original weights
("bge-base-zh-v1.5-merge"). Offline the candidates are: the pretrained encoder as it ships
(multilingual-e5-small, :mod:`model.e5`, native SentencePiece pieces), the fine-tuned PolicyBERT checkpoint,
and that checkpoint's char body merged with the pretrained char body at weights ``alpha``
(:func:`merge_char_body`, the weight-space interpolation of Wortsman et al. 2022, "Robust fine-tuning of
zero-shot models"). Each candidate ranks the chunks of a seeded subset of documents for the lead-sentence
queries mined from them, with each lead cut out of its chunks (the Inverse Cloze Task, Lee et al. 2019), and the
best recall@10 + MRR@10 wins, over the pretrained encoder only by more than one standard error of its paired gain
(:func:`one_se_choice`). Titles are never used here: the retrieval evaluation reports title queries.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import pandas as pd
import torch

from model.backbones import load_state_dict
from model.training import PRECISIONS
from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.dense import build_flat_index, search_rows
from retrieval.encoders import Encoder
from retrieval.encoding import TextEncoder
from retrieval.metrics import doc_metrics
from retrieval.mining import LeadConfig, mask_leads, mine_queries
from storage.atomic import atomic_path
from storage.bounds import check_bounds, check_choice

CHOICE_FILE = "choice.json"
_BODY = ("embeddings.", "encoder.layer.")


@dataclass(frozen=True)
class EncoderChoiceConfig:
    """merge_alphas: weights of the fine-tuned body in the merged candidates (0 < alpha < 1); dev_docs:
    documents (seeded sample) whose chunks and lead queries make the dev set; max_queries: lead queries kept;
    seed: the samples' seed; precision: the candidates' forward autocast while choosing
    (:data:`model.training.PRECISIONS`; ``cpu-small``: ``bf16``, which halves the 12-layer candidates'
    embedding time on CPU; the index embeds with the chosen encoder's own default); score_finetuned: whether
    the fine-tuned checkpoint itself is a candidate beside a pretrained encoder (it always is without one).
    SPEC §8 names the merged body, not the fine-tuned one, as the thesis's retrieval encoder: a classifier
    fine-tuned on PolicySM-1 ranks passages near chance (recall@10 0.09 against the pretrained e5's 0.91 on the
    real corpus's dev split, docs/models.md), so ``cpu-small`` skips it and saves a third of the stage."""

    merge_alphas: tuple[float, ...] = (0.5,)
    dev_docs: int = 40
    max_queries: int = 200
    seed: int = 13
    precision: str = "auto"
    score_finetuned: bool = True

    def __post_init__(self):
        if not isinstance(self.score_finetuned, bool):
            raise ValueError(f"EncoderChoiceConfig.score_finetuned = {self.score_finetuned!r}: true or false")
        check_bounds(self, dev_docs=(1, 1_000_000), max_queries=(1, 1_000_000), seed=(0, 2 ** 32 - 1))
        check_choice(self, "precision", PRECISIONS)
        if not all(isinstance(a, (int, float)) and not isinstance(a, bool) and 0 < a < 1 for a in self.merge_alphas):
            raise ValueError(f"EncoderChoiceConfig.merge_alphas = {self.merge_alphas!r}: numbers in (0, 1)")


def _char_body(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The char encoder's tensors of a BERT or PolicyBERT state dict, keyed as in a plain ``BertModel``."""
    out = {}
    for k, v in state.items():
        name = k[len("bert."):] if k.startswith("bert.") else k
        if name.startswith(_BODY) and "position_ids" not in name:
            out[name] = v
    return out


def merge_char_body(finetuned_dir: str | os.PathLike, base_dir: str | os.PathLike, alpha: float,
                    out_dir: str | os.PathLike, retrieval_info: str | os.PathLike | None = None) -> Path:
    """A plain BERT checkpoint whose char body is ``alpha * finetuned + (1 - alpha) * base``.

    Args:
        finetuned_dir: a PolicyBERT (or BERT) checkpoint whose char encoder was initialised from ``base_dir``.
        base_dir: the plain BERT char checkpoint it started from (config, ``vocab.txt``, ``retrieval.json``
            are copied from it, so the merged model reads and pools text as the base does).
        alpha: weight of the fine-tuned body, 0 < alpha < 1.
        retrieval_info: a ``retrieval.json`` to use instead of the base's (how the merged model pools and
            which instructions it prepends: the pretrained encoder's own, for a char body cut from it).

    Raises:
        ValueError: the two bodies differ in a tensor's name or shape (the fine-tuned model did not start from
            ``base_dir``), or alpha is outside (0, 1).
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    base, tuned = _char_body(load_state_dict(base_dir)), _char_body(load_state_dict(finetuned_dir))
    bad = sorted(k for k in base if k not in tuned or tuned[k].shape != base[k].shape)
    if bad:
        raise ValueError(f"{finetuned_dir} does not hold the char body of {base_dir} ({len(bad)} tensors differ, "
                         f"e.g. {bad[0]})")
    from safetensors.torch import save_file  # the checkpoint format transformers reads

    merged = {k: (alpha * tuned[k].float() + (1 - alpha) * base[k].float()).contiguous() for k in base}
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True, exist_ok=True)
        for f in Path(base_dir).iterdir():
            if f.is_file() and not f.name.endswith((".safetensors", ".bin")) and f.name != CHOICE_FILE:
                shutil.copy2(f, tmp / f.name)
        save_file(merged, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        if retrieval_info is not None:
            shutil.copy2(retrieval_info, tmp / "retrieval.json")
    return Path(out_dir)


def _in_dev(doc_id: str, share: float, seed: int) -> bool:
    h = hashlib.sha256(f"{seed}\x1f{doc_id}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2 ** 64 < share


def dev_docs(frames, n_docs: int, cfg: EncoderChoiceConfig) -> pd.DataFrame:
    """The documents (doc_id, text) of the dev sample, read from ``frames`` (a table read shard by shard) of
    ``n_docs`` documents in all: the same documents :func:`dev_set` samples, never the whole table in memory."""
    share = min(1.0, cfg.dev_docs / max(n_docs, 1))
    kept = [df[[_in_dev(str(d), share, cfg.seed) for d in df["doc_id"]]] for df in frames]
    return pd.concat(kept, ignore_index=True) if kept else pd.DataFrame(columns=["doc_id", "text"])


def dev_set(docs: pd.DataFrame, cfg: EncoderChoiceConfig, chunk_cfg: ChunkConfig = ChunkConfig()
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(chunks, queries) of the dev split: the chunks of a seeded sample of about ``cfg.dev_docs`` documents,
    with each lead query cut out of its own chunks, and their lead-sentence queries (query, doc_id)."""
    share = min(1.0, cfg.dev_docs / max(len(docs), 1))
    sample = docs[[_in_dev(str(d), share, cfg.seed) for d in docs["doc_id"]]]
    lead = LeadConfig(max_queries=cfg.max_queries, seed=cfg.seed)
    queries = mine_queries(sample[["doc_id", "text"]], lead)
    queries = queries[queries["kind"] == "lead"].reset_index(drop=True)
    chunks = build_chunks(sample.assign(title="", source="", url=""), chunk_cfg)
    masked = mask_leads(chunks["text"].tolist(), chunks["doc_id"].astype(str).tolist(), queries)
    for row, text in masked.items():
        chunks.loc[row, "text"] = text
    return chunks, queries


def score_encoder(encoder: TextEncoder, chunks: pd.DataFrame, queries: pd.DataFrame, k: int = 10) -> dict:
    """Document-level recall@1/5/10 and MRR@10 of ``encoder`` ranking ``chunks`` for ``queries`` (exact search),
    and ``per_query``: each query's recall@10 + reciprocal rank@10 (the choice's objective, for the paired
    comparison of :func:`choose_encoder`)."""
    vecs = encoder.encode_corpus(chunks["text"].tolist())
    index = build_flat_index(vecs, np.arange(len(vecs), dtype=np.int64))
    rows, _ = search_rows(index, encoder.encode_queries(queries["query"].tolist()), k)
    docs = chunks["doc_id"].astype(str).to_numpy()
    ranked = [[docs[r] for r in rr if r >= 0] for rr in rows]
    gold = queries["doc_id"].astype(str).tolist()
    per_query = [doc_metrics([r], [g]) for r, g in zip(ranked, gold)]
    return {**doc_metrics(ranked, gold), "per_query": [m["recall@10"] + m["mrr@10"] for m in per_query]}


def one_se_choice(table: list[dict]) -> tuple[dict, dict]:
    """(the chosen row, the rule's figures): the best row by mean recall@10 + MRR@10 replaces the first row (the
    default candidate, the pretrained encoder) only when its paired gain over it, query by query, exceeds one
    standard error of that gain: the one-standard-error rule of model selection (Breiman et al. 1984; Hastie,
    Tibshirani & Friedman, ESL §7.10), so a dev split of a few dozen queries cannot swap the encoder on a
    one-query difference. Ties go to the first row."""
    first = table[0]
    best = max(table, key=lambda r: (r["recall@10"] + r["mrr@10"], -table.index(r)))
    if best is first:
        return first, {"rule": "one standard error", "best": first["encoder"], "kept_default": False}
    gain = np.asarray(best["per_query"], dtype=float) - np.asarray(first["per_query"], dtype=float)
    se = float(gain.std(ddof=1) / np.sqrt(len(gain))) if len(gain) > 1 else float("inf")
    figures = {"rule": "one standard error", "best": best["encoder"], "gain": round(float(gain.mean()), 4),
               "se": round(se, 4)}
    if float(gain.mean()) > se:
        return best, {**figures, "kept_default": False}
    return first, {**figures, "kept_default": True}


def choose_encoder(candidates: Mapping[str, str | os.PathLike], docs: pd.DataFrame, cfg: EncoderChoiceConfig,
                   load: Callable[[str | os.PathLike], TextEncoder] | None = None) -> dict:
    """Score every candidate checkpoint on the dev split (:func:`dev_set`) and pick the best by recall@10 +
    MRR@10, kept over the first candidate named (the default) only when its paired gain exceeds one standard
    error (:func:`one_se_choice`; ties: the first candidate).

    Returns:
        {"chosen": name, "dir": its dir, "table": [{"encoder", "dir", recall@k, mrr@10, queries}], "dev": sizes,
        "selection": the rule's figures (best, gain, se, kept_default)}.

    Raises:
        ValueError: no candidate, or the dev split has no query.
    """
    if not candidates:
        raise ValueError("no retrieval encoder candidate")
    load = load or (lambda d: Encoder.from_checkpoint(d, precision=cfg.precision))
    chunks, queries = dev_set(docs, cfg)
    if not len(queries):
        raise ValueError("the dev split has no lead-sentence query: too few or too short documents")
    table = [{"encoder": name, "dir": str(d), **score_encoder(load(d), chunks, queries)}
             for name, d in candidates.items()]
    best, selection = one_se_choice(table)
    for row in table:
        del row["per_query"]
    return {"chosen": best["encoder"], "dir": best["dir"], "table": table, "selection": selection,
            "dev": {"documents": int(chunks["doc_id"].nunique()), "chunks": int(len(chunks)),
                    "queries": int(len(queries))}, "config": asdict(cfg)}


def write_choice(choice: dict, out_dir: str | os.PathLike) -> Path:
    """Copy the chosen checkpoint to ``out_dir`` (atomically) with ``choice.json`` (the dev table) beside it."""
    with atomic_path(out_dir) as tmp:
        shutil.copytree(choice["dir"], tmp)
        (tmp / CHOICE_FILE).write_text(json.dumps(choice, ensure_ascii=False, indent=1), encoding="utf-8")
    return Path(out_dir)
