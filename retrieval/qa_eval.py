"""Retrieval evaluation on real questions (SPEC §7): LeCoQA legal-consultation questions against a pool of
statute articles (``../shared/qa/``, see its README).

Each article is one document and one chunk (articles are short: the encoders embed longer ones in
windows, :mod:`retrieval.embed`); its indexed text is ``law_title + " " + article text`` (the law's name is
what a reader sees above an article; ``pool_text="article"`` indexes the article alone). A hit@k is any
gold article among the top-k results; reported per system: recall@1/5/10 and MRR@10 (README of the data).

Systems: BM25 (bm25s over the segmenter's tokens, :mod:`retrieval.sparse`), each dense encoder given
(fine-tuned, untrained = same architecture randomly initialised, retrieval-trained), and per dense encoder
the hybrid of :mod:`retrieval.hybrid` whose weights are fitted on queries mined from the pool itself
(lead clause of each article, its ``第N条`` number removed; never the questions), ranked against a copy of
the pool with each lead cut out of its article (ICT, see :mod:`retrieval.hybrid`). The same systems are also
scored on those mined queries (query set ``mined``, on the masked pool), so the table shows hybrid vs its
parts on both sets.
Passage embeddings are cached on disk under ``cache_dir`` keyed by the encoder's model id and the texts.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from retrieval.dense import build_index, search_rows
from retrieval.encoders import Encoder
from retrieval.encoding import corpus_fn, queries_fn
from retrieval.fusion import FusionConfig, fit_fusion, fuse
from retrieval.metrics import doc_metrics
from retrieval.mining import mask_leads, mine_queries
from retrieval.pinning import model_id
from retrieval.sparse import SparseConfig, SparseIndex, make_tokenizer

_ARTICLE_NO = re.compile(r"^第[零一二三四五六七八九十百千万〇\d]+条(之[一二三四五六七八九十]+)?\s*")


@dataclass(frozen=True)
class QAEvalConfig:
    """pool_text: ``title+article`` (law title, then the article) or ``article``; depth: candidates per side
    for the hybrid; max_questions: evaluate only the first n questions (None: all); fusion/sparse: the
    hybrid and BM25 settings used by the index build."""

    pool_text: str = "title+article"
    max_questions: int | None = None
    fusion: FusionConfig = field(default_factory=FusionConfig)
    sparse: SparseConfig = field(default_factory=SparseConfig)


def load_pool(path: str | os.PathLike, pool_text: str = "title+article") -> pd.DataFrame:
    """Statute articles as documents: doc_id (article_id), text (indexed text), body (article without its
    number), title (law title), article.

    Raises:
        ValueError: unknown ``pool_text``.
    """
    if pool_text not in ("title+article", "article"):
        raise ValueError(f"unknown pool_text {pool_text!r} (title+article, article)")
    df = pd.read_json(path, lines=True)
    text = df["law_title"] + " " + df["text"] if pool_text == "title+article" else df["text"]
    return pd.DataFrame({"doc_id": df["article_id"], "text": text, "title": df["law_title"],
                         "article": df["article"], "body": [_ARTICLE_NO.sub("", t) for t in df["text"]]})


def load_questions(path: str | os.PathLike, max_questions: int | None = None) -> pd.DataFrame:
    """qid, query (the question), gold (list of article ids)."""
    df = pd.read_json(path, lines=True)
    if max_questions:
        df = df.head(max_questions)
    return pd.DataFrame({"qid": df["qid"], "query": df["question"], "gold": df["gold_article_ids"].map(list)})


def mined_pool_queries(pool: pd.DataFrame, cfg: FusionConfig) -> pd.DataFrame:
    """Self-supervised fit queries of the pool: the lead clause of each article body (no titles: a law title
    is shared by all its articles). Columns query, doc_id, kind, gold."""
    q = mine_queries(pd.DataFrame({"doc_id": pool["doc_id"], "text": pool["body"]}), cfg)
    return q.assign(gold=[[d] for d in q["doc_id"]])


def cached_embeddings(encode: Callable[[list[str]], np.ndarray], texts: list[str], key: str,
                      cache_dir: str | os.PathLike | None) -> np.ndarray:
    """``encode(texts)`` cached as ``cache_dir/<sha256(key, texts)[:20]>.npy`` (key: the encoder's model id)."""
    if cache_dir is None:
        return encode(texts)
    h = hashlib.sha256(key.encode())
    for t in texts:
        h.update(t.encode("utf-8") + b"\x1f")
    path = Path(cache_dir) / f"{h.hexdigest()[:20]}.npy"
    if path.is_file():
        return np.load(path)
    vecs = encode(texts)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.npy")
    np.save(tmp, vecs)
    os.replace(tmp, path)
    return vecs


def _dense_rows(vecs: np.ndarray, qvecs: np.ndarray, depth: int) -> list[list[int]]:
    """Rows of the top ``depth`` pool vectors per query vector (exact search)."""
    return search_rows(build_index(vecs, np.arange(len(vecs), dtype=np.int64)), qvecs, depth)[0]


def _docs(rows: list[list[int]], doc_ids: list[str], k: int = 10) -> list[list[str]]:
    """The first ``k`` distinct documents of ranked pool rows (a pool may hold several chunks of a document)."""
    return [list(dict.fromkeys(doc_ids[r] for r in rr))[:k] for rr in rows]


@dataclass
class DenseSystem:
    """A named dense encoder for the evaluation: ``passages(texts)``, ``queries(texts)`` -> (n, dim) and the
    cache key of its passage vectors (its model id)."""

    name: str
    passages: Callable[[list[str]], np.ndarray]
    queries: Callable[[list[str]], np.ndarray]
    key: str


def dense_system(name: str, ckpt_dir: str | os.PathLike, untrained: bool = False, seed: int = 13,
                 batch_size: int = 64) -> DenseSystem:
    """A :class:`DenseSystem` from a checkpoint dir (``untrained``: same architecture, random init)."""
    enc = Encoder.untrained_like(ckpt_dir, seed) if untrained else Encoder.from_checkpoint(ckpt_dir, batch_size)
    enc.batch_size = batch_size
    mid = model_id(ckpt_dir) + (f"-untrained{seed}" if untrained else "")
    return DenseSystem(name, corpus_fn(enc), queries_fn(enc), mid)


def evaluate_qa(questions: pd.DataFrame, pool: pd.DataFrame, systems: list[DenseSystem],
                cfg: QAEvalConfig = QAEvalConfig(), cache_dir: str | os.PathLike | None = None,
                tokenizer=None, log: Callable[[str], None] = print) -> tuple[pd.DataFrame, dict]:
    """Score BM25, every dense system and its hybrid on the questions and on the mined pool queries.

    Args:
        questions: query, gold (list of doc ids). pool: doc_id, text, body (see :func:`load_pool`).
        systems: dense encoders. tokenizer: ``make_tokenizer`` result (else loaded from ``cfg.sparse``).

    Returns:
        (table with columns query_set, system, recall@1, recall@5, recall@10, mrr@10, queries, w_dense,
        info dict with timings, the fitted fusions and the segmenter).
    """
    tokenize, ident = tokenizer or make_tokenizer(cfg.sparse.segmenter)
    doc_ids = pool["doc_id"].tolist()
    mined = mined_pool_queries(pool, cfg.fusion)
    sets = {"questions": questions, "mined": mined}
    info: dict = {"segmenter": ident, "pool": len(pool), "mined_queries": len(mined), "seconds": {}}
    texts = pool["text"].tolist()
    sparse_rows, masked = _sparse_rankings(texts, doc_ids, sets, tokenize, cfg, info)
    depth = cfg.fusion.depth
    rows = [{"query_set": n, "system": "bm25", **doc_metrics(_docs(sparse_rows[n], doc_ids), q["gold"].tolist())}
            for n, q in sets.items()]
    for s in systems:
        t = time.perf_counter()
        vecs = cached_embeddings(s.passages, texts, s.key, cache_dir)
        info["seconds"][f"embed_pool:{s.name}"] = time.perf_counter() - t
        fit_vecs = vecs.copy()
        if masked:
            fit_vecs[list(masked)] = cached_embeddings(s.passages, list(masked.values()), s.key, cache_dir)
        dense_rows = {n: _dense_rows(fit_vecs if n == "mined" else vecs, s.queries(q["query"].tolist()), depth)
                      for n, q in sets.items()}
        fit = fit_fusion(dense_rows["mined"], sparse_rows["mined"], doc_ids, mined["gold"].tolist(), cfg.fusion)
        info[f"fusion:{s.name}"] = {k: fit[k] for k in ("w_dense", "curve")}
        log(f"{s.name}: pool embedded in {info['seconds'][f'embed_pool:{s.name}']:.1f} s, "
            f"fitted w_dense {fit['w_dense']:.2f}")
        for n, q in sets.items():
            gold = q["gold"].tolist()
            fused = [[r for r, *_ in fuse(d, sr, fit["w_dense"], cfg.fusion.rrf_k)] for d, sr in
                     zip(dense_rows[n], sparse_rows[n])]
            rows.append({"query_set": n, "system": f"dense:{s.name}", **doc_metrics(_docs(dense_rows[n], doc_ids), gold)})
            rows.append({"query_set": n, "system": f"hybrid:{s.name}", "w_dense": fit["w_dense"],
                         **doc_metrics(_docs(fused, doc_ids), gold)})
    table = pd.DataFrame(rows).sort_values(["query_set", "system"], kind="stable").reset_index(drop=True)
    return table, info


def _sparse_rankings(texts: list[str], doc_ids: list[str], sets: dict, tokenize, cfg: QAEvalConfig, info: dict
                     ) -> tuple[dict[str, list[list[int]]], dict[int, str]]:
    """BM25 rankings (top ``depth`` pool rows) of every query set, the ``mined`` set against the pool with each
    lead cut out of its article (ICT); returns them with the masked articles ``{row: text}``."""
    t = time.perf_counter()
    tokens = tokenize(texts)
    sp = SparseIndex.build(tokens, cfg.sparse)
    masked = mask_leads(texts, doc_ids, sets["mined"]) if cfg.fusion.mask_leads else {}
    fit_tokens = list(tokens)
    for r, tk in zip(masked, tokenize(list(masked.values()))):
        fit_tokens[r] = tk
    fit_sp = SparseIndex.build(fit_tokens, cfg.sparse) if masked else sp
    info["seconds"]["bm25_index"] = time.perf_counter() - t
    info["masked_articles"] = len(masked)
    return {n: [(fit_sp if n == "mined" else sp).top(tk, cfg.fusion.depth)[0].tolist()
                for tk in tokenize(q["query"].tolist())] for n, q in sets.items()}, masked


def write_results(table: pd.DataFrame, info: dict, cfg: QAEvalConfig, out_dir: str | os.PathLike) -> Path:
    """``qa_eval.parquet`` and ``qa_eval.json`` (config, info) in ``out_dir``; returns the Parquet path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table.to_parquet(out / "qa_eval.parquet", index=False)
    (out / "qa_eval.json").write_text(json.dumps({"config": asdict(cfg), "info": info}, ensure_ascii=False,
                                                 indent=1, default=str), encoding="utf-8")
    return out / "qa_eval.parquet"


def format_table(table: pd.DataFrame) -> str:
    """The table as aligned text (one row per query set and system)."""
    cols = ["query_set", "system", "recall@1", "recall@5", "recall@10", "mrr@10", "queries"]
    t = table.reindex(columns=cols + (["w_dense"] if "w_dense" in table else []))
    return t.to_string(index=False, float_format=lambda x: f"{x:.3f}")
