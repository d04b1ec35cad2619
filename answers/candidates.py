"""Candidate answer spans of a document (SPEC §9): sentences and clauses from the project's splitter
(:mod:`corpus.sentences`, SPEC §4) with their character offsets in the cleaned text, plus windows of 2 and
3 consecutive sentences (answers to "what measures…" questions often run over several sentences).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from corpus.sentences import SentenceConfig, split_sentences

_CLAUSE = re.compile(r"[，,]")


@dataclass(frozen=True)
class Span:
    """One candidate: ``start``/``end`` char offsets into the cleaned document text (end exclusive);
    ``first``/``last``: indices of the sentences it covers; ``kind``: ``sentence``, ``window`` or ``clause``."""

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


def document_spans(text: str, sentences: list[tuple[int, int]], max_window: int = 3,
                   max_window_chars: int = 400) -> list[Span]:
    """Every candidate of one document: each sentence, each window of 2..``max_window`` sentences no longer
    than ``max_window_chars``, and each clause of a multi-clause sentence."""
    out = []
    for i, (s, e) in enumerate(sentences):
        out.append(Span(s, e, i, i, "sentence"))
        for w in range(2, max_window + 1):
            j = i + w - 1
            if j < len(sentences) and sentences[j][1] - s <= max_window_chars:
                out.append(Span(s, sentences[j][1], i, j, "window"))
        for a, b in clause_offsets(text, s, e):
            out.append(Span(a, b, i, i, "clause"))
    return out
