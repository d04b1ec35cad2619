"""Model inputs of SPEC §6: char ids, vocabulary word matches, matching matrix, batching.

Chars are single characters (whitespace dropped, latin lower-cased) looked up in a BERT
``vocab.txt`` (``BertTokenizer(vocab=...)``); a word match is ``(start, length, word_id)`` for every
occurrence of every vocabulary word in the char sequence. :func:`encode_tokens` encodes a token stream's output
(:mod:`model.tokens`: chars, or a SentencePiece body's pieces with char spans): words are still matched on chars,
and a word's ``word_spans`` entry is the range of tokens its chars overlap, so :func:`collate`'s matching matrix
marks every token a word overlaps (SPEC §6).
"""
from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def to_chars(text: str) -> list[str]:
    """The char tokens of a text: every non-whitespace character, latin lower-cased."""
    return [c.lower() for c in text if not c.isspace()]


def build_char_vocab(texts: Iterable[str], min_freq: int = 1) -> list[str]:
    """BERT vocab lines: the 5 specials, then chars seen >= ``min_freq`` times (freq desc, then char)."""
    counts = Counter(c for t in texts for c in to_chars(t))
    chars = sorted((c for c, n in counts.items() if n >= min_freq and c not in SPECIALS), key=lambda c: (-counts[c], c))
    return list(SPECIALS) + chars


def save_char_tokenizer(vocab: Sequence[str], out_dir: str | os.PathLike):
    """Write ``vocab.txt`` and save a ``BertTokenizer`` over it (HF ``save_pretrained`` layout).

    Returns the tokenizer.
    """
    from transformers import BertTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = BertTokenizer(vocab=str(out_dir / "vocab.txt"), do_lower_case=True, tokenize_chinese_chars=True)
    tok.save_pretrained(str(out_dir))
    return tok


class CharEncoder:
    """Maps chars to ids of a BERT tokenizer's vocab (unknown -> ``[UNK]``).

    Args:
        vocab: token -> id (e.g. ``BertTokenizer.get_vocab()``); must hold the 5 specials.

    Raises:
        ValueError: a special token is missing.
    """

    def __init__(self, vocab: dict[str, int]):
        missing = [s for s in SPECIALS if s not in vocab]
        if missing:
            raise ValueError(f"char vocab lacks special tokens {missing}")
        self.vocab = vocab
        self.pad, self.unk, self.cls, self.sep, self.mask = (vocab[s] for s in SPECIALS)
        self.size = max(vocab.values()) + 1
        self._normal_ids = np.array(sorted(i for t, i in vocab.items() if t not in SPECIALS), dtype=np.int64)

    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> "CharEncoder":
        """Load from a folder with ``vocab.txt`` (a tokenizer or checkpoint dir)."""
        from transformers import BertTokenizer

        return cls(BertTokenizer(vocab=str(Path(path) / "vocab.txt")).get_vocab())

    def ids(self, chars: Sequence[str]) -> list[int]:
        """Ids of char tokens (see :func:`to_chars`)."""
        get, unk = self.vocab.get, self.unk
        return [get(c, unk) for c in chars]

    def random_ids(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` random non-special ids (for the 10% random replacement of MLM)."""
        return self._normal_ids[rng.integers(len(self._normal_ids), size=n)]


class WordMatcher:
    """Finds every occurrence of every vocabulary word (lengths min..max) in a char sequence.

    Word ids are 1..V in vocab order; 0 is padding. ``size`` = V + 1 (the model's word_vocab_size).
    """

    def __init__(self, words: Sequence[str]):
        self.word_to_id = {w.lower(): i + 1 for i, w in enumerate(words)}
        lengths = [len(w) for w in self.word_to_id] or [2]
        self.min_len, self.max_len = min(lengths), max(lengths)
        self.size = len(words) + 1
        # every proper prefix of a word: a scan from a position stops at the first span that starts no word
        self._prefixes = frozenset(w[:k] for w in self.word_to_id for k in range(1, len(w)))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "WordMatcher":
        """Load from a ``vocab.txt`` with one word per line."""
        return cls([w for w in Path(path).read_text(encoding="utf-8").splitlines() if w])

    def match(self, chars: Sequence[str], offset: int = 0) -> list[tuple[int, int, int]]:
        """``(start + offset, length, word_id)`` of all vocabulary words in ``chars`` (lengths
        ``min_len..max_len`` in chars), ordered by start, then length.

        Each start extends its span one char at a time while the span is a prefix of some word, so the
        cost is linear in ``len(chars)`` times the longest matching prefix, whatever the vocabulary size.
        """
        out, get, prefixes = [], self.word_to_id.get, self._prefixes
        lo, hi, n = self.min_len, self.max_len, len(chars)
        for i in range(n):
            span = ""
            for ln in range(1, min(hi, n - i) + 1):
                span += chars[i + ln - 1]
                if ln >= lo:
                    wid = get(span)
                    if wid:
                        out.append((i + offset, ln, wid))
                if span not in prefixes:
                    break
        return out


@dataclass
class Encoded:
    """One example: input_ids, token_type_ids (seq_len,), word_ids (n_words,), word_spans [(start, len)]."""

    input_ids: list[int]
    token_type_ids: list[int]
    word_ids: list[int]
    word_spans: list[tuple[int, int]]


def truncate_pair(a: list, b: list | None, max_tokens: int) -> tuple[list, list | None]:
    """Longest-first truncation so that ``len(a) + len(b) <= max_tokens``."""
    if b is None:
        return list(a[:max(max_tokens, 0)]), None
    la, lb = _truncated_lengths(len(a), len(b), max_tokens)
    return list(a[:la]), list(b[:lb])


def _truncated_lengths(la: int, lb: int, max_tokens: int) -> tuple[int, int]:
    """Lengths after longest-first truncation (drop from the longer side, from ``a`` on a tie) in O(1):
    the shorter side is kept whole when the longer one can absorb the cut, else both end near half."""
    m = max(max_tokens, 0)
    if la + lb <= m:
        return la, lb
    if la >= lb:
        return (m - lb, lb) if m - lb >= lb else (m // 2, m - m // 2)
    return (la, m - la) if m - la >= la else (m // 2, m - m // 2)


def encode_chars(chars_a: Sequence[str], chars_b: Sequence[str] | None, enc: CharEncoder, max_len: int
                 ) -> tuple[list[int], list[int], list[str], list[str] | None]:
    """``[CLS] a [SEP] (b [SEP])`` char ids and token type ids (both ``(seq_len,)``, ``seq_len <= max_len``),
    with the (longest-first truncated) char lists ``a`` and ``b`` they were built from."""
    a, b = truncate_pair(chars_a, chars_b, max_len - (3 if chars_b is not None else 2))
    ids = [enc.cls] + enc.ids(a) + [enc.sep]
    tt = [0] * len(ids)
    if b is not None:
        ids += enc.ids(b) + [enc.sep]
        tt += [1] * (len(b) + 1)
    return ids, tt, a, b


def match_pair(a: Sequence[str], b: Sequence[str] | None, matcher: WordMatcher) -> list[tuple[int, int, int]]:
    """``(start, length, word_id)`` of every vocabulary word in ``a`` and ``b``, positions in the
    ``[CLS] a [SEP] b [SEP]`` sequence of :func:`encode_chars` (never across ``[SEP]``)."""
    words = matcher.match(a, offset=1)
    if b is not None:
        words += matcher.match(b, offset=len(a) + 2)
    return words


def select_words(words: list[tuple[int, int, int]], max_words: int, rng: np.random.Generator,
                 mlm_labels: Sequence[int] | None = None) -> tuple[list[int], list[tuple[int, int]]]:
    """Word ids and ``(start, length)`` spans kept for an example: with ``mlm_labels`` every word
    overlapping a predicted position (label != -100: masked, replaced or kept) is dropped first, so
    no word id reveals a masked char; then the words are shuffled with ``rng`` and cut to
    ``max_words`` (SPEC §6). ZEN matches n-grams on the masked text, which drops the words over
    masked chars too but keeps those over the 10 % kept ones; dropping those as well is stricter
    (nothing about a predicted char reaches the word encoder) at the cost of a faint cue that a
    kept char is a target."""
    if mlm_labels is not None and words:
        cum, c = [0], 0  # cum[p] = predicted positions before p
        for lab in mlm_labels:
            c += lab != -100
            cum.append(c)
        if c:
            words = [w for w in words if cum[w[0] + w[1]] == cum[w[0]]]
    if words:
        order = rng.permutation(len(words))[:max_words]
        words = [words[i] for i in order]
    return [w[2] for w in words], [(w[0], w[1]) for w in words]


def encode(chars_a: Sequence[str], chars_b: Sequence[str] | None, enc: CharEncoder, matcher: WordMatcher,
           max_len: int, max_words: int, rng: np.random.Generator) -> Encoded:
    """``[CLS] a [SEP] (b [SEP])`` char ids with word matches (never across ``[SEP]``), for
    unmasked inputs (fine-tuning, embedding). Words are every vocabulary occurrence, shuffled with
    ``rng`` and cut to ``max_words``; pretraining masks first and then selects words
    (:func:`select_words` with the MLM labels)."""
    ids, tt, a, b = encode_chars(chars_a, chars_b, enc, max_len)
    word_ids, spans = select_words(match_pair(a, b, matcher), max_words, rng)
    return Encoded(ids, tt, word_ids, spans)


def encode_tokens(ta, tb, enc, matcher: WordMatcher, max_len: int, max_words: int,
                  rng: np.random.Generator) -> Encoded:
    """:func:`encode` on a token stream's output (SPEC §6, "Tokens of a SentencePiece body"):
    ``[CLS] a [SEP] (b [SEP])`` token ids (longest-first truncation in tokens), words matched on each side's
    chars and mapped to the tokens their char span overlaps (:meth:`model.tokens.Tokens.word_tokens`), so
    ``word_spans`` are ``(first token, token count)`` and :func:`collate`'s matching matrix marks every token
    a word overlaps. On a one-char-per-token stream this is exactly :func:`encode` (tested).

    Args:
        ta, tb: :class:`model.tokens.Tokens` of each side (``tb`` None: a single text); enc: its stream
            (``cls``/``sep`` ids).
    """
    la, lb = _truncated_lengths(len(ta.ids), len(tb.ids) if tb is not None else 0,
                                max_len - (3 if tb is not None else 2))
    a = ta.head(la)
    ids = [enc.cls] + list(a.ids) + [enc.sep]
    tt = [0] * len(ids)
    words = a.word_tokens(matcher.match(a.chars), la, 1)
    if tb is not None:
        b = tb.head(lb)
        ids += list(b.ids) + [enc.sep]
        tt += [1] * (lb + 1)
        words += b.word_tokens(matcher.match(b.chars), lb, la + 2)
    word_ids, spans = select_words(words, max_words, rng)
    return Encoded(ids, tt, word_ids, spans)


def _spans(e: dict, w: int) -> np.ndarray:
    """(n, 2) int64 ``(start, length)`` of an example's first ``w`` word spans (lists or Parquet arrays)."""
    spans = list(e["word_spans"])[:w]
    return np.asarray([np.asarray(s, dtype=np.int64) for s in spans], dtype=np.int64).reshape(-1, 2)


def _pad(rows: Sequence, width: int, fill: int) -> torch.Tensor:
    """Ragged int rows -> (len(rows), width) int64, right-padded with ``fill``, in one vectorised copy."""
    lens = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    out = np.full((len(rows), width), fill, dtype=np.int64)
    if lens.sum():
        out[np.arange(width)[None, :] < lens[:, None]] = np.concatenate([np.asarray(r, dtype=np.int64) for r in rows])
    return torch.from_numpy(out)


def collate(examples: Sequence[dict], max_words: int, pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Pad a batch of example dicts (input_ids, token_type_ids, word_ids, word_spans, optional
    mlm_labels / nsp_label / label) into tensors, vectorised (no per-word Python loop).

    Returns:
        input_ids, attention_mask, token_type_ids (batch, seq_len); word_ids (batch, W);
        matching_matrix (batch, W, seq_len) float 0/1 with W = min(max_words, max words in batch) >= 1;
        labels (batch, seq_len) -100 padded; next_sentence_label / labels (batch,).
    """
    b = len(examples)
    seq = max(len(e["input_ids"]) for e in examples)
    w = max(1, min(max_words, max(len(e["word_ids"]) for e in examples)))
    ids = _pad([e["input_ids"] for e in examples], seq, pad_id)
    att = _pad([np.ones(len(e["input_ids"]), dtype=np.int64) for e in examples], seq, 0)
    tt = _pad([e["token_type_ids"] for e in examples], seq, 0)
    wid = _pad([list(e["word_ids"])[:w] for e in examples], w, 0)
    spans = [_spans(e, w) for e in examples]
    n = np.fromiter((len(s) for s in spans), dtype=np.int64, count=b)
    mm = torch.zeros((b, w, seq), dtype=torch.float32)
    if n.sum():
        flat = torch.from_numpy(np.concatenate(spans))  # (N, 2)
        bi = torch.from_numpy(np.repeat(np.arange(b), n))
        qi = torch.from_numpy(np.concatenate([np.arange(k) for k in n]))
        pos = torch.arange(seq)[None, :]
        mm[bi, qi] = ((pos >= flat[:, :1]) & (pos < flat[:, :1] + flat[:, 1:])).float()
    out = dict(input_ids=ids, attention_mask=att, token_type_ids=tt, word_ids=wid, matching_matrix=mm)
    if "mlm_labels" in examples[0]:
        out["labels"] = _pad([e["mlm_labels"] for e in examples], seq, -100)
    if "nsp_label" in examples[0]:
        out["next_sentence_label"] = torch.as_tensor([int(e["nsp_label"]) for e in examples])
    if "label" in examples[0]:
        out["labels"] = torch.as_tensor([int(e["label"]) for e in examples])
    return out
