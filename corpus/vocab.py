"""Frequency-filtered vocabulary of segmented words (SPEC §4, thesis lengths 2-5)."""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

_PUNCT = re.compile(r"[^\w]|_", re.UNICODE)
_DIGITS = re.compile(r"^[\d０-９.%％]+$")
_LATIN_JUNK = re.compile(r"^(?:https?|www|com|cn|html?|pdf|org|net)$|^[A-Za-z]$", re.IGNORECASE)


@dataclass(frozen=True)
class VocabConfig:
    """min_freq: keep words seen at least this often; min_len/max_len: word length bounds (chars)."""

    min_freq: int = 10
    min_len: int = 2
    max_len: int = 5


def load_stopwords(path: str | os.PathLike | None) -> set[str]:
    """Stopwords, one per line (blank lines ignored). None -> empty set.

    Raises:
        FileNotFoundError: ``path`` is given but missing.
    """
    if path is None:
        return set()
    return {w.strip() for w in Path(path).read_text(encoding="utf-8").splitlines() if w.strip()}


def keep_word(word: str, stopwords: set[str], cfg: VocabConfig) -> bool:
    """SPEC §4 filter: not a stopword, length in [min_len, max_len], no punctuation, not digits-only,
    not latin junk (``http``, ``www`` …)."""
    return (cfg.min_len <= len(word) <= cfg.max_len and word not in stopwords
            and not _PUNCT.search(word) and not _DIGITS.match(word) and not _LATIN_JUNK.match(word))


def build_vocab(segments: Iterable[Sequence[str]], doc_ids: Iterable[str], stopwords: set[str],
                cfg: VocabConfig = VocabConfig()) -> tuple[pd.DataFrame, dict]:
    """Count words over all sentences and keep the frequent ones.

    Args:
        segments: words per sentence; doc_ids: the document of each sentence (same order).

    Returns:
        ``(vocab, stats)``: vocab has word, freq, doc_freq sorted by freq desc then word;
        stats has size, sentences, sentence_coverage (share of sentences with >= 1 vocab word),
        top_words (20) and candidates counted.
    """
    freq: Counter = Counter()
    docs_of: dict[str, set] = {}
    seg_list = []
    for words, doc in zip(segments, doc_ids):
        kept = [w for w in words if keep_word(w, stopwords, cfg)]
        seg_list.append(kept)
        freq.update(kept)
        for w in set(kept):
            docs_of.setdefault(w, set()).add(doc)
    rows = [(w, c, len(docs_of[w])) for w, c in freq.items() if c >= cfg.min_freq]
    vocab = pd.DataFrame(rows, columns=["word", "freq", "doc_freq"])
    vocab = vocab.sort_values(["freq", "word"], ascending=[False, True]).reset_index(drop=True)
    words = set(vocab["word"])
    covered = sum(1 for kept in seg_list if any(w in words for w in kept))
    stats = {
        "size": int(len(vocab)),
        "candidates": int(len(freq)),
        "sentences": len(seg_list),
        "sentence_coverage": covered / len(seg_list) if seg_list else 0.0,
        "top_words": [[w, int(c)] for w, c in zip(vocab["word"][:20], vocab["freq"][:20])],
    }
    return vocab, stats
