"""The query pipeline of roles (SPEC §7, §9; the split FlagEmbedding users know as embedder / reranker, and
LlamaIndex users as retriever + node postprocessors): a :class:`Searcher` finds candidate chunks, zero or more
:class:`Reranker` s reorder them, and the caller reads the result (the answer stage's reader). Each role is a
small protocol; :class:`QueryPipeline` composes them once per loaded index version
(:attr:`retrieval.bundle.ServingBundle.pipeline`), and every entry point (``flows.search``, ``flows.ask``, the
page, the evaluation, the benches) searches through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

from retrieval.query import QueryLimits


class Searcher(Protocol):
    """Finds candidates: ``search(query, k, mode)`` → up to ``k`` chunk hits (dicts with ``doc_id``, ``start``,
    ``end``, ``text``, ``score``, ...), best first (:meth:`retrieval.retrievers.Retriever.search`); ``limits``:
    the largest ``k`` and the longest query it accepts."""

    limits: QueryLimits

    def search(self, query: str, k: int, mode: str = "hybrid", tokens: Sequence[str] | None = None) -> list[dict]:
        ...


class Reranker(Protocol):
    """Reorders candidates: ``rerank(query, hits)`` → the same hits in a new order, each with its
    ``rerank_score``; ``depth``: how many candidates it wants to see (the searcher is asked for at least this
    many)."""

    name: str
    depth: int

    def rerank(self, query: str, hits: list[dict]) -> list[dict]:
        ...


@dataclass(frozen=True)
class QueryPipeline:
    """``searcher`` then each of ``rerankers`` in order; the query is checked once, by the searcher."""

    searcher: Searcher
    rerankers: Sequence[Reranker] = ()

    def search(self, query: str, k: int, mode: str = "hybrid", tokens: Sequence[str] | None = None) -> list[dict]:
        """Top-``k`` hits for ``query``: the searcher's top ``max(k, depth of every reranker)`` (at most its
        ``limits.max_k``), reranked, cut to ``k``. ``mode`` other than ``hybrid`` (the baselines' ``sparse``/``dense``) skips the rerankers. ``tokens``:
        the query segmented by the searcher's tokenizer, when the caller has them.

        Raises:
            retrieval.query.QueryError: a bad query or ``k`` (the searcher's checks).
        """
        rerank = self.rerankers if mode == "hybrid" else ()
        depth = max([k, *(min(r.depth, self.searcher.limits.max_k) for r in rerank)])
        hits = self.searcher.search(query, depth, mode=mode, tokens=tokens)
        for r in rerank:
            hits = r.rerank(query, hits)
        return hits[:k]
