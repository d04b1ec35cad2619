"""Retrieval training of an encoder (SPEC §7): contrastive fine-tuning on pairs mined from the corpus.

Method (the FlagEmbedding / bge recipe, Xiao et al. 2023, "C-Pack", arXiv:2309.07597; DPR, Karpukhin et
al. 2020, for in-batch negatives): InfoNCE over L2-normalised embeddings with temperature ``tau``; for a
batch of B queries the candidates are the B positives plus ``hard_negatives`` mined negatives per query,
and each query's loss is the cross-entropy of its positive among all of them. Hard negatives are mined
once, before training, with the starting encoder: the top ``mine_depth`` passages of each query, skipping
passages of the query's own document, sampled from ranks ``mine_from``..``mine_depth`` (FlagEmbedding
uses ranks 2–200).

Pairs come from the corpus only (no held-out questions), per document of ``documents_clean``:

- ``title``: the title ↔ the document's opening passage;
- ``heading``: a numbered heading (``一、…``, ``（一）…``, ``第N条``) ↔ the text that follows it;
- ``ict``: a sentence ↔ its neighbouring context with the sentence removed (Inverse Cloze Task, Lee et
  al. 2019, "Latent Retrieval for Weakly Supervised Open Domain QA").

The model is a :class:`BiEncoder` whose forward returns its loss (FlagEmbedding's pattern), trained by the one
engine of :mod:`model.training` (resume, DDP, bf16, best-by-dev). Documents are split by a seeded hash into
train and held-out (``dev_fraction``), the held-out documents again into dev (picks the best checkpoint, MRR@10
every ``eval_every`` steps) and test (never used for a choice). Each held-out set measures query → its own
passage among all its passages (recall@1/5/10, MRR@10) for the starting encoder, BM25 and the trained encoder,
so the learned figure stands beside its baselines on a split not tuned on (``metrics.json``).
The result is an HF checkpoint (PolicyBERT: ``PolicyBertModel`` + vocab.txt + word_vocab.txt; BERT:
``BertModel`` + vocab.txt) with ``retrieval.json`` recording pooling and query instruction.
"""
from __future__ import annotations

import json
import shutil
import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch
from transformers import BertModel, BertTokenizerFast

from model.features import CharEncoder, WordMatcher, collate, encode, to_chars
from model.modeling import PolicyBertModel
from model.training import TrainConfig, resolve_device, train
from retrieval.dense import build_index, search_rows
from retrieval.encoders import RetrievalInfo, checkpoint_type, pool
from retrieval.metrics import doc_metrics
from retrieval.mining import split_by_doc
from retrieval.sparse import SparseIndex
from storage.atomic import atomic_path

WORD_VOCAB = "word_vocab.txt"
COPIED = ("vocab.txt", WORD_VOCAB, "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json")


@dataclass(frozen=True)
class RetrievalTrainConfig:
    """steps: optimiser steps; batch_size: queries per step; hard_negatives: mined negatives per query;
    lr, warmup_ratio, weight_decay: AdamW with linear warmup/decay; tau: InfoNCE temperature;
    max_query_len / max_passage_len: tokens incl. [CLS]/[SEP]; mine_depth, mine_from: rank window of the
    hard negatives; max_pairs: pairs kept (seeded sample; hard negatives are mined for all of them);
    kinds: pair kinds; dev_fraction: documents held out (half dev, half test; at most ``max_dev_pairs`` pairs
    each); pooling: ``mean`` | ``cls`` | None (PolicyBERT mean, BERT cls);
    query_instruction: prepended to queries; seed; device ``auto|cpu|cuda``; log_every / eval_every /
    save_every: steps between log lines, dev evaluations, training states (resume); best_by_dev: keep the
    checkpoint with the best dev MRR@10 (else the last). The defaults run in a few
    minutes on 2 CPU cores for the cpu-small model (hidden 128, 2 layers)."""

    steps: int = 200
    batch_size: int = 32
    hard_negatives: int = 1
    lr: float = 1e-4
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    tau: float = 0.05
    max_query_len: int = 64
    max_passage_len: int = 128
    mine_depth: int = 200
    mine_from: int = 2
    max_pairs: int = 4000
    kinds: tuple[str, ...] = ("title", "heading", "ict")
    dev_fraction: float = 0.1
    max_dev_pairs: int = 500
    pooling: str | None = None
    query_instruction: str = ""
    seed: int = 13
    device: str = "auto"
    log_every: int = 50
    eval_every: int = 50
    save_every: int = 50
    best_by_dev: bool = True


class TextBatcher:
    """Texts -> model inputs of a checkpoint's encoder: PolicyBERT chars + matched words (:func:`model.features.encode`,
    word order seeded by the text, so a batch is the same whoever builds it) or BERT WordPiece; ``(texts, max_len)
    -> dict`` of tensors (batch, seq)."""

    def __init__(self, kind: str, tokenizer=None, enc: CharEncoder | None = None, matcher: WordMatcher | None = None,
                 max_words: int = 1):
        self.kind, self.tokenizer, self.enc, self.matcher, self.max_words = kind, tokenizer, enc, matcher, max_words

    def __call__(self, texts: Sequence[str], max_len: int) -> dict:
        if self.kind == "bert":
            return dict(self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_len,
                                       return_tensors="pt"))
        ex = []
        for t in texts:
            e = encode(to_chars(t)[:max_len - 2], None, self.enc, self.matcher, max_len, self.max_words,
                       np.random.default_rng(zlib.crc32(t.encode("utf-8"))))
            ex.append({"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "word_ids": e.word_ids,
                       "word_spans": e.word_spans})
        return collate(ex, self.max_words)


@dataclass
class RetrievalOutput:
    """``loss``: InfoNCE, scalar; ``scores``: (queries, passages) similarities / tau."""

    loss: torch.Tensor
    scores: torch.Tensor


class BiEncoder(torch.nn.Module):
    """A shared encoder for queries and passages whose forward returns the contrastive loss (FlagEmbedding's
    ``BiEncoderModel`` pattern): InfoNCE (van den Oord et al. 2018) of query i against passage i among all passages
    of the batch (in-batch and hard negatives, DPR, Karpukhin et al. 2020), temperature ``tau``.

    forward(q_input_ids, q_attention_mask, ..., p_input_ids, ...): the ``q_`` / ``p_`` inputs of B queries and
    P >= B passages (the first B are the positives) -> :class:`RetrievalOutput`.
    """

    def __init__(self, encoder: torch.nn.Module, pooling: str, tau: float):
        super().__init__()
        self.encoder, self.pooling, self.tau = encoder, pooling, tau

    def embed(self, inputs: dict) -> torch.Tensor:
        """L2-normalised vectors (batch, hidden) of one input batch (:func:`retrieval.encoders.pool`)."""
        states = self.encoder(**inputs).last_hidden_state
        return pool(states.float(), inputs["attention_mask"], self.pooling)

    def forward(self, **batch: torch.Tensor) -> RetrievalOutput:
        q = self.embed({k[2:]: v for k, v in batch.items() if k.startswith("q_")})
        p = self.embed({k[2:]: v for k, v in batch.items() if k.startswith("p_")})
        scores = q @ p.T / self.tau
        return RetrievalOutput(torch.nn.functional.cross_entropy(scores, torch.arange(len(q), device=q.device)), scores)


def load_bi_encoder(ckpt_dir, cfg: RetrievalTrainConfig) -> tuple[BiEncoder, TextBatcher]:
    """The :class:`BiEncoder` of a checkpoint (PolicyBERT: mean pooling by default; plain BERT: CLS) and its
    :class:`TextBatcher`."""
    if checkpoint_type(ckpt_dir) == "bert":
        # the tokenizer as transformers loads a checkpoint's (vocab.txt, tokenizer_config.json): under transformers
        # 5 ``BertTokenizerFast(vocab_file=...)`` ignores the file and maps every char to [UNK]
        model, batcher, default = (BertModel.from_pretrained(str(ckpt_dir)),
                                   TextBatcher("bert", BertTokenizerFast.from_pretrained(str(ckpt_dir))), "cls")
    else:
        model = PolicyBertModel.from_pretrained(ckpt_dir)
        batcher = TextBatcher("policybert", enc=CharEncoder.from_dir(ckpt_dir),
                              matcher=WordMatcher.from_file(Path(ckpt_dir) / WORD_VOCAB), max_words=model.config.max_words)
        default = "mean"
    return BiEncoder(model, cfg.pooling or default, cfg.tau), batcher


@dataclass(frozen=True)
class PairCollator:
    """Examples ``{"query", "passages"}`` (positive first, then hard negatives) -> one batch: the queries
    (instruction prepended) as ``q_*``, all positives then all negatives as ``p_*``."""

    batcher: TextBatcher
    query_instruction: str
    max_query_len: int
    max_passage_len: int

    def __call__(self, examples: list[dict]) -> dict:
        passages = [e["passages"][0] for e in examples] + [p for e in examples for p in e["passages"][1:]]
        q = self.batcher([self.query_instruction + e["query"] for e in examples], self.max_query_len)
        p = self.batcher(passages, self.max_passage_len)
        return {**{f"q_{k}": v for k, v in q.items()}, **{f"p_{k}": v for k, v in p.items()}}


class PairExamples(list):
    """Training examples whose epoch order puts pairs of distinct documents into each batch where possible (a
    second pair of a query's document would be a false in-batch negative); ``epoch_order(seed, epoch)`` is read
    by :func:`model.training.train`."""

    def __init__(self, examples: list[dict], docs: Sequence[str], batch_size: int):
        super().__init__(examples)
        self.docs, self.batch_size = np.asarray(docs), batch_size

    def epoch_order(self, seed: int, epoch: int) -> np.ndarray:
        """A seeded permutation, rearranged greedily so each window of ``batch_size`` has distinct documents."""
        rest = list(np.random.default_rng([seed, epoch]).permutation(len(self)))
        order: list[int] = []
        while rest:
            seen, keep = set(), []
            for i in rest:
                if len(seen) < self.batch_size and self.docs[i] not in seen:
                    seen.add(self.docs[i])
                    order.append(i)
                else:
                    keep.append(i)
            if len(keep) == len(rest):  # no new document left: take the rest as they come
                order += keep
                break
            rest = keep
        return np.asarray(order)


@torch.no_grad()
def embed_all(model: BiEncoder, batcher: TextBatcher, texts: Sequence[str], max_len: int,
              batch_size: int = 128) -> np.ndarray:
    """Vectors (len(texts), hidden) float32 of ``texts`` (sorted by length into batches), the model left in
    training mode."""
    model.eval()
    dev = next(model.parameters()).device
    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.zeros((len(texts), model.encoder.config.hidden_size), dtype=np.float32)
    for i in range(0, len(order), batch_size):
        idx = order[i:i + batch_size]
        b = {k: v.to(dev) for k, v in batcher([texts[j] for j in idx], max_len).items()}
        out[idx] = model.embed(b).float().cpu().numpy()
    model.train()
    return out


def mine_hard_negatives(qvecs: np.ndarray, pvecs: np.ndarray, pair_docs: Sequence[str], n: int, depth: int,
                        start: int, rng: np.random.Generator) -> np.ndarray:
    """Per query, ``n`` passage indices sampled from its dense ranks ``start..depth`` (1-based) among
    passages of other documents (the positive and its document's passages skipped); -1 where too few.

    Args: qvecs (q, d), pvecs (p, d) normalised; pair_docs: doc id of each passage. Returns (q, n) int64.
    """
    out = np.full((len(qvecs), n), -1, dtype=np.int64)
    if n == 0:
        return out
    rows = search_rows(build_index(pvecs, np.arange(len(pvecs), dtype=np.int64)), qvecs, depth)[0]
    docs = np.asarray(pair_docs)
    for qi, row in enumerate(rows):
        cand = [p for p in row[start - 1:] if docs[p] != docs[qi]]
        if cand:
            out[qi, :min(n, len(cand))] = rng.choice(cand, min(n, len(cand)), replace=False)
    return out


def pair_retrieval_metrics(qvecs: np.ndarray, pvecs: np.ndarray) -> dict:
    """Query i -> passage retrieval among all dev passages (a hit: passage i itself)."""
    rows = search_rows(build_index(pvecs, np.arange(len(pvecs), dtype=np.int64)), qvecs, 10)[0]
    return doc_metrics([[str(p) for p in row] for row in rows], [str(i) for i in range(len(qvecs))])


def bm25_pair_metrics(queries: Sequence[str], passages: Sequence[str], tokenize) -> dict:
    """The same dev task under BM25 (a non-neural baseline)."""
    sp = SparseIndex.build(tokenize(list(passages)))
    ranked = [[str(r) for r in sp.top(t, 10)[0]] for t in tokenize(list(queries))]
    return doc_metrics(ranked, [str(i) for i in range(len(queries))])




def heldout_split(pairs: pd.DataFrame, cfg: RetrievalTrainConfig) -> dict[str, pd.DataFrame]:
    """``train``, ``dev`` (picks the kept checkpoint) and ``test`` (only reported) pairs, split by document
    (:func:`retrieval.mining.split_by_doc`); dev and test hold at most ``max_dev_pairs`` each (seeded sample)."""
    train_p, held = split_by_doc(pairs, cfg.dev_fraction, cfg.seed)
    dev, test = split_by_doc(held, 0.5, cfg.seed + 1)
    out = {"train": train_p}
    for name, df in (("dev", dev), ("test", test)):
        out[name] = df.sample(cfg.max_dev_pairs, random_state=cfg.seed).reset_index(drop=True) if (
            len(df) > cfg.max_dev_pairs) else df
    return out


def _examples(train_p: pd.DataFrame, model: BiEncoder, batcher: TextBatcher, cfg: RetrievalTrainConfig
              ) -> PairExamples:
    """Training examples with ``hard_negatives`` passages mined once with the starting encoder."""
    pv = embed_all(model, batcher, train_p["passage"].tolist(), cfg.max_passage_len)
    qv = embed_all(model, batcher, [cfg.query_instruction + q for q in train_p["query"]], cfg.max_query_len)
    hard = mine_hard_negatives(qv, pv, train_p["doc_id"].tolist(), cfg.hard_negatives, cfg.mine_depth,
                               cfg.mine_from, np.random.default_rng(cfg.seed))
    passages = train_p["passage"].tolist()
    ex = [{"query": q, "passages": [passages[i]] + [passages[h] for h in hard[i] if h >= 0]}
          for i, q in enumerate(train_p["query"])]
    return PairExamples(ex, train_p["doc_id"].astype(str).tolist(), cfg.batch_size)


def heldout_metrics(model: BiEncoder, batcher: TextBatcher, pairs: pd.DataFrame, cfg: RetrievalTrainConfig) -> dict:
    """Query -> its own passage among all passages of ``pairs`` (:func:`pair_retrieval_metrics`)."""
    qv = embed_all(model, batcher, [cfg.query_instruction + q for q in pairs["query"]], cfg.max_query_len)
    return pair_retrieval_metrics(qv, embed_all(model, batcher, pairs["passage"].tolist(), cfg.max_passage_len))


def _baselines(model: BiEncoder, batcher: TextBatcher, split: dict, cfg: RetrievalTrainConfig, tokenize) -> dict:
    """The starting encoder and BM25 on the held-out sets (``dev_before``, ``dev_bm25``, ``test_before``, ...)."""
    out = {}
    for name in ("dev", "test"):
        df = split[name]
        if len(df) >= 2:
            out[f"{name}_before"] = heldout_metrics(model, batcher, df, cfg)
            if tokenize is not None:
                out[f"{name}_bm25"] = bm25_pair_metrics(df["query"].tolist(), df["passage"].tolist(), tokenize)
    return out


def _engine_config(cfg: RetrievalTrainConfig) -> TrainConfig:
    """The engine's config for a retrieval run: ``steps`` optimiser steps of ``batch_size`` queries."""
    return TrainConfig(max_steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup_ratio=cfg.warmup_ratio,
                       weight_decay=cfg.weight_decay, seed=cfg.seed, device=cfg.device, log_every=cfg.log_every,
                       save_every=cfg.save_every, eval_every=cfg.eval_every)


def state_dir_of(out_dir) -> Path:
    """Where a retrieval run keeps its resumable training state: ``.<name>.train-state`` beside ``out_dir``."""
    out = Path(out_dir)
    return out.parent / f".{out.name}.train-state"


def train_retrieval(ckpt_dir, pairs: pd.DataFrame, out_dir, cfg: RetrievalTrainConfig = RetrievalTrainConfig(),
                    tokenize: Callable | None = None, log: Callable[[str], None] = print,
                    on_step: Callable[[int, int], None] | None = None) -> dict:
    """Contrastive fine-tuning of the encoder of ``ckpt_dir`` on ``pairs`` (query, passage, doc_id, kind) with the
    engine of :mod:`model.training` (resumable from :func:`state_dir_of`; best dev MRR@10 kept with
    ``best_by_dev``); writes the checkpoint to ``out_dir`` atomically and returns its metrics (``metrics.json``).

    Raises:
        ValueError: fewer than 2 training pairs.
    """
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    split = heldout_split(pairs, cfg)
    if len(split["train"]) < 2:
        raise ValueError(f"too few training pairs ({len(split['train'])}) mined from the corpus")
    model, batcher = load_bi_encoder(ckpt_dir, cfg)
    model.to(resolve_device(cfg.device))
    examples = _examples(split["train"], model, batcher, cfg)
    metrics: dict = {"pairs": {**{k: len(v) for k, v in split.items()},
                               "kinds": {str(k): int(v) for k, v in pairs["kind"].value_counts().items()}},
                     **_baselines(model, batcher, split, cfg, tokenize)}
    dev = split["dev"] if len(split["dev"]) >= 2 else None
    run = train(model, examples, PairCollator(batcher, cfg.query_instruction, cfg.max_query_len, cfg.max_passage_len),
                _engine_config(cfg), lambda s: log(f"retrieval-train {s}"), state_dir=state_dir_of(out_dir),
                on_step=on_step, evaluate=(lambda m: heldout_metrics(m, batcher, dev, cfg)) if dev is not None else None,
                best_metric="mrr@10" if cfg.best_by_dev and dev is not None else None)
    for name in ("dev", "test"):
        if len(split[name]) >= 2:
            metrics[f"{name}_after"] = heldout_metrics(model, batcher, split[name], cfg)
    info = RetrievalInfo(pooling=model.pooling, query_instruction=cfg.query_instruction, max_len=cfg.max_passage_len)
    metrics.update(train=run, best_step=run["best"]["step"] if run["best"] else None,
                   seconds=time.perf_counter() - t0, start=str(ckpt_dir), retrieval=asdict(info), config=asdict(cfg),
                   method="InfoNCE, in-batch + mined hard negatives (FlagEmbedding recipe)")
    _save(model, info, metrics, ckpt_dir, out_dir)
    return metrics


def _save(model: BiEncoder, info: RetrievalInfo, metrics: dict, ckpt_dir, out_dir) -> None:
    """The trained encoder's checkpoint (:func:`save_encoder`, ``metrics.json``); the training state removed after."""
    save_encoder(model.encoder, info, ckpt_dir, out_dir, "metrics.json", metrics)
    shutil.rmtree(state_dir_of(out_dir), ignore_errors=True)


def save_encoder(encoder: torch.nn.Module, info: RetrievalInfo, ckpt_dir, out_dir, meta_file: str, meta: dict) -> None:
    """An encoder trained from ``ckpt_dir`` as an HF checkpoint in ``out_dir``, written atomically: its weights, the
    tokenizer files of ``ckpt_dir`` (:data:`COPIED`), ``retrieval.json`` and ``meta`` as JSON in ``meta_file``."""
    with atomic_path(out_dir) as tmp:
        encoder.save_pretrained(tmp)
        for f in COPIED:
            if Path(ckpt_dir, f).is_file():
                shutil.copy2(Path(ckpt_dir, f), Path(tmp, f))
        info.save(tmp)
        Path(tmp, meta_file).write_text(json.dumps(meta, ensure_ascii=False, indent=1, default=str))
