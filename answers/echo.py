"""The question's echo beside a candidate span (SPEC §9): how many characters of the text right before and
right after a span (and at its own edges) repeat a stretch of the question.

Questions about a policy text are mostly written from the passage they ask about: the question copies the
words around the answer and puts a question word where the answer was ("重庆科技馆推出什么活动…" for
"…推出“网游科技馆”活动…"); for a heading ("4.补贴小微企业研发成本。") the question copies the heading and the
answer is what follows it. So the answer's left edge tends to follow the echo of the question's words before
its question word, and its right edge to precede the echo of the words after it — the alignment that
cloze-style reading-comprehension baselines exploit (the "sliding window" and distance baselines of Richardson
et al. 2013, MCTest; Rajpurkar et al. 2016, SQuAD §5). Here the echo is measured exactly: the longest stretch
of the question that ends right before a position (or starts right after it), on the texts as the metrics
compare them (:func:`answers.metrics.normalize`: NFKC, lower case, no whitespace or punctuation), capped at
``cap`` characters.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

import numpy as np

from answers.metrics import counted

ECHO_FEATURES = ("echo_before", "echo_after", "echo_opens", "echo_closes", "wh_echo_before", "wh_echo_after")

# the question words that stand where the answer was
_WH = re.compile(r"什么|哪些|哪家|哪里|哪儿|哪个|哪天|哪一|如何|怎样|怎么|多少|多长|多久|何时|何种|何处|何地|有何|为何|是否|几")


def normalized(text: str) -> tuple[str, np.ndarray]:
    """(the text as :func:`answers.metrics.normalize` compares it, ``at`` (len(text) + 1,) int64: the index
    into that string of each raw offset). Per character, so offsets map exactly."""
    out, at = [], np.zeros(len(text) + 1, dtype=np.int64)
    n = 0
    for i, c in enumerate(text):
        at[i] = n
        for x in unicodedata.normalize("NFKC", c).lower():
            if counted(x):
                out.append(x)
                n += 1
    at[len(text)] = n
    return "".join(out), at


def substrings(s: str, cap: int) -> frozenset:
    """Every substring of ``s`` of 1..``cap`` characters."""
    return frozenset(s[i:j] for i in range(len(s)) for j in range(i + 1, min(len(s), i + cap) + 1))


def echo_left(norm: str, k: int, subs: frozenset, cap: int) -> int:
    """Length of the longest ``norm[k - L:k]`` (L ≤ ``cap``) in ``subs`` (substring-closed, so the first miss
    ends the search)."""
    n = 0
    while n < cap and k - n > 0 and norm[k - n - 1:k] in subs:
        n += 1
    return n


def echo_right(norm: str, k: int, subs: frozenset, cap: int) -> int:
    """Length of the longest ``norm[k:k + L]`` (L ≤ ``cap``) in ``subs``."""
    n = 0
    while n < cap and k + n < len(norm) and norm[k:k + n + 1] in subs:
        n += 1
    return n


def question_parts(question: str) -> tuple[str, str, str]:
    """(the normalised question, its part before its first question word, its part after it); without a
    question word: (q, q, "")."""
    q, _ = normalized(question)
    m = _WH.search(q)
    return (q, q[:m.start()], q[m.end():]) if m else (q, q, "")


@dataclass(frozen=True)
class EchoQuery:
    """What :func:`echo_matrix` reads of a question, computed once per question (:meth:`of`): the substrings
    (up to ``cap`` chars) of the normalised question and of its parts before and after its question word, and
    its characters (an edge whose neighbouring character is not among them echoes 0)."""

    whole: frozenset
    before: frozenset
    after: frozenset
    chars: frozenset
    cap: int

    @classmethod
    def of(cls, question: str, cap: int = 20) -> "EchoQuery":
        q, pre, post = question_parts(question)
        return cls(substrings(q, cap), substrings(pre, cap), substrings(post, cap), frozenset(q), cap)


def echo_matrix(eq: EchoQuery, norm: str, at: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(n_spans, |ECHO_FEATURES|) float32 for spans ``[starts, ends)`` (raw offsets) of one document whose
    :func:`normalized` form is ``norm``, ``at``, against the question ``eq``: characters of the question echoed
    right before the span, right after it, at its opening and at its close, and right before / after it of the
    question's words before / after its question word. Each distinct edge is measured once, and only where the
    character beside it occurs in the question."""
    ks, ke = at[np.asarray(starts, dtype=np.int64)], at[np.asarray(ends, dtype=np.int64)]
    out = np.zeros((len(ks), len(ECHO_FEATURES)), dtype=np.float32)
    if not len(ks) or not eq.whole or not norm:
        return out
    cap, chars = eq.cap, eq.chars
    for k, specs in ((ks, ((0, eq.whole, True), (2, eq.whole, False), (4, eq.before, True))),
                     (ke, ((1, eq.whole, False), (3, eq.whole, True), (5, eq.after, False)))):
        u, inv = np.unique(k, return_inverse=True)
        edges = u.tolist()
        for col, sub, left in specs:
            if left:  # the character before the edge must occur in the question for any echo
                vals = [echo_left(norm, e, sub, cap) if e > 0 and norm[e - 1] in chars else 0 for e in edges]
            else:
                vals = [echo_right(norm, e, sub, cap) if e < len(norm) and norm[e] in chars else 0 for e in edges]
            out[:, col] = np.asarray(vals, dtype=np.float32)[inv]
    return out
