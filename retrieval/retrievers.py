"""Retrievers with one interface, ``search(query, k) -> list[Hit]`` (SPEC §7; the shape LlamaIndex and
FlagEmbedding users know): :class:`DenseRetriever` (FAISS over the encoder's vectors), :class:`SparseRetriever`
(BM25, bm25s) and :class:`HybridRetriever` (their weighted RRF, :mod:`retrieval.fusion`). A :class:`Hit` names
a chunk row; :class:`Retriever` loads one index version with its pinned encoder, builds the three and answers
with :class:`retrieval.hits.SearchHit` s (the chunk's columns and the scores)."""
from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Sequence

import faiss
import numpy as np
import pandas as pd

from retrieval.dense import search_params, search_rows
from retrieval.encoders import Encoder
from retrieval.encoding import TextEncoder
from retrieval.fusion import fuse_with
from retrieval.hits import SearchHit
from retrieval.pinning import EncoderMismatchError, verify_encoder
from retrieval.query import QueryLimits, check_query
from retrieval.sparse import SparseIndex, Tokenize, make_tokenizer, top_rows
from retrieval.versions import load_version
from storage import file_sha256

MASKS_KEPT = 64  # chunk masks a Retriever keeps, one per allowed-documents set (Retriever.doc_mask)

MODES = ("hybrid", "dense", "sparse")


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk: its row in ``chunks.parquet``; ``score`` is the retriever's (cosine, BM25 or fused
    RRF); each side's score and 1-based rank within its top ``depth`` candidates (None where unknown)."""

    row: int
    score: float
    dense_score: float | None = None
    sparse_score: float | None = None
    dense_rank: int | None = None
    sparse_rank: int | None = None


class DenseRetriever:
    """Nearest chunks by inner product of L2-normalised vectors (cosine) in a FAISS index.

    Args:
        index: FAISS index over the chunk vectors, ids mapped to rows by ``row_of`` (None: the ids are rows).
        encoder: the query encoder (:class:`retrieval.encoding.TextEncoder`). vectors: the stored chunk vectors
            (n, dim), to score a row outside the searched candidates (optional). ann: the version's manifest
            entry ``ann`` (its tombstones, :func:`retrieval.dense.search_params`; None: none).
    """

    def __init__(self, index: faiss.Index, encoder: TextEncoder, row_of: dict[int, int] | None = None,
                 vectors: np.ndarray | None = None, ann: dict | None = None):
        self.index, self.encoder, self.row_of, self.vectors = index, encoder, row_of, vectors
        self.ann = ann or {}

    def search_rows(self, query_vecs: np.ndarray, depth: int) -> tuple[list[list[int]], list[list[float]]]:
        """:func:`retrieval.dense.search_rows` over this index (search parameters made per call: FAISS edits
        them during a search, so concurrent searches must not share them)."""
        return search_rows(self.index, query_vecs, depth, self.row_of, search_params(self.index, self.ann))

    def search(self, query: str, k: int) -> list[Hit]:
        """Top-``k`` chunks for ``query``, best first."""
        return self.search_vectors(self.encoder.encode_queries([query]), k)[0]

    def search_vectors(self, query_vecs: np.ndarray, k: int) -> list[list[Hit]]:
        """Top-``k`` hits per query vector (q, dim)."""
        rows, scores = self.search_rows(query_vecs, k)
        return [[Hit(r, s, dense_score=s, dense_rank=i + 1) for i, (r, s) in enumerate(zip(rr, ss))]
                for rr, ss in zip(rows, scores)]

    def score(self, row: int, query_vec: np.ndarray) -> float | None:
        """Cosine of chunk ``row`` and a query vector (dim,) from the stored vectors (None without them)."""
        return None if self.vectors is None else float(np.asarray(self.vectors[row]) @ query_vec)


class SparseRetriever:
    """BM25 over the chunks' tokens (:class:`retrieval.sparse.SparseIndex`); ``tokenize``: texts -> tokens with
    the segmenter that built the index."""

    def __init__(self, sparse: SparseIndex, tokenize: Tokenize):
        self.sparse, self.tokenize = sparse, tokenize

    def search(self, query: str, k: int) -> list[Hit]:
        """Top-``k`` chunks with a positive BM25 score, best first (ties by row)."""
        return self.search_tokens(self.tokenize([query])[0], k)

    def search_tokens(self, tokens: Sequence[str], k: int) -> list[Hit]:
        """Top-``k`` hits for one tokenized query."""
        rows, scores = self.sparse.top(tokens, k)
        return [Hit(int(r), float(s), sparse_score=float(s), sparse_rank=i + 1)
                for i, (r, s) in enumerate(zip(rows, scores))]


class HybridRetriever:
    """Fusion of a dense and a sparse retriever (:func:`retrieval.fusion.fuse_with`): each side's top ``depth``
    (at least ``k``) candidates, fused by ``method`` (weighted RRF with ``rrf_k``, or the convex combination of
    z-normalised scores) with ``w_dense`` / ``1 - w_dense``.
    ``sparse`` may be None (a version without a sparse side): the dense ranking is returned."""

    def __init__(self, dense: DenseRetriever, sparse: SparseRetriever | None, w_dense: float = 0.5,
                 rrf_k: int = 60, depth: int = 100, method: str = "rrf"):
        self.dense, self.sparse = dense, sparse
        self.w_dense, self.rrf_k, self.depth, self.method = float(w_dense), int(rrf_k), int(depth), method

    def search(self, query: str, k: int, order: str = "hybrid", tokens: Sequence[str] | None = None,
               mask: np.ndarray | None = None) -> list[Hit]:
        """Top-``k`` hits for ``query`` with both sides' scores and ranks, ordered by the fused score
        (``order="dense"`` / ``"sparse"``: by that side alone, the other side still explained). ``tokens``: the
        query already segmented by the sparse side's tokenizer (not segmented again). ``mask``: bool (n_chunks,),
        the rows a scoped search may return (:mod:`retrieval.scope`); both sides' candidates are restricted to
        it before ranking (BM25 scores zeroed outside; dense: exact cosine over the allowed rows' stored
        vectors, else an 8x over-fetch filtered)."""
        return self.search_many([query], k, order, None if tokens is None else [list(tokens)], mask)[0]

    def search_many(self, queries: Sequence[str], k: int, order: str = "hybrid",
                    tokens: list[list[str]] | None = None, mask: np.ndarray | None = None) -> list[list[Hit]]:
        """:meth:`search` for many queries (encoded and tokenized in one batch each; ``tokens``: their tokens,
        when the caller segmented them already).

        Raises:
            ValueError: unknown ``order``, or ``sparse`` without a sparse side.
        """
        if order not in MODES:
            raise ValueError(f"unknown mode {order!r} (one of {MODES})")
        if order == "sparse" and self.sparse is None:
            raise ValueError("no sparse side to rank by")
        qv = self.dense.encoder.encode_queries(list(queries)) if order != "sparse" else None
        toks = [None] * len(queries) if self.sparse is None else (
            tokens if tokens is not None else self.sparse.tokenize(list(queries)))
        depth = max(self.depth, k)
        d_rows, d_scores = (self._dense_rows(qv, depth, mask) if qv is not None
                            else ([[]] * len(queries), [[]] * len(queries)))
        return [self._rank(d_rows[i], d_scores[i], None if qv is None else qv[i], toks[i], depth, k, order, mask)
                for i in range(len(queries))]

    def _dense_rows(self, qv: np.ndarray, depth: int, mask: np.ndarray | None) -> tuple[list, list]:
        """Each query's dense candidate rows and cosines, restricted to ``mask`` when given."""
        if mask is None:
            return self.dense.search_rows(qv, depth)
        allowed = np.flatnonzero(mask)
        if self.dense.vectors is not None and len(allowed) <= 200_000:
            sims = np.asarray(self.dense.vectors[allowed], dtype=np.float32) @ np.asarray(qv, np.float32).T
            rows, scores = [], []
            for col in sims.T:
                top = np.argsort(-col, kind="stable")[:depth]
                rows.append(allowed[top].tolist())
                scores.append(col[top].astype(float).tolist())
            return rows, scores
        rows, scores = self.dense.search_rows(qv, depth * 8)
        keep = [[i for i, r in enumerate(rs) if 0 <= r < len(mask) and mask[r]][:depth] for rs in rows]
        return [[rs[i] for i in kp] for rs, kp in zip(rows, keep)], [[ss[i] for i in kp] for ss, kp in zip(scores, keep)]

    def _rank(self, d_rows: list[int], d_scores: list[float], qvec, tokens, depth: int, k: int,
              order: str, mask: np.ndarray | None = None) -> list[Hit]:
        """One query's hits from its dense candidates and its tokens (BM25 zeroed outside ``mask``)."""
        s_all = self.sparse.sparse.scores(tokens) if tokens is not None else None
        if s_all is not None and mask is not None:
            s_all = np.where(mask, s_all, 0.0)
        s_rows = top_rows(s_all, depth)[0].tolist() if s_all is not None else []
        if order == "hybrid":
            s_scores = [float(s_all[r]) for r in s_rows] if s_all is not None else []
            ranked = [(r, sc) for r, sc, _, _ in fuse_with(self.method, d_rows, d_scores, s_rows, s_scores,
                                                           self.w_dense, self.rrf_k)]
        elif order == "dense":
            ranked = list(zip(d_rows, d_scores))
        else:
            ranked = [(r, float(s_all[r])) for r in s_rows]
        d_score, d_rank = dict(zip(d_rows, d_scores)), {r: i + 1 for i, r in enumerate(d_rows)}
        s_rank = {r: i + 1 for i, r in enumerate(s_rows)}
        return [Hit(int(r), float(sc), d_score[r] if r in d_score else (
                    None if qvec is None else self.dense.score(r, qvec)),
                    float(s_all[r]) if s_all is not None else None, d_rank.get(r), s_rank.get(r))
                for r, sc in ranked[:k]]


def encoder_dir_of(index_root: str | os.PathLike, manifest: dict) -> Path:
    """The encoder folder of an index version: its pinned copy (``encoder_dir``), else (versions
    published before pinning) the recorded ``model_dir``."""
    return Path(index_root) / manifest.get("encoder_dir", manifest["model_dir"])


def _verify(index_root: Path, manifest: dict) -> Path:
    """The version's encoder folder, after checking it hashes to the version's ``model_id``."""
    enc_dir = encoder_dir_of(index_root, manifest)
    if "encoder_dir" in manifest:
        verify_encoder(enc_dir, manifest["model_id"])
    elif "+".join(file_sha256(f)[:16] for f in sorted(enc_dir.glob("*.safetensors"))) != manifest["model_id"]:
        raise EncoderMismatchError(f"encoder {enc_dir} is not the one index {manifest['version']} was "
                                   f"built with (weights changed); rebuild the index")
    return enc_dir


class Retriever:
    """One index version (default: the serving one) with its pinned encoder and its sparse side, loaded once
    for many queries: a :class:`HybridRetriever` (``hybrid``) over a :class:`DenseRetriever` (``dense``) and a
    :class:`SparseRetriever` (``sparse``, None on a version without one), weighted as the version's fit says.
    ``tokenizer``: an already loaded ``make_tokenizer(...)`` result to share between retrievers (checked against
    the version's segmenter). ``limits``: the largest ``k`` and the longest query a search accepts.

    Raises (at construction):
        FileNotFoundError: no index published.
        retrieval.pinning.EncoderMismatchError: the encoder found does not hash to the version's ``model_id``
            (a rebuilt or tampered checkpoint), or the segmenter differs from the one that tokenized the
            sparse side.
    """

    def __init__(self, index_root: str | os.PathLike, version: str | None = None, device: str = "auto",
                 batch_size: int = 64, tokenizer=None, limits: QueryLimits = QueryLimits()):
        root = Path(index_root)
        self.limits = limits
        self.index, self.chunks, self.manifest = load_version(root, version)
        vdir = root / self.manifest["version"]
        self.encoder: TextEncoder = Encoder.from_checkpoint(_verify(root, self.manifest), batch_size, device)
        self.vectors = np.load(vdir / "embeddings.npy", mmap_mode="r") if (vdir / "embeddings.npy").is_file() else None
        row_of = {int(c): k for k, c in enumerate(self.chunks["chunk_id"])}
        self.dense = DenseRetriever(self.index, self.encoder, row_of, self.vectors, self.manifest.get("ann"))
        self._tokenize = tokenizer
        sp = self.manifest.get("sparse")
        self.sparse = SparseRetriever(SparseIndex.load(vdir / sp["dir"]), self.tokenize) if sp else None
        self.fusion = self.manifest.get("fusion", {"w_dense": 0.5, "rrf_k": 60, "depth": 100})
        self.hybrid = HybridRetriever(self.dense, self.sparse, float(self.fusion["w_dense"]),
                                      int(self.fusion.get("rrf_k", 60)), int(self.fusion.get("depth", 100)),
                                      str(self.fusion.get("method", "rrf")))
        self._masks: OrderedDict = OrderedDict()  # frozenset of doc ids -> chunk mask (doc_mask)
        self._mask_lock = threading.Lock()

    def tokenize(self, texts: list[str]) -> list[list[str]]:
        """Query tokens with the segmenter that built the sparse side (loaded on first use; a given
        ``tokenizer=(fn, identity)`` is used instead when its identity matches).

        Raises:
            EncoderMismatchError: the segmenter here is not the one that tokenized the index.
        """
        if self._tokenize is None or not callable(self._tokenize):
            sp = self.manifest["sparse"]
            fn, ident = self._tokenize or make_tokenizer(sp["backend"])
            if (ident["backend"], ident["model_id"]) != (sp["backend"], sp["segmenter_model_id"]):
                raise EncoderMismatchError(f"segmenter {ident} differs from the one that built the sparse index "
                                           f"({sp['backend']}, {sp['segmenter_model_id']})")
            self._tokenize = fn
        return self._tokenize(texts)

    def mode(self, mode: str) -> str:
        """The mode a search runs in: ``mode``, except ``hybrid`` on a version without a sparse side (``dense``).

        Raises:
            ValueError: unknown mode, or ``sparse`` on a version without a sparse side.
        """
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {MODES})")
        if self.sparse is None and mode == "sparse":
            raise ValueError(f"index {self.manifest['version']} has no sparse side (built before hybrid search)")
        return mode if self.sparse is not None else "dense"

    def search(self, query: str, k: int = 5, min_score: float | None = None, mode: str = "hybrid",
               tokens: Sequence[str] | None = None, docs: set[str] | None = None) -> list[SearchHit]:
        """Top-k chunks for ``query``, best first, as :class:`~retrieval.hits.SearchHit` s: score (the mode's:
        fused RRF score for ``hybrid``, cosine for ``dense``, BM25 for ``sparse``), dense_score, sparse_score,
        dense_rank, sparse_rank (1-based within each side's top ``depth`` candidates, None beyond), mode and the
        chunk's columns (chunk_id, doc_id, start, end, text, title, source, url; ``external_id`` when the
        documents had one). Hits whose score is below ``min_score`` are dropped. ``tokens``: the query as
        :meth:`tokenize` segments it, when the caller has them (the query is then segmented once). ``hybrid``
        on a version without a sparse side answers ``dense``. ``docs``: the doc ids a scoped search may return
        (:func:`retrieval.scope.allowed_docs`), applied inside both sides' candidate lists; None: all.

        Raises:
            retrieval.query.QueryError: an empty or whitespace query, one longer than ``limits.max_chars``, or
                ``k`` outside 1..``limits.max_k`` (:class:`~retrieval.query.QueryLimits`).
            ValueError: unknown mode, or ``sparse`` on a version without a sparse side.
        """
        query = check_query(query, k, self.limits)
        mode = self.mode(mode)
        hits = self.hybrid.search(query, k, mode, tokens, None if docs is None else self.doc_mask(docs))
        return [SearchHit.of_chunk(self.chunk(h.row), h.score, mode, dense_score=h.dense_score,
                                   sparse_score=h.sparse_score, dense_rank=h.dense_rank, sparse_rank=h.sparse_rank)
                for h in hits if min_score is None or h.score >= min_score]

    def doc_mask(self, docs: set[str] | frozenset[str]) -> np.ndarray:
        """bool (n_chunks,): the chunk rows whose ``doc_id`` is in ``docs``. A frozenset (what
        :func:`retrieval.scoped.scoped_docs` returns, the same object for the same scope) has its mask computed
        once and kept read-only, for the last :data:`MASKS_KEPT` sets; any other set is computed each time."""
        if not isinstance(docs, frozenset):
            return self.chunks["doc_id"].astype(str).isin(docs).to_numpy()
        with self._mask_lock:
            got = self._masks.get(docs)
            if got is not None:
                self._masks.move_to_end(docs)
                return got
        mask = self.chunks["doc_id"].astype(str).isin(docs).to_numpy()
        mask.flags.writeable = False
        with self._mask_lock:
            self._masks[docs] = mask
            while len(self._masks) > MASKS_KEPT:
                self._masks.popitem(last=False)
        return mask

    def chunk(self, row: int) -> dict:
        """The columns of chunk ``row`` as plain Python values (NaN -> None)."""
        rec = {c: col[row] for c, col in self._columns.items()}
        rec = {c: (v.item() if isinstance(v, np.generic) else v) for c, v in rec.items()}
        return {c: (None if isinstance(v, float) and np.isnan(v) else v) for c, v in rec.items()}

    @cached_property
    def _columns(self) -> dict:
        """The chunks' columns as arrays (a row read from them costs ~10 µs against ~200 µs by ``iloc``)."""
        return {c: self.chunks[c].to_numpy() for c in self.chunks.columns}


def query_index(index_root, query: str, k: int = 5, min_score: float | None = None,
                mode: str = "hybrid") -> list[SearchHit]:
    """Top-k chunks for one query from the serving index version (see :meth:`Retriever.search`)."""
    return Retriever(index_root).search(query, k, min_score, mode)


def search(index: faiss.Index, chunks: pd.DataFrame, query_vecs: np.ndarray, k: int = 5,
           min_score: float | None = None) -> list[list[SearchHit]]:
    """Top-k chunks per query vector (q, dim) of a bare FAISS index whose ids are ``chunks.chunk_id``, best
    first: ``dense`` :class:`~retrieval.hits.SearchHit` s (score = dense_score = cosine, dense_rank 1-based),
    hits below ``min_score`` dropped.

    Raises:
        ValueError: ``chunks`` lacks a column a hit needs (doc_id, start, end, text).
    """
    by_id = chunks.set_index("chunk_id")
    rows, scores = search_rows(index, query_vecs, k)
    out = []
    for ids, ss in zip(rows, scores):
        hits = []
        for rank, (i, s) in enumerate(zip(ids, ss), 1):
            if min_score is not None and s < min_score:
                continue
            rec = {c: (None if isinstance(v, float) and np.isnan(v) else v) for c, v in by_id.loc[i].to_dict().items()}
            hits.append(SearchHit.of_chunk({"chunk_id": int(i), **rec}, float(s), "dense", dense_score=float(s),
                                           dense_rank=rank))
        out.append(hits)
    return out
