"""Candidate answer spans of a document (SPEC §9): sentences and clauses from the project's splitter
(:mod:`corpus.sentences`, SPEC §4) with their character offsets in the cleaned text, windows of 2 and
3 consecutive sentences (answers to "what measures…" questions often run over several sentences), and runs
of consecutive clauses inside a sentence (an answer is often the part of a sentence after the words that
echo the question: "工业和信息化部到北京北铃专用汽车有限公司进行督导检查" answers "…到哪家企业…").
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from corpus.sentences import SentenceConfig, split_sentences

_CLAUSE = re.compile(r"[，,]")


@dataclass(frozen=True)
class Span:
    """One candidate: ``start``/``end`` char offsets into the cleaned document text (end exclusive);
    ``first``/``last``: indices of the sentences it covers; ``kind``: ``sentence``, ``window``, ``clause``,
    ``run`` (2 or more consecutive clauses of one sentence, fewer than all), or, depending on the question,
    ``entity`` or ``gap`` (:func:`question_spans`)."""

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


def clause_runs(clauses: list[tuple[int, int]], max_clauses: int = 8) -> list[tuple[int, int]]:
    """(start, end) of every run of 2 or more consecutive ``clauses`` short of all of them; [] when there are
    fewer than 3 clauses or more than ``max_clauses`` (runs grow as the square of the clause count)."""
    n = len(clauses)
    if n < 3 or n > max_clauses:
        return []
    return [(clauses[a][0], clauses[b][1]) for a in range(n) for b in range(a + 1, n) if b - a + 1 < n]


def document_spans(text: str, sentences: list[tuple[int, int]], max_window: int = 3,
                   max_window_chars: int = 400, max_clauses: int = 8) -> list[Span]:
    """Every candidate of one document: each sentence, each window of 2..``max_window`` sentences no longer
    than ``max_window_chars``, each clause of a multi-clause sentence and each run of its clauses
    (:func:`clause_runs`, sentences of at most ``max_clauses`` clauses)."""
    out = []
    for i, (s, e) in enumerate(sentences):
        out.append(Span(s, e, i, i, "sentence"))
        for w in range(2, max_window + 1):
            j = i + w - 1
            if j < len(sentences) and sentences[j][1] - s <= max_window_chars:
                out.append(Span(s, sentences[j][1], i, j, "window"))
        clauses = clause_offsets(text, s, e)
        out += [Span(a, b, i, i, "clause") for a, b in clauses]
        out += [Span(a, b, i, i, "run") for a, b in clause_runs(clauses, max_clauses)]
    return out


_ENTITY = re.compile(
    r"https?://[\w./?=&%#:~+-]+|www\.[\w./?=&%#:~+-]+"  # web addresses
    r"|\d{3,4}[-－]\d{7,8}(?:[-－]\d{1,5})?|\d{5,}"  # telephone and other long numbers
    r"|(?:\d{4}年)?\d{1,2}月\d{1,2}日(?:[（(]星期.[）)])?(?:\d{1,2}[:：]\d{2}|\d{1,2}时)?"  # dates (and hours)
    r"|\d+(?:\.\d+)?(?:%|％|万元|亿元|元|万|个月|天|日|小时|人|家|台|件|次|倍)"  # amounts and quantities
)
_PUNCT_EDGE = " \u3000\n，,。；;：:、！？!?（）()“”\"'《》"


def entity_offsets(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """(start, end) of the web addresses, telephone numbers, dates and amounts in ``text[start:end]``
    (factoid answers: "审批服务热线是多少？" → ``86512345``)."""
    return [m.span() for m in _ENTITY.finditer(text, start, end)]


def is_question(sentence: str) -> bool:
    """Whether a sentence asks rather than says (it ends with a question mark, closing quotes and brackets
    aside): an interview's or FAQ's "问：……？" heading echoes a user's question closely but never answers it (no
    NCPQA answer lies inside one: 0 of 454), so the answer stage does not offer spans that start in one."""
    return sentence.rstrip(" \t\r\n\u3000”’\"'）)】」』").endswith(("？", "?"))


def code_points(text: str) -> np.ndarray:
    """(len(text),) uint32: the text's code points (a lone surrogate kept as its own value)."""
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def echo_bigrams(codes: np.ndarray, question: str) -> np.ndarray:
    """(len(codes) - 1,) bool: whether the characters ``k, k + 1`` of a text (``codes``: its code points,
    :class:`~answers.doc_cache.DocumentEntry`) form a character bigram of the question (its whitespace
    dropped)."""
    q = code_points("".join(question.split())).astype(np.int64)
    c = np.asarray(codes).astype(np.int64)
    if len(q) < 2 or len(c) < 2:
        return np.zeros(max(len(c) - 1, 0), dtype=bool)
    return np.isin((c[:-1] << 21) | c[1:], np.unique((q[:-1] << 21) | q[1:]))


def gap_offsets(text: str, start: int, end: int, hit: np.ndarray, min_chars: int = 2,
                max_chars: int = 120) -> list[tuple[int, int]]:
    """The stretches of the sentence ``text[start:end]`` between the words that echo the question: every
    character inside a bigram the question also holds (within the sentence; ``hit``: :func:`echo_bigrams` of
    the text) is an echo; each maximal run of other characters (edge punctuation trimmed,
    ``min_chars``..``max_chars`` long) is a candidate, as is that run up to the end of its clause
    ("对哄抬物价、造假等行为给予处罚和刑事拘留" asked "如何处置哄抬物价、造假等行为？" → ``给予处罚和刑事拘留``).
    [] when nothing in the sentence echoes the question."""
    hs = hit[start:max(end - 1, start)]
    if not hs.any():
        return []
    echo = np.zeros(end - start + 2, dtype=np.int8)  # padded with an echo at each side
    echo[0] = echo[-1] = 1
    echo[1:-2] |= hs
    echo[2:-1] |= hs
    edge = np.diff(echo)
    out = set()
    for i, j in zip(np.flatnonzero(edge == -1).tolist(), np.flatnonzero(edge == 1).tolist()):
        a, b = _trim(text, start + i, start + j)
        if min_chars <= b - a <= max_chars:
            out.add((a, b))
            m = _CLAUSE_END.search(text, b, end)
            c = _trim(text, a, m.start() if m else end)
            if c[1] > b and c[1] - c[0] <= max_chars:
                out.add(c)
    return sorted(out)


_CLAUSE_END = re.compile(r"[，,。；;！？!?]")


def _trim(text: str, a: int, b: int) -> tuple[int, int]:
    while a < b and text[a] in _PUNCT_EDGE:
        a += 1
    while b > a and text[b - 1] in _PUNCT_EDGE:
        b -= 1
    return a, b


def entity_spans(text: str, sentences: list[tuple[int, int]], have: set[tuple[int, int]]) -> list[Span]:
    """Each sentence's entities (``entity``, :func:`entity_offsets`) less those in ``have`` ((start, end) pairs,
    updated in place). They do not depend on the question, so a document's are computed once."""
    out = []
    for i, (s, e) in enumerate(sentences):
        for a, b in entity_offsets(text, s, e):
            if (a, b) not in have:
                have.add((a, b))
                out.append(Span(a, b, i, i, "entity"))
    return out


def gap_spans(text: str, sentences: list[tuple[int, int]], question: str, have: set[tuple[int, int]],
              codes: np.ndarray | None = None) -> list[Span]:
    """Each sentence's stretches between the question's echoes (``gap``, :func:`gap_offsets`) less those in
    ``have`` (not modified); ``codes``: the text's code points when at hand (uint32)."""
    hit, seen, out = echo_bigrams(code_points(text) if codes is None else codes, question), set(), []
    for i, (s, e) in enumerate(sentences):
        if e - s < 2:
            continue
        for a, b in gap_offsets(text, s, e, hit):
            if (a, b) not in have and (a, b) not in seen:
                seen.add((a, b))
                out.append(Span(a, b, i, i, "gap"))
    return out


def question_spans(text: str, sentences: list[tuple[int, int]], question: str,
                   have: set[tuple[int, int]] | None = None) -> list[Span]:
    """The candidates beyond :func:`document_spans`: each sentence's entities (:func:`entity_spans`) and the gaps
    between the question's echoes (:func:`gap_spans`), less those already in ``have`` ((start, end) pairs)."""
    seen = set(have or ())
    ents = entity_spans(text, sentences, seen)
    return ents + gap_spans(text, sentences, question, seen)
