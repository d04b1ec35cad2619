"""Term counts of the chunks, the stored form of the sparse side (SPEC §7), and BM25 scored from them.

A :class:`TermCounts` is a chunk x vocabulary matrix of term frequencies (scipy CSR, int32) with the
chunk ids of its rows and the vocabulary of its columns. BM25 needs nothing else: document frequencies are
column counts, document lengths row sums. A refresh therefore takes the rows of unchanged chunks from the
previous version's counts, counts the tokens of new chunks only (:meth:`TermCounts.compose`; token lists are
made one batch at a time, :meth:`TermCounts.from_texts`), and scores
the whole matrix in a few vectorised passes (:func:`bm25_from_counts`), instead of re-reading every
token list and re-indexing them.

The scores are the ones ``bm25s.BM25.index`` computes for the same token lists (Lù 2024, arXiv:2407.03618;
its own idf / tf-component functions are used, so every variant it offers is covered): a chunk with no token
is indexed as the single token ``""``, as :class:`retrieval.sparse.SparseIndex` always did.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import bm25s
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp
from bm25s.scoring import _build_idf_array, _build_nonoccurrence_array, _select_idf_scorer, _select_tfc_scorer

COUNTS = "counts.npz"
VOCAB = "vocab.parquet"
EMPTY = ""


@dataclass
class TermCounts:
    """``counts`` (n_chunks, n_vocab) int32 CSR term frequencies; ``chunk_ids`` (n_chunks,) int64 the rows'
    chunk ids; ``vocab`` the columns' tokens (``""`` always present: the token of a chunk with none)."""

    chunk_ids: np.ndarray
    vocab: list[str]
    counts: sp.csr_matrix

    @classmethod
    def from_tokens(cls, chunk_ids: Sequence[int], tokens: Sequence[Sequence[str]],
                    vocab: list[str] | None = None) -> "TermCounts":
        """Count ``tokens`` (one list per chunk) over ``vocab`` extended by the new tokens (in first-seen order).

        Raises:
            ValueError: ``chunk_ids`` and ``tokens`` differ in length.
        """
        if len(chunk_ids) != len(tokens):
            raise ValueError(f"{len(chunk_ids)} chunk ids for {len(tokens)} token lists")
        vocab = list(vocab) if vocab is not None else [EMPTY]
        index = {t: i for i, t in enumerate(vocab)}
        index.setdefault(EMPTY, len(index))
        cols = [index.setdefault(t, len(index)) for doc in tokens for t in (doc if len(doc) else (EMPTY,))]
        vocab = list(index)  # insertion order: the given vocabulary, then new tokens as first seen
        lengths = np.fromiter((max(len(d), 1) for d in tokens), dtype=np.int64, count=len(tokens))
        rows = np.repeat(np.arange(len(tokens), dtype=np.int64), lengths)
        m = sp.csr_matrix((np.ones(len(cols), dtype=np.int32), (rows, np.asarray(cols, dtype=np.int64))),
                          shape=(len(tokens), len(vocab)), dtype=np.int32)
        return cls(np.asarray(chunk_ids, dtype=np.int64), vocab, m)

    @classmethod
    def from_texts(cls, chunk_ids: Sequence[int], texts: Sequence[str], tokenize: Callable[[list[str]], list],
                   vocab: list[str] | None = None, batch: int = 2048) -> "TermCounts":
        """Tokenize and count ``texts`` ``batch`` at a time (only one batch's token lists are alive: at 21x
        the token lists of every chunk take more memory than their counts), over ``vocab`` extended by the
        new tokens in first-seen order."""
        vocab = list(vocab) if vocab is not None else [EMPTY]
        blocks = []
        for i in range(0, len(texts), batch):
            part = TermCounts.from_tokens(chunk_ids[i:i + batch], tokenize(list(texts[i:i + batch])), vocab)
            vocab = part.vocab
            blocks.append(part.counts)
        if not blocks:
            return cls.from_tokens(chunk_ids[:0], [], vocab)
        for m in blocks:
            m.resize((m.shape[0], len(vocab)))
        return cls(np.asarray(chunk_ids, dtype=np.int64), vocab, sp.vstack(blocks, format="csr"))

    def compose(self, chunk_ids: Sequence[int], fresh_rows: Sequence[int], fresh: "TermCounts") -> "TermCounts":
        """Counts for ``chunk_ids`` (the next version's rows, in order): row ``fresh_rows[k]`` is row ``k`` of
        ``fresh`` (counted over this vocabulary extended: ``from_texts(..., vocab=self.vocab)``), every other
        row is copied from this matrix by chunk id; columns no row uses any more are dropped.

        Raises:
            KeyError: a chunk id neither fresh nor in this matrix.
            ValueError: ``fresh``'s vocabulary does not extend this one, or its rows are not ``fresh_rows``.
        """
        if fresh.vocab[:len(self.vocab)] != self.vocab or fresh.counts.shape[0] != len(fresh_rows):
            raise ValueError("fresh counts must extend this vocabulary and hold one row per fresh row")
        ids = np.asarray(chunk_ids, dtype=np.int64)
        where = {int(c): k for k, c in enumerate(self.chunk_ids)}
        new_rows = np.asarray(fresh_rows, dtype=np.int64)
        is_new = np.zeros(len(ids), dtype=bool)
        is_new[new_rows] = True
        old_rows = np.flatnonzero(~is_new)
        try:
            src = np.asarray([where[int(ids[k])] for k in old_rows], dtype=np.int64)
        except KeyError as exc:
            raise KeyError(f"chunk {exc.args[0]} has no counted tokens and none were given") from None
        kept = self.counts[src]
        kept.resize((len(src), len(fresh.vocab)))
        stacked = sp.vstack([kept, fresh.counts], format="csr")
        order = np.empty(len(ids), dtype=np.int64)
        order[np.concatenate([old_rows, new_rows])] = np.arange(len(ids))
        return TermCounts(ids, fresh.vocab, stacked[order]).compacted()

    def compacted(self) -> "TermCounts":
        """The same counts without vocabulary columns no chunk uses (``""`` kept)."""
        df = np.bincount(self.counts.indices, minlength=len(self.vocab))
        keep = df > 0
        keep[self.vocab.index(EMPTY)] = True
        if keep.all():
            return self
        cols = np.flatnonzero(keep)
        return TermCounts(self.chunk_ids, [self.vocab[c] for c in cols], self.counts[:, cols].tocsr())

    def save(self, d: str | os.PathLike) -> None:
        """``counts.npz`` (CSR + chunk ids, uncompressed: it is re-read on every refresh) and ``vocab.parquet``."""
        d = Path(d)
        c = self.counts
        with open(d / COUNTS, "wb") as fh:
            np.savez(fh, data=c.data, indices=c.indices, indptr=c.indptr, shape=np.asarray(c.shape),
                     chunk_ids=self.chunk_ids)
        pq.write_table(pa.table({"token": pa.array(self.vocab, type=pa.string())}), d / VOCAB)

    @classmethod
    def load(cls, d: str | os.PathLike) -> "TermCounts | None":
        """What :meth:`save` wrote in ``d``; None when ``d`` holds no counts (a version written before them)."""
        d = Path(d)
        if not (d / COUNTS).is_file() or not (d / VOCAB).is_file():
            return None
        z = np.load(d / COUNTS)
        m = sp.csr_matrix((z["data"], z["indices"], z["indptr"]), shape=tuple(int(s) for s in z["shape"]))
        return cls(z["chunk_ids"], pq.read_table(d / VOCAB).column("token").to_pylist(), m)


def bm25_from_counts(tc: TermCounts, k1: float, b: float, method: str) -> bm25s.BM25:
    """A ``bm25s.BM25`` whose score matrix is computed from ``tc`` exactly as ``bm25s.BM25.index`` computes
    it from the token lists (idf per column from its document frequency, the tf component per non-zero with
    the row's length and the mean length; BM25L / BM25+ subtract the non-occurrence score). float32 scores,
    CSC over the vocabulary."""
    model = bm25s.BM25(k1=k1, b=b, method=method)
    n, n_vocab = tc.counts.shape
    c = tc.counts
    lengths = np.asarray(c.sum(axis=1)).ravel().astype(np.int64)
    avg = np.array(lengths).mean() if n else np.float64(0.0)
    df = np.bincount(c.indices, minlength=n_vocab)
    doc_freqs = dict(enumerate(df.tolist()))
    idf = _build_idf_array(doc_freqs, n, _select_idf_scorer(model.idf_method), dtype=model.dtype)
    nonocc = None
    if method in model.methods_requiring_nonoccurrence:
        nonocc = _build_nonoccurrence_array(doc_freqs, n, _select_idf_scorer(model.idf_method),
                                            _select_tfc_scorer(method), avg, avg, k1, b, model.delta, model.dtype)
    row_len = np.repeat(lengths, np.diff(c.indptr))
    tfc = _select_tfc_scorer(method)(tf_array=c.data.astype(model.dtype), l_d=row_len, l_avg=avg, k1=k1, b=b,
                                     delta=model.delta)
    vals = idf[c.indices] * tfc
    if nonocc is not None:
        vals = vals - nonocc[c.indices]
    scores = sp.csr_matrix((vals.astype(model.dtype), c.indices, c.indptr), shape=(n, n_vocab)).tocsc()
    model.scores = {"data": scores.data.astype(model.dtype), "indices": scores.indices.astype(model.int_dtype),
                    "indptr": scores.indptr, "num_docs": n}
    model.vocab_dict = {t: i for i, t in enumerate(tc.vocab)}
    model.unique_token_ids_set = set(model.vocab_dict.values())
    model.nonoccurrence_array = nonocc
    return model
