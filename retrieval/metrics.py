"""Retrieval figures, one definition each (SPEC §7): recall@k and MRR@k over ranked document lists, and the
recall of an approximate nearest-neighbour index against exact search."""
from __future__ import annotations

from typing import Sequence

import numpy as np

KS = (1, 5, 10)


def doc_metrics(ranked_docs: Sequence[Sequence[str]], gold: Sequence[set[str] | str], ks: Sequence[int] = KS,
                mrr_k: int = 10) -> dict:
    """recall@k for each k in ``ks`` and MRR@``mrr_k`` of ranked doc-id lists (one per query, best first); a
    query is answered at the first rank holding any of its gold docs (a set, a list, or one id).

    Returns:
        {"recall@1", "recall@5", "recall@10", "mrr@10", "queries"} (keys follow ``ks`` and ``mrr_k``); with no
        query every figure is 0.0.
    """
    n = max(len(gold), 1)
    depth = max(max(ks), mrr_k)
    rec = dict.fromkeys(ks, 0)
    mrr = 0.0
    for docs, g in zip(ranked_docs, gold):
        g = {g} if isinstance(g, str) else set(g)
        pos = next((i for i, d in enumerate(list(docs)[:depth]) if d in g), None)
        if pos is None:
            continue
        for k in rec:
            rec[k] += pos < k
        mrr += 1.0 / (pos + 1) if pos < mrr_k else 0.0
    return {**{f"recall@{k}": v / n for k, v in rec.items()}, f"mrr@{mrr_k}": mrr / n, "queries": len(gold)}


def ann_recall(index: "faiss.Index", vectors: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int,
               self_rows: np.ndarray | None = None) -> float:
    """Recall@k of ``index`` (approximate, over ``vectors`` (n, dim) with int64 ``ids`` (n,)) against exact
    inner-product search over the same vectors, for query vectors (q, dim).

    ``self_rows`` (q,): the row each query was taken from when the queries are indexed vectors; that row is
    left out of both lists (a vector trivially finds itself). Ties count: an approximate hit is right when its
    score reaches the exact k-th score (within 1e-5), so duplicate vectors do not lower the figure.

    Returns:
        The mean share of the exact top-k found, in [0, 1]; 1.0 when fewer than k + 1 vectors leave no
        neighbour to find.
    """
    import faiss  # here: the ranking metrics above run where faiss is not installed

    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    skip = 0 if self_rows is None else 1
    k_eff = min(k, len(vectors) - skip)
    if k_eff < 1 or not len(queries):
        return 1.0
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(vectors)
    e_scores, e_rows = exact.search(queries, k_eff + skip)
    a_scores, a_ids = index.search(queries, k_eff + skip)
    found = 0
    for j in range(len(queries)):
        own_row = -1 if self_rows is None else int(self_rows[j])
        own_id = None if self_rows is None else int(ids[own_row])
        keep = (e_rows[j] >= 0) & (e_rows[j] != own_row)
        kth = e_scores[j][keep][:k_eff][-1]
        mine = (a_ids[j] >= 0) & (a_ids[j] != own_id if own_id is not None else True)
        found += int(min(k_eff, int((a_scores[j][mine][:k_eff] >= kth - 1e-5).sum())))
    return found / (len(queries) * k_eff)
