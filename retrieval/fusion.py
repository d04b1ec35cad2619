"""Fusion of the dense and the sparse ranking (SPEC §7), pure functions: weighted reciprocal-rank fusion,
with the weights fitted on self-supervised queries mined from the indexed corpus.

Fusion (RRF, Cormack, Clarke & Büttcher, SIGIR 2009, with per-system weights): each side returns its
top ``depth`` chunks; a chunk's fused score is ``w_dense / (rrf_k + dense_rank) + w_sparse / (rrf_k +
sparse_rank)`` with 1-based ranks, a side that did not return the chunk adding 0; ties go to the better
sparse rank, then the better dense rank. ``w_dense + w_sparse = 1``.

Fitting (:func:`fit_fusion`): plain RRF (equal weights) with a weak dense side loses to BM25 alone, so
the weights come from measured quality. At index build, queries are mined from the corpus itself
(:func:`retrieval.mining.mine_queries`: each document's title and its lead sentence, each targeting its document;
never the held-out evaluation questions). A lead sentence is verbatim in its document, which makes it
trivial for BM25 and unlike a real question; with ``mask_leads`` (default) the fit ranks a copy of the
corpus in which each lead is cut out of the chunks that contain it (the Inverse Cloze Task of Lee et al.
2019, :func:`retrieval.mining.mask_leads`), so the query must be matched through its context. Each side ranks the queries
once, and every ``w_dense`` on a grid
``0, 1/grid, …, 1`` is scored by recall@10 + MRR@10 at document level. The best weight wins (ties
go to the weight closest to 0.5). Both ends of the grid are on it (``w_dense = 0`` reproduces the
sparse ranking, ``1`` the dense one), so on the mined queries the fusion never scores below the
better of its parts; a useless dense side gets weight 0. Weights and the fit's figures are stored in
the index manifest (``fusion``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from retrieval.metrics import doc_metrics
from storage.bounds import check_bounds, check_order


@dataclass(frozen=True)
class FusionConfig:
    """rrf_k: RRF damping constant (60, Cormack et al.); depth: candidates taken from each side;
    grid: steps of the ``w_dense`` grid; max_queries: mined fit queries kept (seeded sample);
    lead_min/lead_max: chars of a lead sentence used as a query; mask_leads: fit on a corpus copy with the
    lead queries cut out of their chunks (ICT); seed: sampling seed; refit_share: share of the chunks that may be
    added or removed since the last fit (cumulated over refreshes) before a refresh fits the weights again (0:
    every refresh refits; the encoder, the sparse key or this config changing always refits)."""

    rrf_k: int = 60
    depth: int = 100
    grid: int = 20
    max_queries: int = 400
    lead_min: int = 8
    lead_max: int = 60
    mask_leads: bool = True
    seed: int = 13
    refit_share: float = 0.05

    def __post_init__(self):
        check_bounds(self, rrf_k=(0, 1_000_000), depth=(1, 1_000_000), grid=(1, 10_000), max_queries=(1, None),
                     lead_min=(1, 10_000), lead_max=(1, 10_000), seed=(0, 2 ** 32 - 1), refit_share=(0, 1))
        check_order(self, "lead_min", "lead_max")


def fuse(dense_rows: Sequence[int], sparse_rows: Sequence[int], w_dense: float, rrf_k: int = 60
         ) -> list[tuple[int, float, int | None, int | None]]:
    """Weighted RRF of two ranked row lists (best first).

    Returns (row, fused score, dense rank, sparse rank) best first; ranks are 1-based, None when
    that side did not return the row. Rows with a zero fused score (only returned by a side of weight
    0) come last in that side's order.
    """
    w_sparse = 1.0 - w_dense
    dr = {int(r): i + 1 for i, r in enumerate(dense_rows)}
    sr = {int(r): i + 1 for i, r in enumerate(sparse_rows)}
    big = len(dr) + len(sr) + 1
    out = []
    for row in dr.keys() | sr.keys():
        d, s = dr.get(row), sr.get(row)
        score = (w_dense / (rrf_k + d) if d else 0.0) + (w_sparse / (rrf_k + s) if s else 0.0)
        out.append((row, score, d, s))
    out.sort(key=lambda t: (-t[1], t[3] or big, t[2] or big, t[0]))
    return out


def _objective(m: dict) -> float:
    return m["recall@10"] + m["mrr@10"]


def fit_fusion(dense: Sequence[Sequence[int]], sparse: Sequence[Sequence[int]], row_doc: Sequence[str],
               gold: Sequence[set[str] | str], cfg: FusionConfig = FusionConfig()) -> dict:
    """Pick ``w_dense`` on the grid that maximises recall@10 + MRR@10 of the fused ranking (see module doc).

    Args:
        dense, sparse: per query, chunk rows best first (top ``depth`` of each side).
        row_doc: doc id of each chunk row. gold: per query, its target doc id(s).

    Returns:
        {"w_dense", "w_sparse", "rrf_k", "depth", "queries", "dense", "sparse", "hybrid" (metrics dicts),
        "curve" ([w_dense, objective] per grid point)}; with no queries: equal weights, unfitted.
    """
    base = {"rrf_k": cfg.rrf_k, "depth": cfg.depth, "queries": len(gold)}
    if not len(gold):
        return {**base, "w_dense": 0.5, "w_sparse": 0.5, "fitted": False}

    def ranked(w: float) -> list[list[str]]:
        return [[row_doc[r] for r, *_ in fuse(d, s, w, cfg.rrf_k)[:10]] for d, s in zip(dense, sparse)]

    curve = []
    for i in range(cfg.grid + 1):
        w = i / cfg.grid
        curve.append((w, doc_metrics(ranked(w), gold)))
    best_w, best = max(curve, key=lambda c: (round(_objective(c[1]), 9), -abs(c[0] - 0.5)))
    return {**base, "fitted": True, "w_dense": best_w, "w_sparse": 1.0 - best_w,
            "dense": curve[-1][1], "sparse": curve[0][1], "hybrid": best,
            "curve": [[w, round(_objective(m), 4)] for w, m in curve], "config": asdict(cfg)}
