"""Query-side fine-tuning of a dense retriever against a fixed passage index (SPEC §7, §8).

Method (query-side fine-tuning, Lee et al. 2021, "Learning Dense Representations of Phrases at Scale", §4.3;
DPR's objective, Karpukhin et al. 2020): the passage vectors of the index stay as the pretrained encoder wrote
them, and only a copy of the encoder that embeds the *queries* is trained, on questions with their gold
documents. Because the passages do not move, each question is scored against **every** passage of the pool
(no sampled negatives): the loss of a question is the cross-entropy of its gold documents among all pool rows,
with several gold rows (a document in several chunks, or several gold documents) pooled by log-sum-exp
(a multi-positive softmax): ``loss = logsumexp(s_all / tau) - logsumexp(s_gold / tau)``, ``s`` the cosine.
Nothing is re-embedded: the tuned query encoder searches the index the starting encoder built, so a
refreshed question set costs a few CPU minutes, not an embedding pass over the corpus.

Training runs on the one engine of :mod:`model.training` (AdamW, warmup + decay, resumable, best-by-dev on
MRR@10 of dev questions that it does not train on). The result is a checkpoint like any other encoder
(``BertModel`` or PolicyBERT weights, tokenizer files, ``retrieval.json``) plus ``query_tuning.json`` naming
the passage encoder it pairs with (:func:`retrieval.pinning.model_id`) and its metrics.
"""
from __future__ import annotations

import time
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from model.training import TrainConfig, resolve_device, train
from retrieval.dense import build_index, search_rows
from retrieval.encoders import BertEncoder, RetrievalInfo, checkpoint_type, pool
from retrieval.metrics import doc_metrics
from retrieval.train import RetrievalTrainConfig, TextBatcher, embed_all, load_bi_encoder, save_encoder
from storage.bounds import check_bounds

TUNING_FILE = "query_tuning.json"


@dataclass(frozen=True)
class QueryTuneConfig:
    """steps: optimiser steps (0: no tuning; the evaluation then only fits the fusion on the questions);
    batch_size: questions per step; lr, warmup_ratio, weight_decay: AdamW with linear warmup/decay; tau: softmax
    temperature over cosines (e5 was trained at 0.01); max_query_len: tokens incl. special tokens; eval_every: steps
    between dev evaluations (best dev MRR@10 kept); train_embeddings: also train the token embedding matrix (off:
    the transformer layers only); seed; device ``auto|cpu|cuda``. The defaults train the 12-layer e5-small on
    ~1,000 short questions in ~270 s on 2 CPU cores."""

    steps: int = 150
    batch_size: int = 32
    lr: float = 3e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    tau: float = 0.02
    max_query_len: int = 64
    eval_every: int = 25
    train_embeddings: bool = False
    seed: int = 13
    device: str = "auto"

    def __post_init__(self):
        check_bounds(self, steps=(0, None), batch_size=(1, 1 << 16), lr=(">", 0, 1), warmup_ratio=(0, 1),
                     weight_decay=(0, 10), tau=(">", 0, 10), max_query_len=(4, 1 << 16), eval_every=(1, None),
                     seed=(0, 2 ** 32 - 1))


@dataclass
class QueryTowerOutput:
    """``loss``: scalar; ``scores``: (batch, passages) cosines / tau."""

    loss: torch.Tensor
    scores: torch.Tensor


class QueryTower(torch.nn.Module):
    """A query encoder scored against a fixed passage matrix.

    Args:
        encoder: a ``BertModel`` / ``PolicyBertModel`` (its ``last_hidden_state`` is pooled).
        passages: (n_passages, hidden) L2-normalised float32 vectors of the index (a non-persistent buffer: not
            in the checkpoint).
        pooling: :func:`retrieval.encoders.pool` mode. tau: temperature.

    forward(input_ids, attention_mask, ..., gold) with ``gold`` (batch, g) passage rows padded with -1 ->
    :class:`QueryTowerOutput` (multi-positive softmax over all passages, module doc).
    """

    def __init__(self, encoder: torch.nn.Module, passages: np.ndarray, pooling: str, tau: float):
        super().__init__()
        self.encoder, self.pooling, self.tau = encoder, pooling, tau
        self.register_buffer("passages", torch.as_tensor(np.asarray(passages, dtype=np.float32)), persistent=False)

    def embed(self, inputs: dict) -> torch.Tensor:
        """L2-normalised query vectors (batch, hidden)."""
        states = self.encoder(**inputs).last_hidden_state
        return pool(states.float(), inputs["attention_mask"], self.pooling)

    def forward(self, gold: torch.Tensor, **inputs: torch.Tensor) -> QueryTowerOutput:
        scores = self.embed(inputs) @ self.passages.T / self.tau
        pos = torch.full_like(scores, float("-inf"))
        valid = gold >= 0
        rows = torch.arange(len(gold), device=gold.device).unsqueeze(1).expand_as(gold)
        pos[rows[valid], gold[valid]] = scores[rows[valid], gold[valid]]
        loss = (torch.logsumexp(scores, 1) - torch.logsumexp(pos, 1)).mean()
        return QueryTowerOutput(loss, scores)


def gold_rows(gold: Sequence[Sequence[str]], row_docs: Sequence[str]) -> list[list[int]]:
    """Per question, the pool rows (chunks) of its gold documents; a question whose gold is not in the pool gets
    an empty list."""
    by_doc: dict[str, list[int]] = {}
    for r, d in enumerate(row_docs):
        by_doc.setdefault(str(d), []).append(r)
    return [[r for d in g for r in by_doc.get(str(d), [])] for g in gold]


def load_query_encoder(ckpt_dir: str | Path):
    """(model, ``texts, max_len -> inputs`` batcher, :class:`RetrievalInfo`) of an encoder checkpoint."""
    if checkpoint_type(ckpt_dir) == "bert":
        enc = BertEncoder.from_checkpoint(ckpt_dir)
        return enc.model, TextBatcher("bert", enc.tokenizer), enc.info
    info = RetrievalInfo.load(ckpt_dir)
    bi, batcher = load_bi_encoder(ckpt_dir, RetrievalTrainConfig(pooling=info.pooling))
    return bi.encoder, batcher, info


@dataclass(frozen=True)
class QuestionCollator:
    """Examples ``{"query", "gold"}`` -> the batcher's query inputs (instruction prepended) + ``gold`` (batch, g)."""

    batcher: Callable
    instruction: str
    max_len: int

    def __call__(self, examples: list[dict]) -> dict:
        width = max(1, max(len(e["gold"]) for e in examples))
        gold = torch.full((len(examples), width), -1, dtype=torch.long)
        for i, e in enumerate(examples):
            gold[i, :len(e["gold"])] = torch.as_tensor(e["gold"], dtype=torch.long)
        return {**self.batcher([self.instruction + e["query"] for e in examples], self.max_len), "gold": gold}


def embed_queries(tower: QueryTower, batcher: Callable, texts: Sequence[str], instruction: str, max_len: int,
                  batch_size: int = 64) -> np.ndarray:
    """Query vectors (len(texts), hidden) float32 of the tower's encoder, instruction prepended
    (:func:`retrieval.train.embed_all`; the model left in training mode)."""
    return embed_all(tower, batcher, [instruction + t for t in texts], max_len, batch_size)


def ranked_docs(qvecs: np.ndarray, passages: np.ndarray, row_docs: Sequence[str], k: int = 10,
                depth: int = 100) -> list[list[str]]:
    """The first ``k`` distinct documents of each query's exact top ``depth`` pool rows (inner product)."""
    rows = search_rows(build_index(passages, np.arange(len(passages), dtype=np.int64)), qvecs, depth)[0]
    return [list(dict.fromkeys(str(row_docs[r]) for r in rr))[:k] for rr in rows]


def tune_queries(ckpt_dir: str | Path, passages: np.ndarray, row_docs: Sequence[str], train_q: pd.DataFrame,
                 dev_q: pd.DataFrame | None, out_dir: str | Path, cfg: QueryTuneConfig = QueryTuneConfig(),
                 passage_model: str = "", log: Callable[[str], None] = print) -> dict:
    """Train the query side of the encoder of ``ckpt_dir`` against ``passages`` (module doc); write the
    checkpoint to ``out_dir`` atomically; return its metrics (also in ``query_tuning.json``).

    Args:
        passages: (n, hidden) L2-normalised vectors the starting encoder gave the pool; row_docs: doc id per row.
        train_q, dev_q: ``query`` and ``gold`` (list of doc ids) columns; dev picks the kept step (best MRR@10),
            None: the last step is kept.
        passage_model: id of the encoder that embedded ``passages`` (recorded).

    Raises:
        ValueError: no training question has a gold document in the pool; passages' width is not the encoder's.
    """
    t0 = time.perf_counter()
    torch.manual_seed(cfg.seed)
    model, batcher, info = load_query_encoder(ckpt_dir)
    if passages.shape[1] != model.config.hidden_size:
        raise ValueError(f"passage vectors have width {passages.shape[1]}, the encoder {model.config.hidden_size}")
    # the token embeddings stay as they are (e5's 250k x 384 rows are 96 M of its 118 M weights: a dense AdamW
    # step over them would cost most of a step's time, and a question set touches few of its rows)
    model.get_input_embeddings().weight.requires_grad_(cfg.train_embeddings)
    tower = QueryTower(model, passages, info.pooling, cfg.tau).to(resolve_device(cfg.device))
    examples = [{"query": q, "gold": g} for q, g in zip(train_q["query"], gold_rows(train_q["gold"], row_docs)) if g]
    if not examples:
        raise ValueError("no training question has a gold document in the pool")
    inst = info.query_instruction

    def evaluate(m: QueryTower) -> dict:
        qv = embed_queries(m, batcher, dev_q["query"].tolist(), inst, cfg.max_query_len)
        return doc_metrics(ranked_docs(qv, passages, row_docs), dev_q["gold"].tolist())

    has_dev = dev_q is not None and len(dev_q) > 0
    before = evaluate(tower) if has_dev else None
    run = train(tower, examples, QuestionCollator(batcher, inst, cfg.max_query_len),
                TrainConfig(max_steps=cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup_ratio=cfg.warmup_ratio,
                            weight_decay=cfg.weight_decay, seed=cfg.seed, device=cfg.device, log_every=25,
                            save_every=0, eval_every=cfg.eval_every),
                lambda s: log(f"query-tuning {s}"), evaluate=evaluate if has_dev else None,
                best_metric="mrr@10" if has_dev else None)
    metrics = {"method": "query-side fine-tuning, multi-positive softmax over the fixed pool (Lee et al. 2021)",
               "start": str(ckpt_dir), "passage_model": passage_model, "passages": int(len(passages)),
               "train_questions": len(examples), "dev_questions": int(len(dev_q)) if has_dev else 0,
               "dev_before": before, "best": run["best"], "train": run, "config": asdict(cfg),
               "seconds": time.perf_counter() - t0}
    save_encoder(model, info, ckpt_dir, out_dir, TUNING_FILE, metrics)
    return metrics


def _bucket(key: str, seed: int, n: int) -> int:
    """A stable bucket in ``0..n-1`` of a text key (crc32 of seed + key)."""
    return zlib.crc32(f"{seed}\x1f{key}".encode("utf-8")) % n


@dataclass(frozen=True)
class TuningFold:
    """One query-tuning run: rows of the tuning questions it trains on and picks its step with (``train``,
    ``dev``), and rows of the evaluated questions it is scored on (``test``: none of them trained on)."""

    train: list[int]
    dev: list[int]
    test: list[int]


def tuning_folds(eval_keys: Sequence[str], tune_keys: Sequence[str], folds: int = 5, dev_share: float = 0.15,
                 seed: int = 13) -> list[TuningFold]:
    """Splits for query tuning whose reported questions are never trained or tuned on.

    Keys group questions (the question text, or its gold document where questions of one document should not be
    split). When the evaluated questions share keys with the tuning questions (the same file, say), the keys are
    cross-fitted in ``folds`` folds: fold f reports the evaluated questions whose key falls in f and trains on the
    tuning questions of the other folds (a ``dev_share`` of them, by key, picks the step and fits the fusion).
    Otherwise one fold: train/dev from the tuning questions, every evaluated question reported.

    Raises:
        ValueError: ``folds`` < 2 where cross-fitting is needed, or ``dev_share`` outside (0, 1).
    """
    if not 0 < dev_share < 1:
        raise ValueError(f"dev_share must be in (0, 1), got {dev_share}")
    shared = set(eval_keys) & set(tune_keys)
    dev_of = [_bucket(k, seed + 1, 10_000) < dev_share * 10_000 for k in tune_keys]
    if not shared:
        return [TuningFold([i for i, d in enumerate(dev_of) if not d], [i for i, d in enumerate(dev_of) if d],
                           list(range(len(eval_keys))))]
    if folds < 2:
        raise ValueError("the evaluated questions overlap the tuning questions: cross-fitting needs folds >= 2")
    fold_e = [_bucket(k, seed, folds) for k in eval_keys]
    fold_t = [_bucket(k, seed, folds) for k in tune_keys]
    return [TuningFold([i for i, f in enumerate(fold_t) if f != k and not dev_of[i]],
                       [i for i, f in enumerate(fold_t) if f != k and dev_of[i]],
                       [i for i, f in enumerate(fold_e) if f == k]) for k in range(folds)]
