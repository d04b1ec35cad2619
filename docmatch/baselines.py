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


class SparseBM25:
    """The same BM25 as :func:`retrieval.sparse.bm25_scores` (Lucene variant, IDF and average length over the
    candidates ``texts``, char bigrams, each query bigram counted as often as it occurs), as one sparse
    (n, vocab) weight matrix so a whole-text query (thousands of bigrams) costs one sparse product instead of
    a pass over the candidates per bigram. ``scores(text)`` -> (n,) float64; ``score_one(text, doc_text)``
    scores one replacement candidate text (e.g. stripped for this pair) with the collection's IDF and
    average length."""

    def __init__(self, texts: Sequence[str], k1: float = 1.5, b: float = 0.75):
        from scipy.sparse import csr_matrix

        counts = [Counter(bigrams(t)) for t in texts]
        self.vocab = {t: i for i, t in enumerate(sorted({t for c in counts for t in c}))}
        lens = np.maximum(np.array([sum(c.values()) for c in counts], dtype=np.float64), 1.0)
        self.k1, self.b, self.avg = k1, b, float(lens.mean()) if len(lens) else 1.0
        rows = [i for i, c in enumerate(counts) for _ in c]
        cols = [self.vocab[t] for c in counts for t in c]
        tf = np.array([v for c in counts for v in c.values()], dtype=np.float64)
        df = np.bincount(cols, minlength=len(self.vocab)).astype(np.float64)
        self.idf = np.log(1 + (len(texts) - df + 0.5) / (df + 0.5))
        w = self.idf[cols] * tf / (self._norm(lens[rows]) + tf) if len(tf) else tf
        self.weights = csr_matrix((w, (rows, cols)), shape=(len(texts), len(self.vocab)))

    def _norm(self, length):
        return self.k1 * ((1 - self.b) + self.b * length / self.avg)

    def _query(self, text: str) -> np.ndarray:
        q = np.zeros(len(self.vocab))
        for t, n in Counter(bigrams(text)).items():
            if t in self.vocab:
                q[self.vocab[t]] += n
        return q

    def scores(self, text: str) -> np.ndarray:
        return np.asarray(self.weights @ self._query(text), dtype=np.float64)

    def score_one(self, text: str, doc_text: str) -> float:
        d = Counter(bigrams(doc_text))
        norm = self._norm(max(sum(d.values()), 1))
        return float(sum(n * self.idf[self.vocab[t]] * d[t] / (norm + d[t])
                         for t, n in Counter(bigrams(text)).items() if t in self.vocab and t in d))


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
