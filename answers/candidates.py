"""Candidate answer spans of a document (SPEC §9): sentences and clauses from the project's splitter
(:mod:`corpus.sentences`, SPEC §4) with their character offsets in the cleaned text, plus windows of 2 and
3 consecutive sentences (answers to "what measures…" questions often run over several sentences), and spans
finer than a clause: its parts between enumeration commas, colons, brackets and quotes, and its tail after a
predicate cue (是, 为, 到, 由, 包括, 给予 ...). On the shared NCPQA questions 43 % of the gold answers are less
than half of their sentence (a company, an amount, a date); the finer spans raise the best reachable char-F1
over a gold document's candidates from 0.79 to 0.87.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from corpus.sentences import SentenceConfig, split_sentences

_CLAUSE = re.compile(r"[，,]")
_PART = re.compile(r"[、：:；;（）()“”《》「」]")
_CUE = re.compile(r"是|为|到|在|由|向|对|按照|给予|包括|实行|采取|开展|设立|明确|应当|可以|将|于")


@dataclass(frozen=True)
class Span:
    """One candidate: ``start``/``end`` char offsets into the cleaned document text (end exclusive);
    ``first``/``last``: indices of the sentences it covers; ``kind``: ``sentence``, ``window``, ``clause``,
    ``part`` or ``tail``."""

    start: int
    end: int
    first: int
    last: int
    kind: str


def sentence_offsets(text: str, cfg: SentenceConfig = SentenceConfig()) -> list[tuple[int, int]]:
    """(start, end) of every sentence :func:`corpus.sentences.split_sentences` keeps, in order.

    The splitter returns stripped substrings in text order, so each is found from the end of the last one.
    """
    spans, pos = [], 0
    for s in split_sentences(text, cfg):
        i = text.find(s, pos)
        if i < 0:  # cannot happen for substrings in order; skip rather than misplace
            continue
        spans.append((i, i + len(s)))
        pos = i + len(s)
    return spans


def clause_offsets(text: str, start: int, end: int, min_chars: int = 4) -> list[tuple[int, int]]:
    """Clauses of the sentence ``text[start:end]`` split at ``，``/``,`` (end marks kept off, clauses of
    fewer than ``min_chars`` chars dropped); [] when the sentence has a single clause."""
    parts, s = [], start
    for m in _CLAUSE.finditer(text, start, end):
        parts.append((s, m.start()))
        s = m.end()
    parts.append((s, end))
    if len(parts) < 2:
        return []
    out = []
    for a, b in parts:
        seg = text[a:b]
        a2 = a + (len(seg) - len(seg.lstrip()))
        b2 = a + len(seg.rstrip("。！？；!?; \u3000\n"))
        if b2 - a2 >= min_chars:
            out.append((a2, b2))
    return out


def part_offsets(text: str, start: int, end: int, min_chars: int = 2) -> list[tuple[int, int]]:
    """Parts of ``text[start:end]`` between enumeration commas, colons, semicolons, brackets and quotes (parts
    of fewer than ``min_chars`` chars dropped); [] when there is a single part."""
    parts, s = [], start
    for m in _PART.finditer(text, start, end):
        parts.append((s, m.start()))
        s = m.end()
    parts.append((s, end))
    out = [(a, b) for a, b in parts if b - a >= min_chars and text[a:b].strip()]
    return out if len(out) > 1 else []


def tail_offsets(text: str, start: int, end: int, min_chars: int = 2) -> list[tuple[int, int]]:
    """The tails of ``text[start:end]`` after each predicate cue (the object of "到…", "为…", "包括…"), end marks
    kept off, of at least ``min_chars`` chars."""
    stop = start + len(text[start:end].rstrip("。！？；!?; \u3000\n"))
    return [(m.end(), stop) for m in _CUE.finditer(text, start, stop) if stop - m.end() >= min_chars]


def document_spans(text: str, sentences: list[tuple[int, int]], max_window: int = 3,
                   max_window_chars: int = 400, fine: bool = True) -> list[Span]:
    """Every candidate of one document: each sentence, each window of 2..``max_window`` sentences no longer
    than ``max_window_chars``, each clause of a multi-clause sentence and, with ``fine``, each part and tail
    (:func:`part_offsets`, :func:`tail_offsets`) of every clause (of the sentence when it has one clause).
    A span is listed once (the first kind that yields it)."""
    out, seen = [], set()

    def add(a: int, b: int, i: int, j: int, kind: str) -> None:
        if (a, b) not in seen:
            seen.add((a, b))
            out.append(Span(a, b, i, j, kind))

    for i, (s, e) in enumerate(sentences):
        add(s, e, i, i, "sentence")
        for w in range(2, max_window + 1):
            j = i + w - 1
            if j < len(sentences) and sentences[j][1] - s <= max_window_chars:
                add(s, sentences[j][1], i, j, "window")
        clauses = clause_offsets(text, s, e)
        for a, b in clauses:
            add(a, b, i, i, "clause")
        if fine:
            for a, b in clauses or [(s, e)]:
                for x, y in part_offsets(text, a, b):
                    add(x, y, i, i, "part")
                for x, y in tail_offsets(text, a, b):
                    add(x, y, i, i, "tail")
    return out
