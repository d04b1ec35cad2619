"""The chunk hit of the query pipeline (SPEC §7, §9): one typed record from the search through the rerankers to
the reader, made a dict only where it is rendered (``flows.search``'s JSON lines, the answer page's API).

:class:`SearchHit` is a chunk of an index version with the search's scores (and a reranker's, once reranked:
``dataclasses.replace``); :meth:`SearchHit.to_dict` is its one rendering, the same keys, values and key order
the search answered with when hits were dicts. :class:`RankedHit` is a hit with its place in the list a reader
took it from (the answer stage groups hits by document and keeps each one's rank).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from retrieval.chunks import CHUNK_COLUMNS

_REQUIRED = ("chunk_id", "doc_id", "start", "end", "text")
_SCORES = ("score", "dense_score", "sparse_score", "dense_rank", "sparse_rank", "mode")


@dataclass(frozen=True)
class SearchHit:
    """One retrieved chunk (a row of the version's ``chunks.parquet``, SPEC §7) and its scores.

    Fields:
        score: the search mode's score (fused RRF or convex score for ``hybrid``, cosine for ``dense``, BM25 for
            ``sparse``; :mod:`retrieval.fusion`); the order of the search's list.
        dense_score, sparse_score: each side's score (cosine; BM25), None where unknown.
        dense_rank, sparse_rank: 1-based rank within each side's top ``depth`` candidates, None beyond.
        mode: the mode the search ran in (``hybrid``, ``dense``, ``sparse``).
        chunk_id, doc_id, start, end, text, title, source, url: the chunk's columns
            (:data:`retrieval.chunks.CHUNK_COLUMNS`; ``start``/``end``: character offsets into the document's
            cleaned text; title, source, url None where the table lacks them or holds NaN).
        columns: the chunk table's other columns, in table order (``external_id`` for documents imported with
            their own ids); not to be mutated (a plain dict, so hits pickle).
        rerank_score: the last reranker's score (its order), None before any reranker
            (:class:`retrieval.pipeline.Reranker`).
        rerank_features: that reranker's own named scores (e.g. ``window_bm25``), not to be mutated;
            empty before.
    """

    score: float
    mode: str
    chunk_id: int
    doc_id: str
    start: int
    end: int
    text: str
    dense_score: float | None = None
    sparse_score: float | None = None
    dense_rank: int | None = None
    sparse_rank: int | None = None
    title: str | None = None
    source: str | None = None
    url: str | None = None
    columns: Mapping[str, Any] = field(default_factory=dict, hash=False)
    rerank_score: float | None = None
    rerank_features: Mapping[str, float] = field(default_factory=dict, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "columns", dict(self.columns))  # own copies: the caller's dicts stay theirs
        object.__setattr__(self, "rerank_features", dict(self.rerank_features))

    @classmethod
    def of_chunk(cls, chunk: Mapping[str, Any], score: float, mode: str, **scores) -> "SearchHit":
        """The hit of a chunk row given as ``{column: value}`` (plain Python values, NaN already None) with the
        search's ``score``, ``mode`` and ``scores`` (dense_score, sparse_score, dense_rank, sparse_rank).

        Raises:
            ValueError: the row lacks one of chunk_id, doc_id, start, end, text (the message names them).
        """
        missing = [c for c in _REQUIRED if c not in chunk]
        if missing:
            raise ValueError(f"chunk row lacks column(s) {missing} (a chunk table holds {list(CHUNK_COLUMNS)})")
        own = {c: chunk.get(c) for c in CHUNK_COLUMNS}
        other = {c: v for c, v in chunk.items() if c not in CHUNK_COLUMNS}
        return cls(score=score, mode=mode, **own, **scores, columns=other)

    @property
    def external_id(self) -> str | None:
        """The document's own id where it was imported with one (column ``external_id``), else None."""
        return self.columns.get("external_id")

    def to_dict(self) -> dict:
        """The hit as rendered (JSON): score, dense_score, sparse_score, dense_rank, sparse_rank, mode, the chunk's
        columns (CHUNK_COLUMNS, then the others in table order), then ``rerank_score`` and the reranker's named
        scores when reranked (absent before)."""
        out = {c: getattr(self, c) for c in _SCORES}
        out.update({c: getattr(self, c) for c in CHUNK_COLUMNS})
        out.update(self.columns)
        if self.rerank_score is not None:
            out["rerank_score"] = self.rerank_score
        out.update(self.rerank_features)
        return out


@dataclass(frozen=True)
class RankedHit:
    """A hit and its 0-based place (``rank``) in the ranked list a reader took it from (the answer stage's
    top ``search_k`` chunks, SPEC §9)."""

    rank: int
    hit: SearchHit
