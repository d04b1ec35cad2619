"""The baselines LTM-B must beat (SPEC §12), each scoring one document against candidate documents.

- ``truncation``: cosine of the FIRST segment vectors only (a long document cut to the encoder's window).
- ``mean``: cosine of the means of all segment vectors (the plain segmentation method).
- ``bm25``: BM25 of one document's text against the candidates' texts, over character bigrams, with the
  project's one BM25 formula in :mod:`retrieval.sparse` (Lucene variant; IDF over the candidates):
  :func:`~retrieval.sparse.bm25_scores` per query (:class:`BigramBM25`) or its sparse-matrix form
  :class:`~retrieval.sparse.BM25Matrix` (:class:`SparseBM25`).
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from retrieval.sparse import BM25Matrix, bm25_scores

MATRIX_BASELINES = ("truncation", "mean")


def doc_vector(m: np.ndarray, kind: str) -> np.ndarray:
    """The L2-normalised vector (hidden,) of a segment matrix ``m`` (rows, hidden): its first row
    (``truncation``) or the mean of its rows (``mean``).

    Raises:
        ValueError: an unknown kind or an empty matrix.
    """
    if kind not in MATRIX_BASELINES or not len(m):
        raise ValueError(f"doc_vector needs a non-empty matrix and a kind of {MATRIX_BASELINES}, got {kind!r}")
    v = m[0] if kind == "truncation" else m.mean(0)
    return (v / max(float(np.linalg.norm(v)), 1e-12)).astype(np.float32)


def cosine_scores(query: np.ndarray, cands: Sequence[np.ndarray], kind: str) -> np.ndarray:
    """Cosine (n,) float32 of the query matrix against each candidate matrix, both reduced by ``kind``."""
    q = doc_vector(query, kind)
    return np.stack([doc_vector(c, kind) for c in cands]) @ q


def bigrams(text: str) -> list[str]:
    """Character bigrams of ``text`` with every char that is not a letter or digit removed first."""
    t = "".join(ch for ch in text if ch.isalnum())
    return [t[i:i + 2] for i in range(len(t) - 1)]


class BigramBM25:
    """BM25 over character bigrams of a fixed candidate set (``texts``): ``scores(text)`` -> (n,) float32 by
    :func:`retrieval.sparse.bm25_scores`, every bigram of the query counted as often as it occurs."""

    def __init__(self, texts: Sequence[str]):
        toks = [bigrams(t) for t in texts]
        self.counts = [Counter(t) for t in toks]
        self.lens = np.array([len(t) for t in toks])

    def scores(self, text: str) -> np.ndarray:
        return bm25_scores(bigrams(text), self.counts, self.lens)


class SparseBM25:
    """BM25 over character bigrams (:func:`bigrams`) of a fixed candidate set ``texts``, scored by
    :class:`retrieval.sparse.BM25Matrix` (the same BM25 as :func:`retrieval.sparse.bm25_scores`: Lucene
    variant, IDF and average length over the candidates, each query bigram counted as often as it occurs), so
    a whole-text query (thousands of bigrams) costs one sparse product. ``scores(text)`` -> (n,) float64;
    ``score_one(text, doc_text)`` scores one replacement candidate text (e.g. stripped for this pair) with the
    collection's IDF and average length. ``matrix`` is the :class:`~retrieval.sparse.BM25Matrix`."""

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75):
        self.matrix = BM25Matrix([Counter(bigrams(t)) for t in texts], k1, b)

    def scores(self, text: str) -> np.ndarray:
        return self.matrix.scores(Counter(bigrams(text)))

    def score_one(self, text: str, doc_text: str) -> float:
        return self.matrix.score_one(Counter(bigrams(text)), Counter(bigrams(doc_text)))


def pair_stripped_scores(bm: SparseBM25, query: str, query_title: str, cands: Sequence[str], texts: dict,
                         titles: dict, raw: dict | None = None) -> np.ndarray:
    """BM25 (n,) of ``query`` (its raw text) against ``cands`` (ids; ``bm`` indexes their raw ``texts`` in
    this order) with SPEC §12's pair-specific stripping: for each pair, the query without what names that
    candidate (:func:`docmatch.pairs.strip_other` with ``titles[c]``) and the candidate without what names the
    query (``query_title``); only pairs where something was stripped are rescored."""
    from docmatch.pairs import strip_other

    s = bm.scores(query)
    for i, c in enumerate(cands):
        q2, d2 = strip_other(query, titles[c]), strip_other(texts[c], query_title)
        if q2 != query or d2 != texts[c]:
            s[i] = bm.score_one(q2, d2)
    return s
