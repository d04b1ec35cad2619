"""Reading-comprehension metrics (SQuAD, Rajpurkar et al. 2016; char-level for Chinese as in CMRC 2018 and
C-Pulse): exact match and char-F1 after removing whitespace and punctuation, and span overlap."""
from __future__ import annotations

import unicodedata
from collections import Counter


def counted(c: str) -> bool:
    """Whether the metrics count the (normalised) character ``c``: not whitespace, punctuation (P*) or a
    separator (Z*)."""
    return not (c.isspace() or unicodedata.category(c)[0] in "PZ")


def normalize(text: str) -> str:
    """Lower-cased, NFKC, whitespace and punctuation (Unicode categories P*, Z*) removed."""
    t = unicodedata.normalize("NFKC", text or "").lower()
    return "".join(c for c in t if counted(c))


def char_f1(pred: str, gold: str) -> float:
    """Char-level F1 of the normalised texts (0 when either is empty)."""
    p, g = normalize(pred), normalize(gold)
    common = sum((Counter(p) & Counter(g)).values())
    if not p or not g or not common:
        return 0.0
    prec, rec = common / len(p), common / len(g)
    return 2 * prec * rec / (prec + rec)


def exact_match(pred: str, gold: str) -> float:
    """1.0 when the normalised texts are equal, else 0.0."""
    return float(normalize(pred) == normalize(gold) and bool(normalize(gold)))


def overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    """Whether half-open char ranges [a_start, a_end) and [b_start, b_end) share a character."""
    return max(a_start, b_start) < min(a_end, b_end)
