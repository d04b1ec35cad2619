"""Recurring-span selection examples for span-reader pretraining (SPEC §9; Ram et al. 2021, "Few-Shot Question
Answering by Pretraining Span Selection", ACL — Splinter), simplified for CPU: an n-gram of chars that occurs in
two places of one document is kept in one (the answer, inside a passage window) and replaced by a question
token in the other's sentence, which becomes the "question"; the reader is trained to point at the kept
occurrence with the same start/end head. No labels needed. :func:`mrc_examples` reads the other pretraining
source, labelled general-domain span questions (CMRC 2018, DRCD), into the same (question, context, start, end)
tuples.
"""
from __future__ import annotations

import json
import random
import re
from pathlib import Path

__all__ = ["QUESTION_TOKEN", "sentences", "recurring_examples", "mrc_examples"]

QUESTION_TOKEN = "[问]"
_SENT = re.compile(r"[^。！？；\n]+[。！？；]?")
_CONTENT = re.compile(r"[\u4e00-\u9fffA-Za-z]")


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) chars of the sentences of ``text`` (split at 。！？； and newlines), blanks dropped."""
    return [(m.start(), m.end()) for m in _SENT.finditer(text) if m.group().strip()]


def _pick(text: str, a: int, b: int, lo: int, hi: int):
    """The longest n-gram (``hi`` down to ``lo`` chars, mostly CJK/letters) of sentence [a, b) that occurs
    in ``text`` outside the sentence: (ngram, offset in sentence, its other occurrence's char), or None."""
    s = text[a:b]
    for n in range(min(hi, len(s)), lo - 1, -1):
        for i in range(len(s) - n + 1):
            g = s[i:i + n]
            if len(_CONTENT.findall(g)) < n - 1:
                continue
            for p in (text.find(g, 0, a), text.find(g, b)):
                if p >= 0 and (p + n <= a or p >= b):
                    return g, i, p
    return None


def recurring_examples(texts, per_doc: int = 8, lo: int = 4, hi: int = 12, reach: int = 150,
                       seed: int = 0) -> list[tuple[str, str, int, int]]:
    """(question, passage, answer_start, answer_end) examples from ``texts``: at most ``per_doc`` a document,
    the question a sentence (10..150 chars) with one recurring n-gram (``lo``..``hi`` chars) replaced by
    :data:`QUESTION_TOKEN`, the passage ``reach`` chars each side of the n-gram's other occurrence, holding the
    n-gram once and not the question's sentence (so the answer is unambiguous). Deterministic for ``seed``."""
    rng = random.Random(seed)
    out = []
    for text in texts:
        sents = [(a, b) for a, b in sentences(text) if 10 <= b - a <= 150]
        rng.shuffle(sents)
        n = 0
        for a, b in sents:
            hit = _pick(text, a, b, lo, hi)
            if hit is None:
                continue
            g, i, p = hit
            ca, cb = max(0, p - reach), min(len(text), p + len(g) + reach)
            ctx = text[ca:cb]
            if ctx.count(g) != 1 or (ca < b and a < cb):
                continue
            q = text[a:a + i] + QUESTION_TOKEN + text[a + i + len(g):b]
            out.append((q, ctx, p - ca, p - ca + len(g)))
            n += 1
            if n >= per_doc:
                break
    return out


def mrc_examples(root, limit: int, seed: int) -> list:
    """At most ``limit`` (question, context, start, end) span questions, shuffled by ``seed``, from the JSON Lines
    files (gzip or not) under the folder ``root`` in ``../shared/mrc``'s format (``context, question,
    answer_start`` — a string there —, ``answer_end_exclusive``; CMRC 2018, Cui et al. 2019; DRCD, Shao et al.
    2018), every file but the CMRC 2018 dev set (kept for measuring the reader on MRC itself). A row whose
    offsets do not fit its context is skipped.

    Raises:
        ValueError: no usable span question under ``root``.
    """
    import gzip

    root, out = Path(root), []
    files = sorted(root.glob("*.jsonl.gz")) + sorted(root.glob("*.jsonl"))
    for f in files:
        if f.name.startswith("cmrc2018_dev"):
            continue
        with (gzip.open if f.suffix == ".gz" else open)(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                r = json.loads(line)
                try:
                    a, e = int(r["answer_start"]), int(r["answer_end_exclusive"])
                except (KeyError, TypeError, ValueError):
                    continue
                if 0 <= a < e <= len(r.get("context") or "") and r.get("question"):
                    out.append((r["question"], r["context"], a, e))
    if not out:
        raise ValueError(f"no MRC span question under {root} (JSON Lines with context, question, "
                         "answer_start, answer_end_exclusive)")
    random.Random(seed).shuffle(out)
    return out[:limit]
