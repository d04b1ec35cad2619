"""The baselines LTM-B must beat (SPEC §12), each scoring one document against candidate documents.

- ``truncation``: cosine of the FIRST segment vectors only (a long document cut to the encoder's window).
- ``mean``: cosine of the means of all segment vectors (the plain segmentation method).
- ``bm25``: BM25 of one document's text against the candidates' texts, over character bigrams, with the
  project's one BM25 kernel :func:`retrieval.sparse.bm25_scores` (Lucene variant; IDF over the candidates).
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

import numpy as np

from retrieval.sparse import bm25_scores

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
