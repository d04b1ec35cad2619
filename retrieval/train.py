"""Retrieval training of an encoder (issue 12): contrastive fine-tuning on pairs mined from the corpus.

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

Documents are split by a seeded hash into train and dev (``dev_fraction``); the dev pairs measure
query → its own passage among all dev passages (recall@1/5/10, MRR@10) for the starting encoder, BM25 and
the trained encoder, so the learned figure stands beside its baselines (``metrics.json``).
The result is an HF checkpoint (PolicyBERT: ``PolicyBertModel`` + vocab.txt + word_vocab.txt; BERT:
``BertModel`` + vocab.txt) with ``retrieval.json`` recording pooling and query instruction.
"""
from __future__ import annotations

import hashlib
import json
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from retrieval.encoders import BertEncoder, RetrievalInfo, checkpoint_type, pool
from retrieval.dense import build_index, search_rows
from retrieval.metrics import doc_metrics
from retrieval.mining import mine_pairs, split_by_doc  # noqa: F401  (public API of this module)
from retrieval.sparse import SparseIndex

_SENT = re.compile(r"[^。！？；!?;\n]+[。！？；!?;]*")
_HEADING = re.compile(r"^(?:[一二三四五六七八九十]+、|（[一二三四五六七八九十]+）|第[一二三四五六七八九十百]+[条章节])")


@dataclass(frozen=True)
class RetrievalTrainConfig:
    """steps: optimiser steps; batch_size: queries per step; hard_negatives: mined negatives per query;
    lr, warmup_ratio, weight_decay: AdamW with linear warmup/decay; tau: InfoNCE temperature;
    max_query_len / max_passage_len: tokens incl. [CLS]/[SEP]; mine_depth, mine_from: rank window of the
    hard negatives; max_pairs: pairs kept (seeded sample; hard negatives are mined for all of them);
    kinds: pair kinds; dev_fraction: documents held out for the dev figures (at most ``max_dev_pairs``); pooling: ``mean`` | ``cls`` | None (PolicyBERT mean, BERT cls);
    query_instruction: prepended to queries; seed; device ``auto|cpu|cuda``. The defaults run in a few
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


class _Trainable:
    """A checkpoint's encoder with a differentiable ``embed(texts, max_len)`` -> (n, hidden) normalised."""

    def __init__(self, ckpt_dir, cfg: RetrievalTrainConfig, device: torch.device):
        self.kind = checkpoint_type(ckpt_dir)
        self.device, self.cfg = device, cfg
        if self.kind == "bert":
            from transformers import BertModel

            self.model = BertModel.from_pretrained(str(ckpt_dir))
            self.tokenizer = BertEncoder.load_tokenizer(ckpt_dir)
            default_pool = "cls"
        else:
            from model.stages import load_encoder

            self.model, self.enc, self.matcher = load_encoder(ckpt_dir)
            default_pool = "mean"
        self.pooling = cfg.pooling or default_pool
        self.model.to(device)
        self.rng = np.random.default_rng(cfg.seed)

    def batch(self, texts: Sequence[str], max_len: int) -> dict:
        if self.kind == "bert":
            return dict(self.tokenizer(list(texts), padding=True, truncation=True, max_length=max_len,
                                       return_tensors="pt"))
        from model.features import collate, encode, to_chars

        mw = self.model.config.max_words
        ex = []
        for t in texts:
            e = encode(to_chars(t)[:max_len - 2], None, self.enc, self.matcher, max_len, mw, self.rng)
            ex.append({"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "word_ids": e.word_ids,
                       "word_spans": e.word_spans})
        return collate(ex, mw)

    def embed(self, texts: Sequence[str], max_len: int) -> torch.Tensor:
        b = {k: v.to(self.device) for k, v in self.batch(texts, max_len).items()}
        states = self.model(**b).last_hidden_state
        return pool(states, b["attention_mask"], self.pooling)

    @torch.no_grad()
    def embed_all(self, texts: Sequence[str], max_len: int, batch_size: int = 128) -> np.ndarray:
        self.model.eval()
        order = np.argsort([len(t) for t in texts], kind="stable")
        out = np.zeros((len(texts), self.model.config.hidden_size), dtype=np.float32)
        for i in range(0, len(order), batch_size):
            idx = order[i:i + batch_size]
            out[idx] = self.embed([texts[j] for j in idx], max_len).float().cpu().numpy()
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
    index = build_index(pvecs, np.arange(len(pvecs), dtype=np.int64))
    _, ids = index.search(np.ascontiguousarray(qvecs, np.float32), min(depth, len(pvecs)))
    docs = np.asarray(pair_docs)
    for qi, row in enumerate(ids):
        cand = [int(p) for p in row[start - 1:] if p >= 0 and docs[p] != docs[qi]]
        if cand:
            out[qi, :min(n, len(cand))] = rng.choice(cand, min(n, len(cand)), replace=False)
    return out


def pair_retrieval_metrics(qvecs: np.ndarray, pvecs: np.ndarray) -> dict:
    """Query i -> passage retrieval among all dev passages (a hit: passage i itself)."""
    index = build_index(pvecs, np.arange(len(pvecs), dtype=np.int64))
    _, ids = index.search(np.ascontiguousarray(qvecs, np.float32), min(10, len(pvecs)))
    return doc_metrics([[str(p) for p in row if p >= 0] for row in ids], [str(i) for i in range(len(qvecs))])


def bm25_pair_metrics(queries: Sequence[str], passages: Sequence[str], tokenize) -> dict:
    """The same dev task under BM25 (a non-neural baseline)."""
    sp = SparseIndex.build(tokenize(list(passages)))
    ranked = [[str(r) for r in sp.top(t, 10)[0]] for t in tokenize(list(queries))]
    return doc_metrics(ranked, [str(i) for i in range(len(queries))])


def _schedule(opt, steps: int, warmup: int):
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / max(warmup, 1)
        return max(0.0, (steps - step) / max(steps - warmup, 1))

    return torch.optim.lr_scheduler.LambdaLR(opt, f)


def train_retrieval(ckpt_dir, pairs: pd.DataFrame, out_dir, cfg: RetrievalTrainConfig = RetrievalTrainConfig(),
                    tokenize: Callable | None = None, log: Callable[[str], None] = print) -> dict:
    """Contrastive fine-tuning of the encoder of ``ckpt_dir`` on ``pairs`` (query, passage, doc_id, kind);
    writes the checkpoint to ``out_dir`` atomically and returns its metrics (also ``metrics.json``).

    Raises:
        ValueError: fewer than 2 training pairs.
    """
    from model.training import resolve_device
    from storage import atomic_path

    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    dev_t = resolve_device(cfg.device)
    train, dev = split_by_doc(pairs, cfg.dev_fraction, cfg.seed)
    if len(dev) > cfg.max_dev_pairs:
        dev = dev.sample(cfg.max_dev_pairs, random_state=cfg.seed).reset_index(drop=True)
    if len(train) < 2:
        raise ValueError(f"too few training pairs ({len(train)}) mined from the corpus")
    m = _Trainable(ckpt_dir, cfg, dev_t)
    qi = cfg.query_instruction
    # hard negatives, mined once with the starting encoder
    pv = m.embed_all(train["passage"].tolist(), cfg.max_passage_len)
    qv = m.embed_all([qi + q for q in train["query"]], cfg.max_query_len)
    hard = mine_hard_negatives(qv, pv, train["doc_id"].tolist(), cfg.hard_negatives, cfg.mine_depth,
                               cfg.mine_from, rng)
    metrics: dict = {"pairs": {"train": len(train), "dev": len(dev),
                               "kinds": {str(k): int(v) for k, v in pairs["kind"].value_counts().items()}}}
    if len(dev) >= 2:
        metrics["dev_before"] = _dev_metrics(m, dev, cfg)
        if tokenize is not None:
            metrics["dev_bm25"] = bm25_pair_metrics(dev["query"].tolist(), dev["passage"].tolist(), tokenize)
    opt = torch.optim.AdamW(m.model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = _schedule(opt, cfg.steps, int(cfg.warmup_ratio * cfg.steps))
    docs = train["doc_id"].to_numpy()
    curve, losses = [], []
    m.model.train()
    for step in range(cfg.steps):
        idx = _batch(docs, cfg.batch_size, rng)
        negs = [int(h) for h in hard[idx].ravel() if h >= 0]
        q = m.embed([qi + train.at[i, "query"] for i in idx], cfg.max_query_len)
        p = m.embed([train.at[i, "passage"] for i in list(idx) + negs], cfg.max_passage_len)
        loss = torch.nn.functional.cross_entropy(q @ p.T / cfg.tau, torch.arange(len(idx), device=dev_t))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            curve.append({"step": step + 1, "loss": float(np.mean(losses[-cfg.log_every:]))})
            log(f"retrieval-train step {step + 1}/{cfg.steps} loss {curve[-1]['loss']:.4f}")
    if len(dev) >= 2:
        metrics["dev_after"] = _dev_metrics(m, dev, cfg)
    info = RetrievalInfo(pooling=m.pooling, query_instruction=qi, max_len=cfg.max_passage_len)
    metrics.update(curve=curve, seconds=time.perf_counter() - t0, start=str(ckpt_dir), retrieval=asdict(info),
                   config=asdict(cfg), method="InfoNCE, in-batch + mined hard negatives (FlagEmbedding recipe)")
    with atomic_path(out_dir) as tmp:
        m.model.save_pretrained(tmp)
        for f in ("vocab.txt", "word_vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.json"):
            if Path(ckpt_dir, f).is_file():
                shutil.copy2(Path(ckpt_dir, f), Path(tmp, f))
        info.save(tmp)
        Path(tmp, "metrics.json").write_text(json.dumps(metrics, ensure_ascii=False, indent=1, default=str))
    return metrics


def _batch(docs: np.ndarray, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` pair indices with distinct documents where possible (no false in-batch negatives)."""
    order = rng.permutation(len(docs))
    seen, idx = set(), []
    for i in order:
        if docs[i] not in seen:
            seen.add(docs[i])
            idx.append(i)
            if len(idx) == size:
                break
    if len(idx) < min(size, len(docs)):
        rest = [i for i in order if i not in set(idx)]
        idx += rest[:min(size, len(docs)) - len(idx)]
    return np.asarray(idx)


def _dev_metrics(m: _Trainable, dev: pd.DataFrame, cfg: RetrievalTrainConfig) -> dict:
    qv = m.embed_all([cfg.query_instruction + q for q in dev["query"]], cfg.max_query_len)
    pv = m.embed_all(dev["passage"].tolist(), cfg.max_passage_len)
    m.model.train()
    return pair_retrieval_metrics(qv, pv)
