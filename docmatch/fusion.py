"""The fused related ranking (SPEC §12): lexical match, mean segment vectors, LTM-B and typed links, one score.

Signals of a query document ``a`` against every other document of a pool (the index version's documents):

- ``bm25``: BM25 of ``a``'s whole text against each document's text over character bigrams
  (:class:`docmatch.baselines.SparseBM25`, IDF over the pool);
- ``mean``: cosine of the means of the two documents' segment vectors;
- ``ltm``: LTM-B's match logit (:mod:`docmatch.ltm`);
- ``link``: 1 when either text names the other's title in 《》 (:mod:`docmatch.links`, any type), else 0;
- ``knn_link``: what ``a``'s nearest documents implement. The :data:`NEIGHBOURS` documents nearest to ``a`` by
  the mean of two z-scores, ``bm25`` of the texts and BM25 of the titles over character bigrams (same-named rules
  of other places are near by title), each vote with that positive score for the document their first
  ``implements`` link names (``根据《X》…``); the votes are divided by the largest, so the most voted gets 1. A document whose own
  text no longer names what it implements (a citation lost in conversion, an excerpt, a text that names its basis
  only by an abbreviation) still gets it from the documents like it: item-based nearest-neighbour collaborative
  filtering (Sarwar et al. 2001) over the citation graph, as in neighbour-based citation recommendation;
- ``cited``: how often the pool's documents name the candidate as their basis, ``log(1 + n)`` with ``n`` the
  documents whose first ``implements`` link names it: a prior of the candidate alone, the same for every query
  (citation recommenders rank with the candidate's log citation count beside text match, Bhagavatula et al.
  2018, "Content-Based Citation Recommendation", NAACL). Among two laws a regulation draws on it favours the
  general one (环境保护法 before 大气污染防治法), which its ``根据《…》`` clause names first.

``bm25``, ``mean``, ``ltm`` and ``cited`` are z-normalised over the pool (mean 0, std 1 over all other documents; a constant
signal gives 0), ``link`` stays 0/1, ``knn_link`` in [0, 1], and the fused score is ``w · features`` (a convex-combination fusion of
normalised scores, Bruch, Gai & Ingber 2023, ACM TOIS). The weights are fitted on labelled pairs
(:func:`fit_weights`: a grid, best mean reciprocal rank of the gold among the candidates, ties to recall@1
then to the widest mean margin of the gold per unit of weight), never on the pairs the figures are reported on.
A pair's score is its fused score in ``a``'s ranking, so a pair file's scores rank as the related list does.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from docmatch.baselines import SparseBM25
from docmatch.links import title_keys, typed_links

SIGNALS = ("bm25", "mean", "ltm", "link", "knn_link", "cited")
# unfitted: no labelled pair to fit on (a prior of the candidate alone would put the most cited in every list)
DEFAULT_WEIGHTS = {"bm25": 1.0, "mean": 1.0, "ltm": 0.0, "link": 1.0, "knn_link": 1.0, "cited": 0.0}
GRID = {"bm25": (0.0, 0.25, 0.5, 0.75, 1.0), "mean": (0.0, 0.25, 0.5, 0.75, 1.0),
        "ltm": (0.0, 0.25, 0.5, 0.75, 1.0), "link": (0.0, 0.5, 1.0, 2.0, 4.0), "knn_link": (0.0, 1.0, 2.0, 4.0, 8.0),
        "cited": (0.0, 0.1, 0.25, 0.5)}
LTM_DEPTH = 500  # documents nearest by mean vector that LTM-B scores for a query; the others get its lowest logit
NEIGHBOURS = 10  # documents whose first implements link votes in knn_link (chosen on train + dev, SPEC §12)


def znorm(x: np.ndarray) -> np.ndarray:
    """(x - mean) / std of a float array; zeros when it is constant or empty."""
    x = np.asarray(x, dtype=np.float64)
    sd = float(x.std()) if len(x) else 0.0
    return (x - x.mean()) / sd if sd > 0 and np.isfinite(sd) else np.zeros_like(x)


@dataclass
class SignalPool:
    """The documents one ranks against: ``ids`` (n,), ``texts`` / ``titles`` (id -> str), ``means`` (n, dim)
    L2-normalised mean segment vectors in ``ids`` order, ``ltm``: ``(a, cand ids) -> logits`` or None (the
    signal is then 0). Builds the BM25 matrices, the link table and the ``cited`` counts (n,) once."""

    ids: list[str]
    texts: dict[str, str]
    titles: dict[str, str]
    means: np.ndarray
    ltm: Callable[[str, list[str]], np.ndarray] | None = None
    row: dict = field(init=False)

    def __post_init__(self):
        self.row = {d: i for i, d in enumerate(self.ids)}
        self.bm25 = SparseBM25([self.texts.get(d, "") for d in self.ids])
        self.title_bm25 = SparseBM25([self.titles.get(d) or "" for d in self.ids])
        keys = title_keys({d: self.titles.get(d) or "" for d in self.ids})
        self.links = {d: typed_links(f"{self.titles.get(d) or ''}\n{self.texts.get(d, '')}", keys, d)
                      for d in self.ids}
        self.basis = np.array([self.row[first_implemented(self.links[d]) or d] for d in self.ids], dtype=np.int64)
        own = self.basis == np.arange(len(self.ids))
        self.cited = np.log1p(np.bincount(self.basis[~own], minlength=len(self.ids)).astype(np.float64))

    def features(self, a: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows (n - 1,) of every other document, features (n - 1, |SIGNALS|) in :data:`SIGNALS` order,
        normalised over those rows as the module docstring says).

        Raises:
            KeyError: ``a`` not in the pool.
        """
        i = self.row[a]
        rows = np.array([j for j in range(len(self.ids)) if j != i], dtype=np.int64)
        bm = self.bm25.scores(self.texts.get(a, ""))[rows]
        mean = self.means[rows] @ self.means[i]
        others = [self.ids[j] for j in rows]
        ltm = np.asarray(self.ltm(a, others), dtype=np.float64) if self.ltm is not None else np.zeros(len(rows))
        out_links, link = self.links[a], np.zeros(len(rows))
        for k, d in enumerate(others):
            link[k] = float(d in out_links or a in self.links[d])
        zb = znorm(bm)
        near = (zb + znorm(self.title_bm25.scores(self.titles.get(a) or "")[rows])) / 2
        return rows, np.stack([zb, znorm(mean), znorm(ltm), link, self.neighbour_votes(i, rows, near),
                               znorm(self.cited[rows])], axis=1)

    def neighbour_votes(self, i: int, rows: np.ndarray, near: np.ndarray) -> np.ndarray:
        """``knn_link`` (len(rows),) in [0, 1] of the document at row ``i`` over ``rows`` (the other documents,
        ``near`` their nearness to it: the mean z-score of text and title BM25): the :data:`NEIGHBOURS` nearest
        vote with their positive nearness for the document their first ``implements`` link names (module
        docstring)."""
        votes = np.zeros(len(self.ids))
        for k in np.argsort(-near, kind="stable")[:NEIGHBOURS]:
            target = self.basis[rows[k]]
            if near[k] > 0 and target not in (rows[k], i):
                votes[target] += near[k]
        v = votes[rows]
        top = v.max() if len(v) else 0.0
        return v / top if top > 0 else v

    def kinds(self, a: str, b: str) -> str | None:
        """The link type between ``a`` and ``b`` (``a`` naming ``b`` first, then ``b`` naming ``a``) or None."""
        return self.links[a].get(b) or self.links[b].get(a)


def first_implemented(links: dict[str, str]) -> str | None:
    """The first document a text's typed links (:func:`docmatch.links.typed_links`, in text order) name as
    ``implements``, or None."""
    return next((d for d, kind in links.items() if kind == "implements"), None)


def nearest_by_mean(means: np.ndarray, i: int, rows: np.ndarray, depth: int = LTM_DEPTH) -> np.ndarray:
    """Positions in ``rows`` (k,) of the ``depth`` rows of ``means`` (n, dim) nearest to row ``i`` by cosine
    (L2-normalised rows), nearest first, ties in order; every position when ``k <= depth``: the documents LTM-B
    scores for a query, in serving and in the fit alike."""
    if len(rows) <= depth:
        return np.arange(len(rows))
    return np.argsort(-(means[rows] @ means[i]), kind="stable")[:depth]


def weight_vector(weights: dict) -> np.ndarray:
    """The weights (|SIGNALS|,) in :data:`SIGNALS` order (missing ones 0)."""
    return np.array([float(weights.get(s, 0.0)) for s in SIGNALS])


def gold_ranks(feats: np.ndarray, gold: np.ndarray, w: np.ndarray) -> np.ndarray:
    """1-based gold ranks (q,) of ``feats`` (q, c, s) candidates scored by ``w`` (s,) (or (g, s): (g, q)), a
    tie counting against the gold."""
    s = feats @ w.T if w.ndim == 2 else feats @ w
    if w.ndim == 2:
        s = np.moveaxis(s, -1, 0)  # (g, q, c)
    g = np.take_along_axis(s, np.broadcast_to(gold[..., None], s.shape[:-1] + (1,)), -1)
    return (s >= g).sum(-1)


def _margins(feats: np.ndarray, gold: np.ndarray, ws: np.ndarray) -> np.ndarray:
    """Mean over queries of (gold score - best other score) / total weight, per weight row of ``ws`` (g, s)."""
    s = np.moveaxis(feats @ ws.T, -1, 0)  # (g, q, c)
    g = np.take_along_axis(s, np.broadcast_to(gold[None, :, None], s.shape[:-1] + (1,)), -1)[..., 0]
    other = s.copy()
    np.put_along_axis(other, np.broadcast_to(gold[None, :, None], s.shape[:-1] + (1,)), -np.inf, -1)
    return (g - other.max(-1)).mean(1) / ws.sum(1)


def fit_weights(feats: np.ndarray, gold: np.ndarray, grid: dict = GRID, only: Sequence[str] | None = None
                ) -> tuple[dict, dict]:
    """The grid weights (:data:`GRID`; ``only``: the signals allowed a weight, the others 0) with the best MRR of
    the gold (``gold`` (q,) index into the candidates of ``feats`` (q, c, |SIGNALS|)), ties to recall@1 then to the
    widest mean margin of the gold over the best other candidate per unit of total weight.
    Returns (weights, {"mrr", "recall@1", "queries", "grid"}).

    Raises:
        ValueError: no query.
    """
    if not len(gold):
        raise ValueError("fitting the fusion weights needs at least one labelled query")
    axes = [grid[s] if (only is None or s in only) else (0.0,) for s in SIGNALS]
    ws = np.array([w for w in itertools.product(*axes) if any(w)], dtype=np.float64)
    best, best_key = None, None
    for lo in range(0, len(ws), 64):
        r = gold_ranks(feats, gold, ws[lo:lo + 64])  # (g, q)
        mrr, r1, margin = (1.0 / r).mean(1), (r == 1).mean(1), _margins(feats, gold, ws[lo:lo + 64])
        for j in range(len(r)):
            key = (round(float(mrr[j]), 9), round(float(r1[j]), 9), round(float(margin[j]), 9))
            if best_key is None or key > best_key:
                best, best_key = ws[lo + j], key
    return dict(zip(SIGNALS, map(float, best))), {"mrr": best_key[0], "recall@1": best_key[1],
                                                   "queries": int(len(gold)), "grid": len(ws)}


def query_features(pool: SignalPool, queries: Sequence[str], golds: Sequence[str], cands: Sequence[str]
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(features (q, c, |SIGNALS|) of each query against ``cands`` (z-normalised over the whole pool, as served), gold
    index (q,)) for queries whose gold is a candidate."""
    cidx = {c: k for k, c in enumerate(cands)}
    fs, gs = [], []
    for a, b in zip(queries, golds):
        if b not in cidx:
            continue
        rows, f = pool.features(a)
        pos = {int(r): k for k, r in enumerate(rows)}
        take = [pos.get(pool.row[c]) for c in cands]
        full = np.full((len(cands), len(SIGNALS)), -1e3)  # a candidate that is the query itself ranks last
        for k, t in enumerate(take):
            if t is not None:
                full[k] = f[t]
        fs.append(full)
        gs.append(cidx[b])
    return np.stack(fs) if fs else np.zeros((0, len(cands), len(SIGNALS))), np.array(gs, dtype=np.int64)


def metrics(feats: np.ndarray, gold: np.ndarray, weights: dict) -> dict:
    """recall@1 and MRR (ties against the gold) of ``weights`` on ``feats`` / ``gold`` (:func:`query_features`)."""
    r = gold_ranks(feats, gold, weight_vector(weights))
    return {"recall@1": float((r == 1).mean()) if len(r) else 0.0, "mrr": float((1.0 / r).mean()) if len(r) else 0.0,
            "queries": int(len(r))}
