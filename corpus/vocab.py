"""Frequency-filtered vocabulary of segmented words (SPEC §4, thesis lengths 2-5)."""
from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from storage.bounds import check_bounds, check_order

_PUNCT = re.compile(r"[^\w]|_", re.UNICODE)
_DIGITS = re.compile(r"^[\d０-９.%％]+$")
_LATIN_JUNK = re.compile(r"^(?:https?|www|com|cn|html?|pdf|org|net)$|^[A-Za-z]$", re.IGNORECASE)


@dataclass(frozen=True)
class VocabConfig:
    """min_freq: keep words seen at least this often; min_len/max_len: word length bounds (chars);
    shard_docs: documents the stage counts at a time (memory only: the output is the same for any value)."""

    min_freq: int = 10
    min_len: int = 2
    max_len: int = 5
    shard_docs: int = 256

    def __post_init__(self):
        check_bounds(self, min_freq=(1, None), min_len=(1, 64), max_len=(1, 64), shard_docs=(1, 10_000_000))
        check_order(self, "min_len", "max_len")


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


def count_words(segments: Iterable[Sequence[str]], doc_ids: Iterable[str], stopwords: set[str],
                cfg: VocabConfig = VocabConfig()) -> tuple[Counter, Counter, int]:
    """Counts of one group of whole documents: ``(freq, doc_freq, sentences)`` over the words that pass
    :func:`keep_word`. Counts of groups that share no document add up to the counts of their union
    (``Counter.update``), which is how the stage merges its per-group counts."""
    freq: Counter = Counter()
    docs_of: dict[str, set] = {}
    n = 0
    for words, doc in zip(segments, doc_ids):
        n += 1
        kept = [w for w in words if keep_word(w, stopwords, cfg)]
        freq.update(kept)
        for w in set(kept):
            docs_of.setdefault(w, set()).add(doc)
    return freq, Counter({w: len(d) for w, d in docs_of.items()}), n


def vocab_table(freq: Counter, doc_freq: Counter, cfg: VocabConfig = VocabConfig()) -> pd.DataFrame:
    """The words seen at least ``min_freq`` times: word, freq, doc_freq sorted by freq desc then word."""
    rows = [(w, c, doc_freq[w]) for w, c in freq.items() if c >= cfg.min_freq]
    vocab = pd.DataFrame(rows, columns=["word", "freq", "doc_freq"])
    return vocab.sort_values(["freq", "word"], ascending=[False, True]).reset_index(drop=True)


def covered_sentences(segments: Iterable[Sequence[str]], words: set[str]) -> int:
    """How many sentences hold at least one word of ``words`` (vocab words all pass :func:`keep_word`,
    so the raw words can be looked up)."""
    return sum(1 for ws in segments if any(w in words for w in ws))


def vocab_stats(vocab: pd.DataFrame, candidates: int, sentences: int, covered: int) -> dict:
    """size, candidates, sentences, sentence_coverage (share with >= 1 vocab word), top_words (20)."""
    return {
        "size": int(len(vocab)),
        "candidates": int(candidates),
        "sentences": int(sentences),
        "sentence_coverage": covered / sentences if sentences else 0.0,
        "top_words": [[w, int(c)] for w, c in zip(vocab["word"][:20], vocab["freq"][:20])],
    }


def build_vocab(segments: Iterable[Sequence[str]], doc_ids: Iterable[str], stopwords: set[str],
                cfg: VocabConfig = VocabConfig()) -> tuple[pd.DataFrame, dict]:
    """Count words over all sentences and keep the frequent ones (in memory; the stage streams the same
    functions over groups of documents).

    Args:
        segments: words per sentence; doc_ids: the document of each sentence (same order).

    Returns:
        ``(vocab, stats)``: vocab has word, freq, doc_freq sorted by freq desc then word;
        stats has size, sentences, sentence_coverage (share of sentences with >= 1 vocab word),
        top_words (20) and candidates counted.
    """
    segments = list(segments)
    freq, doc_freq, n = count_words(segments, doc_ids, stopwords, cfg)
    vocab = vocab_table(freq, doc_freq, cfg)
    covered = covered_sentences(segments, set(vocab["word"]))
    return vocab, vocab_stats(vocab, len(freq), n, covered)
