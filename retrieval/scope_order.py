"""The order of a place-scoped search's hits (SPEC §7 search filters): the asked place's own regulation before its
parents' and children's, and the document a question quotes before those it only resembles.

A scope that names places (``浙江省``, inferred from the question or given as ``region``) admits the asked place,
every parent up to the nation and every place inside it (:mod:`retrieval.scope`). Inside that set the
same regulation recurs: a province's 安全生产条例 copies whole clauses of the national one and is copied by its
cities'. A searcher that scores the words alone ranks whichever copy has the denser match first, so the asked
place's own rule can fall behind its parent's (measured in ``bench/scope_bench.py``). Two stable reorders of the
searcher's top :attr:`ScopeOrder.depth` hits (100, the search's largest ``k``: a quoted clause ranked 31st–100th
by the words alone is still found) fix that, each keeping the search's order otherwise:

1. **Quoted text.** The longest run of consecutive characters the query (its place names cut out) shares with
   a hit's text, counted when at least ``quote_min`` chars (12: longer than the boilerplate ``县级以上人民政府``);
   a longer quote goes first. Copies of one clause differ in a word or two, so the copy the question quotes
   verbatim is the one it asks about. Among hits quoting equally long runs, the asked place's own go first
   wherever they ranked: when the quote cannot tell the copies apart, the place the question names does.
2. **The asked place first, within a window.** A hit of a document whose jurisdiction is exactly an asked place
   moves up ``window`` positions (3), ahead of the other places' hits it passes (a parent, a child, the nation): a national rule
   ranked far ahead still leads, one ranked just ahead does not.

Both rules read only the hits' texts and the version's policy records; an unscoped search (no asked place) is
never reordered, so the evaluations of the unscoped search and of the answers are unaffected.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from corpus import divisions as D
from retrieval.hits import SearchHit


def longest_shared_run(query: str, text: str) -> int:
    """Length (chars) of the longest substring of ``query`` that occurs in ``text`` (0 for none).

    Greedy over start positions, extending a candidate one char at a time only past the best length so far:
    O(len(query) · cost of ``in``), fine for a question (≤ a few hundred chars) against a chunk.
    """
    best = 0
    for i in range(len(query)):
        j = i + best + 1
        while j <= len(query) and query[i:j] in text:
            best = j - i
            j += 1
    return best


def strip_places(query: str) -> str:
    """``query`` with every place name :func:`corpus.divisions.find_places` finds cut out (joined by a space, so no
    run spans a cut)."""
    out, pos = [], 0
    for p in D.find_places(query):
        out.append(query[pos:p.start])
        pos = p.end
    out.append(query[pos:])
    return " ".join(s for s in out if s)


@dataclass(frozen=True)
class ScopeOrder:
    """The reorder of a place-scoped search (module doc), callable as ``order(query, hits) -> hits``.

    Fields:
        asked: the division codes the scope asks for (:attr:`retrieval.scope.Scope.asked`).
        jurisdiction: doc_id -> the document's division code (None where unknown), from the version's policy
            records.
        quote_min: shortest shared run (chars) counted as a quote.
        window: positions an asked place's own hit moves up past other places' hits.
        depth: hits of the searcher this order needs to see (the search asks for at least this many).
    """

    asked: frozenset[str]
    jurisdiction: Callable[[str], str | None] = field(compare=False)
    quote_min: int = 12
    window: int = 3
    depth: int = 100

    def __call__(self, query: str, hits: Sequence[SearchHit]) -> list[SearchHit]:
        """``hits`` reordered (the same objects, none added or dropped): by quote length (≥ ``quote_min``,
        longest first), among equal quotes the asked place's own first, then by the search position less
        ``window`` for an asked place's own hit (ahead of the hit it lands on), then by the search position."""
        bare = strip_places(query)
        keys = []
        for pos, hit in enumerate(hits):
            run = longest_shared_run(bare, hit.text or "")
            quote = run if run >= self.quote_min else 0
            own = self.jurisdiction(str(hit.doc_id)) in self.asked
            keys.append((-quote, bool(quote) and not own, pos - self.window * own, not own, pos))
        return [hits[i] for i in sorted(range(len(hits)), key=keys.__getitem__)]
