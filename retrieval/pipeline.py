"""The query pipeline of roles (SPEC §7, §9; the split FlagEmbedding users know as embedder / reranker, and
LlamaIndex users as retriever + node postprocessors): a :class:`Searcher` finds candidate chunks, zero or more
:class:`Reranker` s reorder them, and the caller reads the result (the answer stage's reader). Each role is a
small protocol; :class:`QueryPipeline` composes them once per loaded index version
(:attr:`retrieval.bundle.ServingBundle.pipeline`), and every entry point (``flows.search``, ``flows.ask``, the
page, the evaluation, the benches) searches through it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

from retrieval.hits import SearchHit
from retrieval.query import QueryLimits


class Searcher(Protocol):
    """Finds candidates: ``search(query, k, mode, tokens)`` → up to ``k`` :class:`~retrieval.hits.SearchHit` s,
    best first, ``rerank_score`` None (:meth:`retrieval.retrievers.Retriever.search`); ``limits``: the largest
    ``k`` and the longest query it accepts (a bad query or ``k`` raises ``retrieval.query.QueryError``)."""

    limits: QueryLimits

    def search(self, query: str, k: int, mode: str = "hybrid",
               tokens: Sequence[str] | None = None, docs: set[str] | None = None) -> list[SearchHit]:
        ...


class Reranker(Protocol):
    """Reorders candidates: ``rerank(query, hits)`` → the same :class:`~retrieval.hits.SearchHit` s (no new
    ones, none dropped; an empty list for none), those it scored first in its order, each a copy
    (``dataclasses.replace``, never an edit: hits are frozen) with ``rerank_score`` set (higher first) and
    ``rerank_features`` replaced by its own named scores (``{}`` when it has none; rendered beside
    ``rerank_score``, so named apart from :meth:`~retrieval.hits.SearchHit.to_dict`'s other keys); hits past its
    ``depth`` may follow unchanged, in the search's order. ``name``: its kind, as the version's part names it;
    ``depth``: how many candidates it wants to see (the searcher is asked for at least this many, at most its
    ``limits.max_k``)."""

    name: str
    depth: int

    def rerank(self, query: str, hits: Sequence[SearchHit]) -> list[SearchHit]:
        ...


@dataclass(frozen=True)
class QueryPipeline:
    """``searcher`` then each of ``rerankers`` in order; the query is checked once, by the searcher."""

    searcher: Searcher
    rerankers: Sequence[Reranker] = ()

    def search(self, query: str, k: int, mode: str = "hybrid",
               tokens: Sequence[str] | None = None, docs: set[str] | None = None,
               order: Callable[[str, list[SearchHit]], list[SearchHit]] | None = None) -> list[SearchHit]:
        """Top-``k`` :class:`~retrieval.hits.SearchHit` s for ``query``: the searcher's top ``max(k, depth of
        every reranker and of order)`` (at most its ``limits.max_k``), reranked, reordered by ``order``, cut to
        ``k``. ``order``: a request's own reorder (a place-scoped search's
        :class:`retrieval.scope_order.ScopeOrder`, any mode; its ``depth`` read when it has one); None: none. ``mode`` other than ``hybrid``
        (the baselines' ``sparse``/``dense``) skips the rerankers. ``tokens``: the query segmented by the
        searcher's tokenizer, when the caller has them. ``docs``: the doc ids a scoped search may return
        (:func:`retrieval.scope.allowed_docs`, applied inside the searcher's candidates); None: all.

        Raises:
            retrieval.query.QueryError: a bad query or ``k`` (the searcher's checks).
        """
        rerank = self.rerankers if mode == "hybrid" else ()
        wants = [r.depth for r in rerank] + ([getattr(order, "depth", 0)] if order is not None else [])
        depth = max([k, *(min(d, self.searcher.limits.max_k) for d in wants)])
        hits = self.searcher.search(query, depth, mode=mode, tokens=tokens,
                                    **({} if docs is None else {"docs": docs}))
        for r in rerank:
            hits = r.rerank(query, hits)
        if order is not None:
            hits = order(query, list(hits))
        return hits[:k]
