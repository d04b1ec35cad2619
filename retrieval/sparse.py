"""Sparse side of an index version (SPEC §7): BM25 over the segmenter's tokens, with ``bm25s``.

Chunks are tokenized with the corpus segmenter (``corpus.segment.load_segmenter``; tokens without a
letter or digit dropped, Latin lower-cased), counted (:mod:`retrieval.term_counts`) and scored with Okapi BM25 (Robertson & Zaragoza 2009,
"The Probabilistic Relevance Framework: BM25 and Beyond"; Lucene's IDF variant as implemented by
bm25s, Lù 2024, arXiv:2407.03618). ``index/vN/sparse/`` holds the bm25s matrices and the term counts
(``counts.npz``, ``vocab.parquet``) so a refresh tokenizes only new or changed chunks and copies the counts of
the others; versions written before the counts hold ``tokens.parquet`` (``chunk_id, tokens``), still read.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import bm25s
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from corpus.segment import load_segmenter
from retrieval.term_counts import TermCounts, bm25_from_counts
from storage.bounds import check_bounds, check_choice

TOKENS = "tokens.parquet"
Tokenize = Callable[[Sequence[str]], list[list[str]]]


@dataclass(frozen=True)
class SparseConfig:
    """segmenter: backend for ``load_segmenter`` (``auto`` resolves to HanLP neural when cached, else
    the HanLP dictionary; the resolved backend and its dictionary/model id go to the manifest);
    k1, b: BM25 saturation and length normalisation; method: bm25s scoring variant."""

    segmenter: str = "auto"
    k1: float = 1.5
    b: float = 0.75
    method: str = "lucene"

    def __post_init__(self):
        check_bounds(self, k1=(0, 100), b=(0, 1))
        check_choice(self, "method", ("robertson", "lucene", "atire", "bm25l", "bm25+"))


def keep_token(w: str) -> bool:
    """A token counts for BM25 when it has a letter or digit (punctuation and spaces are dropped)."""
    return any(ch.isalnum() for ch in w)


def make_tokenizer(backend: str = "auto") -> tuple[Tokenize, dict]:
    """(texts -> token lists, segmenter identity ``{"backend", "model_id"}``) for ``backend``.

    Raises:
        corpus.segment.SegmenterUnavailable / ValueError: see ``load_segmenter``.
    """
    seg = load_segmenter(backend)

    def tokenize(texts: Sequence[str]) -> list[list[str]]:
        return [[w.lower() for w in ws if keep_token(w)] for ws in seg.segment(list(texts))]

    return tokenize, {"backend": seg.backend, "model_id": seg.model_id}


class SparseIndex:
    """A BM25 index over token lists whose rows align with ``chunks.parquet``.

    ``scores(tokens)`` -> float32 (n_chunks,); ``top(tokens, k)`` -> (rows, scores) best first.
    """

    def __init__(self, bm25, n_docs: int):
        self.bm25, self.n_docs = bm25, n_docs

    @classmethod
    def build(cls, tokens: Sequence[Sequence[str]], cfg: SparseConfig = SparseConfig()) -> "SparseIndex":
        """Index token lists (one per chunk; an empty list is a chunk no query matches)."""
        return cls.from_counts(TermCounts.from_tokens(np.arange(len(tokens)), tokens), cfg)

    @classmethod
    def from_counts(cls, counts: TermCounts, cfg: SparseConfig = SparseConfig()) -> "SparseIndex":
        """Index the chunks' term counts (:mod:`retrieval.term_counts`; the scores bm25s gives their tokens)."""
        return cls(bm25_from_counts(counts, cfg.k1, cfg.b, cfg.method), int(counts.counts.shape[0]))

    def save(self, out_dir: str | os.PathLike) -> None:
        """Write the bm25s matrices, vocabulary and parameters into ``out_dir``."""
        self.bm25.save(str(out_dir), show_progress=False)

    @classmethod
    def load(cls, d: str | os.PathLike) -> "SparseIndex":
        """Load what :meth:`save` wrote.

        Raises:
            FileNotFoundError: ``d`` holds no bm25s index.
        """
        if not (Path(d) / "params.index.json").is_file():
            raise FileNotFoundError(f"no sparse index in {d}")
        bm25 = bm25s.BM25.load(str(d), load_corpus=False)
        return cls(bm25, int(json.loads((Path(d) / "params.index.json").read_text())["num_docs"]))

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        """BM25 score of every chunk for one tokenized query (zeros when no token is indexed)."""
        ids = [i for i in self.bm25.get_tokens_ids(list(tokens)) if i != self.bm25.vocab_dict.get("")]
        if not ids:
            return np.zeros(self.n_docs, dtype=np.float32)
        return np.asarray(self.bm25.get_scores_from_ids(ids), dtype=np.float32)

    def top(self, tokens: Sequence[str], k: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows and scores of the ``k`` best chunks with a positive score, best first (ties by row)."""
        s = self.scores(tokens)
        return top_rows(s, k)


def top_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of the ``k`` highest positive scores, best first, ties broken by row; and their scores."""
    cand = np.flatnonzero(scores > 0)
    order = cand[np.lexsort((cand, -scores[cand]))][:k]
    return order, scores[order]


def write_tokens(d: str | os.PathLike, chunk_ids: np.ndarray, tokens: Sequence[Sequence[str]]) -> None:
    """``tokens.parquet`` (chunk_id int64, tokens list<string>) in ``d``."""
    table = pa.table({"chunk_id": pa.array(np.asarray(chunk_ids, dtype=np.int64)),
                      "tokens": pa.array([list(t) for t in tokens], type=pa.list_(pa.string()))})
    pq.write_table(table, Path(d) / TOKENS, compression="zstd")


def read_tokens(d: str | os.PathLike) -> dict[int, list[str]]:
    """chunk_id -> tokens from ``tokens.parquet`` in ``d`` ({} when absent)."""
    p = Path(d) / TOKENS
    if not p.is_file():
        return {}
    df = pd.read_parquet(p)
    return {int(c): list(t) for c, t in zip(df["chunk_id"], df["tokens"])}


def sparse_key(cfg: SparseConfig, segmenter: dict) -> dict:
    """What must match for stored tokens to be reused: the config and the resolved segmenter."""
    return {**asdict(cfg), "segmenter_backend": segmenter["backend"], "segmenter_model_id": segmenter["model_id"]}


def _idf(n: int, df):
    """BM25 IDF, Lucene variant (Robertson & Zaragoza 2009; Lù 2024): ln(1 + (N − df + 0.5)/(df + 0.5)) for
    ``n`` texts of which ``df`` (a count or an array of counts) hold the token; nats, same shape as ``df``."""
    return np.log(1 + (n - df + 0.5) / (df + 0.5))


def _tf_part(tf, length, avg: float, k1: float, b: float):
    """BM25 term-frequency part tf/(tf + k1·(1 − b + b·length/avg)) (Robertson & Zaragoza 2009):
    ``tf`` the token's count in a text of ``length`` tokens, ``avg`` the collection's mean length;
    elementwise over arrays, in [0, 1)."""
    return tf / (tf + k1 * ((1 - b) + b * length / avg))


def bm25_scores(q_tokens: Sequence[str], doc_counts: list[dict], doc_lens: np.ndarray, k1: float = 1.5,
                b: float = 0.75) -> np.ndarray:
    """BM25, Lucene variant (Robertson & Zaragoza 2009; idf = ln(1 + (N − df + 0.5)/(df + 0.5)), tf part
    tf/(tf + k1·(1 − b + b·len/avg len)); :func:`_idf`, :func:`_tf_part`), of a query against a small set of
    texts scored per query (a question's candidate sentences, the windows of a reranker), IDF over those
    texts: the kernel for texts that are not in the index (the index's chunks are scored by ``bm25s`` over
    :class:`SparseIndex`, the same formula; a fixed collection scored against many long queries is
    :class:`BM25Matrix`). ``doc_counts``: a token → count dict per text, ``doc_lens`` (n,) their token
    counts (an empty text counts as one token, as ``bm25s`` indexes it); each query token counts as often as
    it occurs (``bm25s.BM25(method="lucene").get_scores`` scores the same, float32, to rounding). (n,)
    float32, zeros when nothing matches."""
    n = len(doc_counts)
    out = np.zeros(n, dtype=np.float64)
    if not n:
        return out.astype(np.float32)
    lens = np.maximum(np.asarray(doc_lens, dtype=np.float64), 1.0)
    avg = float(lens.mean())
    for t in q_tokens:
        if not t:
            continue
        tf = np.fromiter((c.get(t, 0) for c in doc_counts), dtype=np.float64, count=n)
        df = np.count_nonzero(tf)
        if df:
            out += _idf(n, df) * _tf_part(tf, lens, avg, k1, b)
    return out.astype(np.float32)


class BM25Matrix:
    """BM25 of a fixed collection of texts as one sparse weight matrix (Robertson & Zaragoza 2009, Lucene
    IDF: :func:`_idf`, :func:`_tf_part`), so a long query (a whole document, thousands of tokens) costs one
    sparse product instead of a pass over the texts per token. It scores exactly as :func:`bm25_scores` over
    the same texts (IDF and average length over them, an empty text counted as one token, each query token
    weighted by its count, the empty token ignored), in float64 instead of float32.

    ``counts``: a token → count dict per text (n texts); ``k1``, ``b``: BM25 saturation and length
    normalisation. Attributes: ``vocab`` token → column (sorted tokens), ``idf`` (vocab,) float64 nats,
    ``weights`` scipy CSR (n, vocab) float64, idf·tf part of each token in each text; ``avg`` mean length.

    Raises:
        ValueError: a negative count.
    """

    def __init__(self, counts: Sequence[dict], k1: float = 1.5, b: float = 0.75):
        if any(v < 0 for c in counts for v in c.values()):
            raise ValueError("BM25Matrix needs non-negative token counts")
        counts = [{t: v for t, v in c.items() if v} for c in counts]
        self.vocab = {t: i for i, t in enumerate(sorted({t for c in counts for t in c}))}
        lens = np.maximum(np.array([sum(c.values()) for c in counts], dtype=np.float64), 1.0)
        self.k1, self.b, self.avg = k1, b, float(lens.mean()) if len(lens) else 1.0
        rows = np.array([i for i, c in enumerate(counts) for _ in c], dtype=np.int64)
        cols = np.array([self.vocab[t] for c in counts for t in c], dtype=np.int64)
        tf = np.array([v for c in counts for v in c.values()], dtype=np.float64)
        self.idf = _idf(len(counts), np.bincount(cols, minlength=len(self.vocab)).astype(np.float64))
        w = self.idf[cols] * _tf_part(tf, lens[rows], self.avg, k1, b)
        self.weights = sp.csr_matrix((w, (rows, cols)), shape=(len(counts), len(self.vocab)))

    def _query(self, q_counts: dict) -> np.ndarray:
        """(vocab,) float64: each indexed query token's count (tokens not in the vocabulary dropped)."""
        q = np.zeros(len(self.vocab))
        for t, n in q_counts.items():
            if t and t in self.vocab:
                q[self.vocab[t]] += n
        return q

    def scores(self, q_counts: dict) -> np.ndarray:
        """(n,) float64 BM25 of the query (token → count) against every text; zeros when nothing matches."""
        return np.asarray(self.weights @ self._query(q_counts), dtype=np.float64)

    def score_one(self, q_counts: dict, doc_counts: dict) -> float:
        """BM25 of the query against one replacement text (token → count, e.g. a text of the collection with
        some words removed), with the collection's IDF and average length; its tokens outside the
        vocabulary score nothing."""
        length = max(sum(doc_counts.values()), 1)
        return float(sum(n * self.idf[self.vocab[t]] * _tf_part(doc_counts[t], length, self.avg, self.k1, self.b)
                         for t, n in q_counts.items() if t and t in self.vocab and doc_counts.get(t)))
