"""Sentences and clauses (SPEC §4).

A sentence ends at ``。！？；`` (or ``!?;``) and keeps its end mark; paragraph breaks also end a
sentence. Sentences shorter than ``min_chars`` and pure number/punctuation lines are dropped.
Clauses: a sentence split at ``，`` (or ``,``), end marks stripped.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from storage.bounds import check_bounds, check_order

END_MARKS = "。！？；!?;"
_SENT = re.compile(f"[^{END_MARKS}\\n]*(?:[{END_MARKS}]+[”’」』）)]*|\\n|$)")
_NUMERIC = re.compile(r"^[\d\s.,，。、%％\-—:：/()（）]+[。！？；!?;]?$")
_CLAUSE_SPLIT = re.compile(r"[，,]")
_STRIP = f"{END_MARKS}，,、：: \u3000"


@dataclass(frozen=True)
class SentenceConfig:
    """min_chars: shortest sentence kept (chars, end mark included); max_chars: longer
    sentences are kept but cut into pieces of at most this many chars at clause marks; shard_docs:
    documents the stage reads at a time (memory only: the output is the same for any value)."""

    min_chars: int = 5
    max_chars: int = 256
    shard_docs: int = 256

    def __post_init__(self):
        check_bounds(self, min_chars=(0, None), max_chars=(1, 1_000_000), shard_docs=(1, 10_000_000))
        check_order(self, "min_chars", "max_chars")


def split_sentences(text: str, cfg: SentenceConfig = SentenceConfig()) -> list[str]:
    """Split a document into sentences (each keeps its end mark); drops short and numeric ones."""
    out = []
    for m in _SENT.finditer(text):
        s = m.group(0).strip()
        if len(s) < cfg.min_chars or _NUMERIC.match(s):
            continue
        while len(s) > cfg.max_chars:
            cut = max(s.rfind("，", 0, cfg.max_chars), s.rfind(",", 0, cfg.max_chars))
            cut = cut + 1 if cut > 0 else cfg.max_chars
            out.append(s[:cut])
            s = s[cut:]
        if len(s) >= cfg.min_chars:
            out.append(s)
    return out


def strip_marks(text: str) -> str:
    """Strip end marks, commas and spaces from both ends of a clause (the same on every side of a pair)."""
    return text.strip(_STRIP)


def split_clauses(sentence: str) -> list[str]:
    """Split a sentence at ``，``/``,`` into clauses with end marks stripped; empty ones dropped."""
    return [c for c in (strip_marks(p) for p in _CLAUSE_SPLIT.split(sentence)) if c]


def build_sentences(docs: pd.DataFrame, cfg: SentenceConfig = SentenceConfig()) -> tuple[pd.DataFrame, dict]:
    """Sentences table from ``documents_clean``: columns doc_id, sent_idx, text, clauses (list[str]).

    Returns ``(sentences, stats)`` with counts of sentences and clauses and mean length (chars).
    """
    rows = []
    for doc_id, text in zip(docs["doc_id"].tolist(), docs["text"].tolist()):
        for i, s in enumerate(split_sentences(text, cfg)):
            rows.append((doc_id, i, s, split_clauses(s)))
    df = pd.DataFrame(rows, columns=["doc_id", "sent_idx", "text", "clauses"])
    return df, sentence_stats(sentence_counts(df))


def sentence_counts(df: pd.DataFrame) -> dict:
    """Additive counts of a sentences frame (whole documents): sentences, clauses, chars, documents."""
    return {"sentences": int(len(df)), "clauses": int(df["clauses"].str.len().sum()) if len(df) else 0,
            "chars": int(df["text"].str.len().sum()) if len(df) else 0,
            "documents": int(df["doc_id"].nunique()) if len(df) else 0}


def sentence_stats(counts: dict) -> dict:
    """The stage stats from (summed) :func:`sentence_counts`: sentences, clauses, mean_sentence_chars,
    documents_with_sentences."""
    n = counts["sentences"]
    return {"sentences": n, "clauses": counts["clauses"],
            "mean_sentence_chars": float(counts["chars"] / n) if n else 0.0,
            "documents_with_sentences": counts["documents"]}
