"""Fusion of the dense and the sparse ranking (SPEC §7), pure functions: weighted reciprocal-rank fusion or a
convex combination of normalised scores, with the weight fitted on queries.

Fusion, ``method="rrf"`` (RRF, Cormack, Clarke & Büttcher, SIGIR 2009, with per-system weights): each side
returns its top ``depth`` chunks; a chunk's fused score is ``w_dense / (rrf_k + dense_rank) + w_sparse / (rrf_k +
sparse_rank)`` with 1-based ranks, a side that did not return the chunk adding 0; ties go to the better
sparse rank, then the better dense rank. ``w_dense + w_sparse = 1``.

``method="convex"`` (Bruch, Gai & Ingber 2023, "An Analysis of Fusion Functions for Hybrid Retrieval", ACM
TOIS: a convex combination of normalised scores beats RRF and needs fewer fit queries): each side's scores over
its own ``depth`` candidates are z-normalised (mean 0, std 1; a side whose candidates all score the same gives
0), a chunk the side did not return takes that side's lowest normalised score, and the fused score is
``w_dense * z_dense + w_sparse * z_sparse``. Unlike RRF it keeps how far apart the scores are: a BM25 hit far
ahead of its runner-up stays ahead. Ties go to the better rank on the heavier side (sparse at 0.5), then the other.

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

Guard (:func:`guard_weight`): the grid's best weight on the fit queries can still overfit them (the ``tiny``
profile over LawRefBook once gave ``w_dense`` 0.4 to a dense side at known-item recall@1 0.02, and the hybrid fell
below BM25 alone). So a seeded ``guard_share`` of the fit queries is held out of the grid; on those queries each
side alone (``w_dense`` 0 and 1) and the grid's weight are scored by recall@1 + MRR@10, and the fused weight is
kept only when it beats the better single side (strictly, and with no lower recall@1); otherwise the fit falls
back to that side's weight (BM25 on a tie). Fewer than ``guard_min`` fit queries: no hold-out, the guard scores
the grid's own queries. The decision and its figures are the manifest's ``fusion.guard``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

from retrieval.metrics import doc_metrics
from storage.bounds import check_bounds, check_order


METHODS = ("rrf", "convex")


@dataclass(frozen=True)
class FusionConfig:
    """rrf_k: RRF damping constant (60, Cormack et al.); depth: candidates taken from each side;
    grid: steps of the ``w_dense`` grid; max_queries: mined fit queries kept (seeded sample);
    lead_min/lead_max: chars of a lead sentence used as a query; mask_leads: fit on a corpus copy with the
    lead queries cut out of their chunks (ICT); seed: sampling seed; refit_share: share of the chunks that may be
    added or removed since the last fit (cumulated over refreshes) before a refresh fits the weights again (0:
    every refresh refits; the encoder, the sparse key or this config changing always refits); method: ``rrf`` or
    ``convex`` (module doc); guard_share: share of the fit queries held out of the grid to check the fused weight
    against each side alone; guard_min: fewest fit queries for a hold-out (module doc, "Guard")."""

    rrf_k: int = 60
    depth: int = 100
    grid: int = 20
    max_queries: int = 400
    lead_min: int = 8
    lead_max: int = 60
    mask_leads: bool = True
    seed: int = 13
    refit_share: float = 0.05
    method: str = "rrf"
    guard_share: float = 0.3
    guard_min: int = 10

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"FusionConfig.method = {self.method!r}: must be one of {METHODS}")
        check_bounds(self, rrf_k=(0, 1_000_000), depth=(1, 1_000_000), grid=(1, 10_000), max_queries=(1, None),
                     lead_min=(1, 10_000), lead_max=(1, 10_000), seed=(0, 2 ** 32 - 1), refit_share=(0, 1),
                     guard_share=(0, 0.9), guard_min=(2, None))
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


def _znorm(rows: Sequence[int], scores: Sequence[float] | None) -> tuple[dict[int, float], float]:
    """``{row: z-score}`` over one side's candidates and the value given to rows it did not return."""
    x = np.asarray(scores if scores is not None else [], dtype=np.float64)[:len(rows)]
    if not len(x):
        return {}, 0.0
    sd = float(x.std())
    z = (x - x.mean()) / sd if sd > 0 and np.isfinite(sd) else np.zeros_like(x)
    return {int(r): float(v) for r, v in zip(rows, z)}, float(z.min())


def fuse_convex(dense_rows: Sequence[int], dense_scores: Sequence[float], sparse_rows: Sequence[int],
                sparse_scores: Sequence[float], w_dense: float) -> list[tuple[int, float, int | None, int | None]]:
    """Convex combination of z-normalised scores of two ranked row lists (module doc).

    Args: each side's rows best first and their scores (same length; higher is better).
    Returns (row, fused score, dense rank, sparse rank) best first, ranks 1-based or None as :func:`fuse`.
    """
    zd, d_floor = _znorm(dense_rows, dense_scores)
    zs, s_floor = _znorm(sparse_rows, sparse_scores)
    dr = {int(r): i + 1 for i, r in enumerate(dense_rows)}
    sr = {int(r): i + 1 for i, r in enumerate(sparse_rows)}
    big = len(dr) + len(sr) + 1
    out = [(row, w_dense * zd.get(row, d_floor) + (1.0 - w_dense) * zs.get(row, s_floor), dr.get(row), sr.get(row))
           for row in dr.keys() | sr.keys()]
    heavier_dense = w_dense > 0.5
    out.sort(key=lambda t: (-t[1], *((t[2] or big, t[3] or big) if heavier_dense else (t[3] or big, t[2] or big)),
                            t[0]))
    return out


def fuse_with(method: str, dense_rows: Sequence[int], dense_scores: Sequence[float] | None,
              sparse_rows: Sequence[int], sparse_scores: Sequence[float] | None, w_dense: float, rrf_k: int = 60
              ) -> list[tuple[int, float, int | None, int | None]]:
    """:func:`fuse` (``rrf``) or :func:`fuse_convex` (``convex``; needs both sides' scores).

    Raises:
        ValueError: unknown method, or ``convex`` without scores.
    """
    if method == "rrf":
        return fuse(dense_rows, sparse_rows, w_dense, rrf_k)
    if method != "convex":
        raise ValueError(f"unknown fusion method {method!r} (one of {METHODS})")
    if dense_scores is None or sparse_scores is None:
        raise ValueError("convex fusion needs the scores of both sides")
    return fuse_convex(dense_rows, dense_scores, sparse_rows, sparse_scores, w_dense)


def _objective(m: dict) -> float:
    return m["recall@10"] + m["mrr@10"]


def _guard_objective(m: dict) -> float:
    return m["recall@1"] + m["mrr@10"]


def guard_split(n: int, cfg: FusionConfig) -> tuple[np.ndarray, np.ndarray]:
    """(grid query indices, held-out query indices) of ``n`` fit queries: a seeded (``cfg.seed``) permutation,
    ``round(n * cfg.guard_share)`` held out when ``n >= cfg.guard_min`` (at least one on each side), else no
    hold-out (the guard then scores the grid's own queries)."""
    order = np.random.default_rng(cfg.seed).permutation(n)
    held = min(max(round(n * cfg.guard_share), 1), n - 1) if n >= cfg.guard_min and cfg.guard_share > 0 else 0
    return np.sort(order[held:]), np.sort(order[:held])


def guard_weight(w_grid: float, sides: dict[float, dict]) -> tuple[float, str]:
    """(kept ``w_dense``, decision ``fused`` | ``sparse`` | ``dense``): ``w_grid`` when its metrics
    ``sides[w_grid]`` beat the better of ``sides[0.0]`` (BM25 alone) and ``sides[1.0]`` (dense alone) by
    recall@1 + MRR@10, strictly and with no lower recall@1; else that side's weight (BM25 on a tie)."""
    best_w = 1.0 if _guard_objective(sides[1.0]) > _guard_objective(sides[0.0]) else 0.0
    side = sides[best_w]
    if w_grid not in (0.0, 1.0):
        fused = sides[w_grid]
        if _guard_objective(fused) > _guard_objective(side) and fused["recall@1"] >= side["recall@1"]:
            return w_grid, "fused"
    return best_w, "dense" if best_w == 1.0 else "sparse"


def fit_fusion(dense: Sequence[Sequence[int]], sparse: Sequence[Sequence[int]], row_doc: Sequence[str],
               gold: Sequence[set[str] | str], cfg: FusionConfig = FusionConfig(),
               dense_scores: Sequence[Sequence[float]] | None = None,
               sparse_scores: Sequence[Sequence[float]] | None = None) -> dict:
    """Pick ``w_dense`` on the grid that maximises recall@10 + MRR@10 of the fused ranking on the grid's share of
    the queries, then keep it only if it beats the better single side on the held-out share (module doc,
    "Guard").

    Args:
        dense, sparse: per query, chunk rows best first (top ``depth`` of each side).
        row_doc: doc id of each chunk row. gold: per query, its target doc id(s).
        dense_scores, sparse_scores: per query, the scores of those rows (needed by ``cfg.method="convex"``).

    Raises:
        ValueError: ``convex`` without scores.

    Returns:
        {"w_dense", "w_sparse", "rrf_k", "depth", "queries", "dense", "sparse", "hybrid" (metrics dicts over all
        fit queries at ``w_dense`` 1, 0 and the kept weight), "curve" ([w_dense, objective] per grid point, on
        the grid's queries), "guard" ({"decision", "w_grid", "queries", "held_out", "objective", "dense",
        "sparse", "fused"}: the held-out figures)}; with no queries: equal weights, unfitted.
    """
    base = {"rrf_k": cfg.rrf_k, "depth": cfg.depth, "queries": len(gold), "method": cfg.method}
    if not len(gold):
        return {**base, "w_dense": 0.5, "w_sparse": 0.5, "fitted": False}
    ds = dense_scores if dense_scores is not None else [None] * len(dense)
    ss = sparse_scores if sparse_scores is not None else [None] * len(sparse)

    def metrics(w: float, idx) -> dict:
        ranked = [[row_doc[r] for r, *_ in fuse_with(cfg.method, dense[i], ds[i], sparse[i], ss[i], w,
                                                     cfg.rrf_k)[:10]] for i in idx]
        return doc_metrics(ranked, [gold[i] for i in idx])

    grid_idx, held_idx = guard_split(len(gold), cfg)
    curve = [(i / cfg.grid, metrics(i / cfg.grid, grid_idx)) for i in range(cfg.grid + 1)]
    w_grid, _ = max(curve, key=lambda c: (round(_objective(c[1]), 9), -abs(c[0] - 0.5)))
    check = held_idx if len(held_idx) else grid_idx
    sides = {w: metrics(w, check) for w in {0.0, 1.0, w_grid}}
    w, decision = guard_weight(w_grid, sides)
    every = range(len(gold))
    guard = {"decision": decision, "w_grid": w_grid, "queries": len(check), "held_out": bool(len(held_idx)),
             "objective": "recall@1 + mrr@10", "dense": sides[1.0], "sparse": sides[0.0], "fused": sides[w_grid]}
    return {**base, "fitted": True, "w_dense": w, "w_sparse": 1.0 - w,
            "dense": metrics(1.0, every), "sparse": metrics(0.0, every), "hybrid": metrics(w, every),
            "curve": [[cw, round(_objective(m), 4)] for cw, m in curve], "guard": guard, "config": asdict(cfg)}
