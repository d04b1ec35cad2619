"""Retrieval evaluation (issue: retrieval): known-item search over the chunk index.

Queries are document titles and their citations (``describes``); a hit is any chunk of that
document in the top k. Reported per system: recall@1/5/10 and MRR@10, for the PolicyBERT index,
the same architecture untrained (random init: what the training adds), and BM25 over HanLP tokens
(rank-bm25). For approximate indexes (IVF, HNSW) built over the same vectors: recall@10 of their
top-10 chunk lists against the exact index.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd

from retrieval.index import IndexConfig, build_index

KS = (1, 5, 10)


def make_queries(docs: pd.DataFrame) -> pd.DataFrame:
    """(query, doc_id, kind) from titles and citations of ``documents_clean``; empty/duplicate queries dropped."""
    rows = []
    for r in docs.itertuples(index=False):
        for kind, q in (("title", r.title), ("citation", getattr(r, "citation", None))):
            if isinstance(q, str) and q.strip():
                rows.append((q.strip(), r.doc_id, kind))
    q = pd.DataFrame(rows, columns=["query", "doc_id", "kind"])
    return q.drop_duplicates(["query", "doc_id"]).drop_duplicates("query", keep=False).reset_index(drop=True)


def rank_metrics(ranked_docs: Sequence[Sequence[str]], targets: Sequence[str]) -> dict:
    """recall@k (k in 1, 5, 10) and MRR@10 from ranked doc-id lists (one per query; chunks mapped to docs)."""
    ranks = []
    for docs, t in zip(ranked_docs, targets):
        pos = next((i for i, d in enumerate(docs[:10]) if d == t), None)
        ranks.append(pos)
    n = max(len(ranks), 1)
    out = {f"recall@{k}": sum(1 for r in ranks if r is not None and r < k) / n for k in KS}
    out["mrr@10"] = sum(1.0 / (r + 1) for r in ranks if r is not None) / n
    out["queries"] = len(ranks)
    return out


def dense_rankings(index, chunk_docs: dict[int, str], query_vecs: np.ndarray, k: int = 10) -> list[list[str]]:
    """Doc ids of the top-k chunks per query from a FAISS index."""
    _, ids = index.search(np.ascontiguousarray(query_vecs, dtype=np.float32), k)
    return [[chunk_docs[int(i)] for i in row if i >= 0] for row in ids]


def bm25_rankings(chunk_tokens: list[list[str]], chunk_doc_ids: list[str], query_tokens: list[list[str]],
                  k: int = 10) -> list[list[str]]:
    """Doc ids of the top-k chunks per query under BM25 (Okapi, rank-bm25)."""
    from rank_bm25 import BM25Okapi

    bm25 = BM25Okapi(chunk_tokens)
    out = []
    for q in query_tokens:
        scores = bm25.get_scores(q)
        top = np.argsort(-scores, kind="stable")[:k]
        out.append([chunk_doc_ids[i] for i in top])
    return out


def ann_recall(vectors: np.ndarray, ids: np.ndarray, query_vecs: np.ndarray, cfg: IndexConfig, k: int = 10) -> float:
    """Share of the exact top-k chunk ids that an approximate index (``cfg``) also returns."""
    exact = build_index(vectors, ids, IndexConfig(kind="flat"))
    approx = build_index(vectors, ids, cfg)
    _, e = exact.search(query_vecs, k)
    _, a = approx.search(query_vecs, k)
    hits = sum(len(set(x[x >= 0]) & set(y[y >= 0])) for x, y in zip(e, a))
    return hits / max(int((e >= 0).sum()), 1)


def evaluate_systems(chunks: pd.DataFrame, queries: pd.DataFrame, encoders: dict[str, Callable[[list[str]], np.ndarray]],
                     tokenize: Callable[[list[str]], list[list[str]]], stored: dict[str, np.ndarray] | None = None
                     ) -> tuple[pd.DataFrame, dict]:
    """Evaluate dense encoders and BM25 side by side.

    Args:
        chunks: chunk_id, doc_id, text. queries: query, doc_id.
        encoders: system name -> text encoder; ``stored`` may give precomputed chunk vectors per name.
        tokenize: texts -> tokens (HanLP segmentation) for BM25.

    Returns:
        ``(table, extra)``: one row per system with recall@1/5/10, mrr@10, queries; extra holds the
        IVF/HNSW recall@10 against exact search for the first dense system.
    """
    ids = chunks["chunk_id"].to_numpy(np.int64)
    chunk_docs = dict(zip(ids.tolist(), chunks["doc_id"]))
    targets = queries["doc_id"].tolist()
    rows, extra = [], {}
    for name, enc in encoders.items():
        vecs = (stored or {}).get(name)
        if vecs is None:
            vecs = enc(chunks["text"].tolist())
        qv = enc(queries["query"].tolist())
        rows.append({"system": name, **rank_metrics(dense_rankings(build_index(vecs, ids), chunk_docs, qv), targets)})
        if not extra:
            extra = {f"{kind}_recall@10_vs_exact": ann_recall(vecs, ids, qv, IndexConfig(kind=kind))
                     for kind in ("ivf", "hnsw")}
    bm = bm25_rankings(tokenize(chunks["text"].tolist()), chunks["doc_id"].tolist(), tokenize(queries["query"].tolist()))
    rows.append({"system": "bm25-hanlp", **rank_metrics(bm, targets)})
    return pd.DataFrame(rows), extra
