"""Typed links between documents (SPEC §12): a text that names another document's title in 《》.

A mention ``《X》`` in a document's text (or title) whose ``X`` is the title of another document of the set (as
titled, or with / without ``中华人民共和国``) is a link to it, typed by the words around it:

- ``implements``: ``根据《X》``, ``依据《X》``, ``依照《X》``, ``按照《X》``, ``实施《X》``, ``贯彻《X》``;
- ``repeals``: ``废止《X》`` / ``废除《X》`` or ``《X》…同时废止`` (within the same clause);
- ``cites``: any other mention.

These regexes are the related model's own (independent of the policy records' link extraction).
"""
from __future__ import annotations

import re
from typing import Iterable

PREFIX = "中华人民共和国"
KINDS = ("implements", "repeals", "cites")
_MENTION = re.compile(r"(?P<pre>根据|依据|依照|按照|实施|贯彻|废止|废除)?《(?P<title>[^》\n]{2,80})》"
                      r"(?P<post>[^。；;\n《]{0,30}?同时废止)?")


def title_keys(titles: dict[str, str]) -> dict[str, str]:
    """name -> doc id for each document's title (``titles``: id -> title), full and without ``中华人民共和国``
    (when at least 2 chars remain); a name two documents share is left out (ambiguous)."""
    seen: dict[str, set[str]] = {}
    for d, t in titles.items():
        if not t:
            continue
        for name in {t, t[len(PREFIX):] if t.startswith(PREFIX) else t}:
            if len(name) >= 2:
                seen.setdefault(name, set()).add(d)
    return {n: next(iter(ds)) for n, ds in seen.items() if len(ds) == 1}


def mentions(text: str) -> Iterable[tuple[str, str]]:
    """(kind, named title) of every ``《…》`` mention of ``text``, in order (module docstring's types)."""
    for m in _MENTION.finditer(text or ""):
        pre, post = m.group("pre"), m.group("post")
        kind = ("repeals" if pre in ("废止", "废除") or post else "implements" if pre else "cites")
        yield kind, m.group("title")


def typed_links(text: str, keys: dict[str, str], own: str | None = None) -> dict[str, str]:
    """doc id -> link kind of every document ``text`` names (``keys``: :func:`title_keys`), ``own`` (the
    document's own id) excluded; a document named twice keeps the first kind of ``implements`` > ``repeals`` >
    ``cites``."""
    out: dict[str, str] = {}
    for kind, title in mentions(text):
        d = keys.get(title)
        if d is None or d == own:
            continue
        if d not in out or KINDS.index(kind) < KINDS.index(out[d]):
            out[d] = kind
    return out
