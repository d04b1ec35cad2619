"""Serving the fused related ranking (SPEC §12; :mod:`docmatch.fusion`) over an index version's own documents.

The ``related`` part's ``info.fusion.weights`` (fitted at build, :func:`docmatch.stage.build_related_part`)
weigh six signals of the version's documents: BM25 over character bigrams of their texts (the chunk texts
joined in order, overlaps dropped), the cosine of their mean chunk vectors (every chunk), LTM-B (the part's
model; scored on the ``depth`` documents nearest by mean vector, the rest given the lowest score computed),
typed links (:mod:`docmatch.links`), what the nearest documents implement (``knn_link``) and how often the
version's documents name the candidate as their basis (``cited``). A part fitted before ``knn_link`` or ``cited``
existed has no weight for them and ranks as it did (a missing weight is 0). A part without
``info.fusion`` serves LTM-B alone, as before.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from docmatch.fusion import LTM_DEPTH, SignalPool, nearest_by_mean, weight_vector


def version_texts(version_dir: str | os.PathLike) -> dict[str, str]:
    """doc_id -> text of every document of an index version: its chunk texts in ``start`` order, each chunk
    without the chars the previous one already covered (``end`` of the previous chunk past this ``start``).

    Raises:
        FileNotFoundError: no ``chunks.parquet``.
    """
    c = pd.read_parquet(Path(version_dir) / "chunks.parquet", columns=["doc_id", "start", "end", "text"])
    out = {}
    for doc, g in c.sort_values(["doc_id", "start"]).groupby("doc_id", sort=False):
        parts, end = [], -1
        for s, e, t in zip(g["start"], g["end"], g["text"]):
            parts.append(t[max(0, end - int(s)):] if end > s else t)
            end = max(end, int(e))
        out[str(doc)] = "".join(parts)
    return out


def version_means(version_dir: str | os.PathLike, ids: list[str], drop: dict | None = None) -> np.ndarray:
    """L2-normalised means (n, hidden) float32 of every chunk vector of each document of ``ids``, in order
    (``drop``: :func:`docmatch.segments.version_matrices`'s chunks left out)."""
    from docmatch.segments import version_matrices

    mats = version_matrices(version_dir, ids, drop=drop)
    m = np.stack([mats[d].mean(0) for d in ids]).astype(np.float32)
    return m / np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)


class FusedRanker:
    """The fused ranking of one version (module docstring) over a :class:`docmatch.serve.RelatedIndex` ``rel``
    (its LTM-B, ids and titles) with ``weights`` (signal -> weight). ``related(doc_id, k)`` and ``score(pairs)``
    as the index's own, with fused scores (``w · features``: not probabilities)."""

    def __init__(self, rel, texts: dict[str, str], means: np.ndarray, weights: dict, depth: int = LTM_DEPTH):
        self.rel, self.w, self.depth = rel, weight_vector(weights), depth
        self.weights = dict(weights)
        ltm = self._ltm if self.weights.get("ltm") else None
        self.pool = SignalPool(list(rel.ids), texts, dict(rel.title), means, ltm)

    def _logits(self, a: str, rows: np.ndarray) -> np.ndarray:
        """LTM-B's match logits (n,) of ``a`` against the documents at ``rows`` (as fitted: not probabilities)."""
        import torch

        from docmatch.ltm import mean_cosine

        rel, i, n = self.rel, self.rel.row[a], len(rows)
        with torch.no_grad():
            am = rel.mask[i:i + 1].expand(n, -1)
            cos = mean_cosine(rel.x[i:i + 1].expand(n, -1, -1), am, rel.x[rows], rel.mask[rows])
            return rel.model.match(rel.h[i:i + 1].expand(n, -1, -1), am, rel.h[rows], rel.mask[rows], cos).numpy()

    def _ltm(self, a: str, cands: list[str]) -> np.ndarray:
        rows = np.array([self.rel.row[c] for c in cands], dtype=np.int64)
        if len(rows) <= self.depth:
            return self._logits(a, rows)
        near = nearest_by_mean(self.pool.means, self.pool.row[a], rows, self.depth)
        s = self._logits(a, rows[near])
        out = np.full(len(rows), float(s.min()), dtype=np.float64)
        out[near] = s
        return out

    def scores(self, a: str) -> tuple[np.ndarray, np.ndarray]:
        """(rows of every other document, fused scores) of ``a``."""
        rows, f = self.pool.features(a)
        return rows, f @ self.w

    def related(self, doc_id: str, k: int = 10) -> list[dict]:
        """The ``k`` best other documents by fused score, ties by doc_id; each hit also names its ``link``
        type with ``doc_id`` when there is one."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        rows, s = self.scores(doc_id)
        order = np.lexsort((rows, -s))[:k]
        out = []
        for j in order:
            d = self.rel.ids[rows[j]]
            hit = self.rel._hit(d, float(s[j]))
            link = self.pool.kinds(doc_id, d)
            out.append({**hit, "link": link} if link else hit)
        return out

    def score(self, pairs: list[tuple[str, str]]) -> list[float]:
        """Fused scores of ``(a, b)`` doc-id pairs: ``b``'s score in ``a``'s ranking (computed once per ``a``)."""
        memo: dict[str, dict[int, float]] = {}
        out = []
        for a, b in pairs:
            if a not in memo:
                rows, s = self.scores(a)
                memo[a] = dict(zip(rows.tolist(), s.tolist()))
            out.append(memo[a].get(self.rel.row[b], float("-inf")))
        return out


def attach(rel, version_dir: str | os.PathLike):
    """``rel`` with ``rel.fused`` set to a :class:`FusedRanker` when its part's info has ``fusion.weights``
    (else None): the version's texts and all-chunk means read once."""
    weights = (rel.info.get("fusion") or {}).get("weights")
    rel.fused = None
    if weights:
        rel.fused = FusedRanker(rel, version_texts(version_dir), version_means(version_dir, list(rel.ids)), weights)
    return rel
