"""Checks on a search request before any model or index work: the query text and ``k``."""
from __future__ import annotations

from dataclasses import dataclass


class QueryError(ValueError):
    """A search request that cannot be served as given (the message says what to change)."""


@dataclass(frozen=True)
class QueryLimits:
    """``max_k``: most hits one query may ask for; ``max_chars``: longest query accepted (chars)."""

    max_k: int = 100
    max_chars: int = 1000


def check_query(query: str, k: int, limits: QueryLimits = QueryLimits()) -> str:
    """The query with surrounding whitespace removed, after checking it and ``k``.

    Raises:
        QueryError: the query is empty or whitespace only, longer than ``limits.max_chars`` chars, or
            ``k`` is not an integer between 1 and ``limits.max_k``.
    """
    if not isinstance(query, str) or not query.strip():
        raise QueryError("empty query: give the words to search for")
    if len(query) > limits.max_chars:
        raise QueryError(f"query is {len(query)} chars, over the limit of {limits.max_chars} "
                         f"(search with a shorter passage)")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limits.max_k:
        raise QueryError(f"k must be an integer between 1 and {limits.max_k}, got {k!r}")
    return query.strip()
