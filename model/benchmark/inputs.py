"""Model inputs of the benchmark tasks (SPEC §6 inputs, §10 heads): char ids, vocabulary word matches and labels.

- Token tasks (CWS, NER): a label per char; word tasks (POS): the word's tag on its first char, -100 on the
  others. A sentence longer than ``max_len - 2`` chars is cut into consecutive windows, each encoded as
  ``[CLS] window [SEP]``; predictions are stitched back per sentence, so every char of the test set is scored.
- Sequence tasks (DC, SA): ``[CLS] text [SEP]``; pair tasks (SPM): ``[CLS] a [SEP] b [SEP]`` (longest-first
  truncation), label = index of the label in the task's label list.

On a SentencePiece body (a :class:`model.tokens.PieceStream`, SPEC §6 "Tokens of a SentencePiece body") the
positions are the body's own pieces: a sentence's pieces are cut into windows of ``max_len - 2`` pieces, a token's
label is combined from its chars' tags (:func:`model.benchmark.metrics.token_tag`), and a prediction is spread back
over the token's chars (:func:`char_predictions`), so scoring stays per character.

Word matches are every occurrence of every vocabulary word inside the window (:class:`model.features.WordMatcher`),
shuffled per seed and cut to ``max_words``. The word vocabulary is the checkpoint's ``word_vocab.txt``, a data
dir's ``vocab/vocab.txt``, or built from the task's train split with the project's segmenter and vocabulary
filters (SPEC §4), never from dev or test.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from model.benchmark.data import Splits
from model.benchmark.metrics import char_tags, tag_scheme, token_tag
from model.features import CharEncoder, WordMatcher, encode, encode_tokens as encode_token_pair, select_words, to_chars
from model.tokens import Tokens, as_tokens


def is_pieces(enc) -> bool:
    """True for a stream of SentencePiece pieces (:class:`model.tokens.PieceStream`)."""
    return getattr(enc, "kind", "chars") == "pieces"

STOPWORDS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "stopwords.txt"


def train_texts(splits: Splits) -> list[str]:
    """The texts of the train split (both sides of a pair), for building a word vocabulary."""
    df, kind = splits.train, splits.task.kind
    if kind == "token":
        return ["".join(c) for c in df["chars"]]
    if kind == "word":
        return ["".join(w) for w in df["words"]]
    if kind == "pair":
        return list(df["text_a"]) + list(df["text_b"])
    return list(df["text"])


def build_word_vocab(texts: Sequence[str], segmenter, min_freq: int = 2) -> list[str]:
    """Vocabulary words of ``texts``: segmented with ``segmenter`` (:mod:`corpus.segment`), filtered as the
    corpus vocabulary is (:func:`corpus.vocab.keep_word`: 2-5 chars, no stopwords, punctuation or digits) and
    kept at ``min_freq`` occurrences or more; most frequent first."""
    from corpus.vocab import VocabConfig, build_vocab, load_stopwords

    stop = load_stopwords(STOPWORDS) if STOPWORDS.is_file() else set()
    segs = segmenter.segment(list(texts))
    vocab, _ = build_vocab(segs, range(len(segs)), stop, VocabConfig(min_freq=min_freq))
    return list(vocab["word"])


def word_matcher(splits: Splits, model_dir: str | os.PathLike | None = None,
                 vocab_path: str | os.PathLike | None = None, segmenter=None) -> tuple[WordMatcher, str]:
    """The word matcher for a task and where its words came from: the checkpoint's ``word_vocab.txt`` (a
    pretrained word encoder reads its own ids), else ``vocab_path`` (a ``vocab.txt`` file or a data dir holding
    ``vocab/vocab.txt``), else the task's train split segmented by ``segmenter`` (default: HanLP dictionary)."""
    if model_dir is not None and (Path(model_dir) / "word_vocab.txt").is_file():
        return WordMatcher.from_file(Path(model_dir) / "word_vocab.txt"), "checkpoint word_vocab.txt"
    if vocab_path is not None:
        p = Path(vocab_path)
        p = p / "vocab" / "vocab.txt" if p.is_dir() else p
        return WordMatcher.from_file(p), str(p)
    if segmenter is None:
        from corpus.segment import load_segmenter

        segmenter = load_segmenter("hanlp-dict")
    words = build_word_vocab(train_texts(splits), segmenter)
    return WordMatcher(words), f"train split segmented by {segmenter.backend} ({len(words)} words)"


def _norm(c: str) -> str:
    low = c.lower()
    return low if len(low) == 1 else c


def windows(n: int, width: int) -> list[tuple[int, int]]:
    """``(start, end)`` of consecutive windows of at most ``width`` over ``n`` items (one empty window if n = 0)."""
    width = max(width, 1)
    return [(i, min(i + width, n)) for i in range(0, max(n, 1), width)]


def token_rows(splits_df, kind: str) -> list[tuple[list[str], list[str | None]]]:
    """Per sentence: its chars and a tag per char (word tasks: the word's tag on its first char, None after)."""
    out = []
    if kind == "token":
        for chars, tags in zip(splits_df["chars"], splits_df["tags"]):
            out.append((list(chars), list(tags)))
    else:
        for words, tags in zip(splits_df["words"], splits_df["tags"]):
            chars, per = [], []
            for w, t in zip(words, tags):
                chars += list(w)
                per += [t] + [None] * (len(w) - 1)
            out.append((chars, per))
    return out


def encode_tokens(df, kind: str, labels: Sequence[str], enc: CharEncoder, matcher: WordMatcher, max_len: int,
                  max_words: int, seed: int) -> list[dict]:
    """Token/word-task example dicts, one per window: input_ids, token_type_ids, word_ids, word_spans,
    ``tag_labels`` (seq_len,) with -100 on ``[CLS]``/``[SEP]`` and unscored chars, and ``row``/``start``/``n``
    (the sentence, the window's first char, its char count) for stitching predictions back."""
    if is_pieces(enc):
        return encode_piece_tokens(df, kind, labels, enc, matcher, max_len, max_words, seed)
    index = {t: i for i, t in enumerate(labels)}
    rng = np.random.default_rng(seed)
    out = []
    for row, (chars, tags) in enumerate(token_rows(df, kind)):
        normed = [_norm(c) for c in chars]
        for a, b in windows(len(chars), max_len - 2):
            ids = [enc.cls] + enc.ids(normed[a:b]) + [enc.sep]
            word_ids, spans = select_words(matcher.match(normed[a:b], offset=1), max_words, rng)
            lab = [-100] + [index[t] if t is not None else -100 for t in tags[a:b]] + [-100]
            out.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "word_ids": word_ids,
                        "word_spans": spans, "tag_labels": lab, "row": row, "start": a, "n": b - a})
    return out


def encode_piece_tokens(df, kind: str, labels: Sequence[str], enc, matcher: WordMatcher, max_len: int,
                        max_words: int, seed: int) -> list[dict]:
    """:func:`encode_tokens` on a SentencePiece body's pieces: windows of ``max_len - 2`` pieces, a label per
    piece from its chars' tags (-100 for a piece covering no char or no scored char), words mapped to the pieces
    they overlap; ``start``/``n`` are the window's chars and ``token_spans`` each piece's chars (from ``start``),
    for :func:`char_predictions`.

    Raises:
        ValueError: a sentence whose chars are not single non-space characters (their positions would not
            line up with the tokenizer's).
    """
    index, scheme = {t: i for i, t in enumerate(labels)}, tag_scheme(labels)
    rng = np.random.default_rng(seed)
    out = []
    for row, (chars, tags) in enumerate(token_rows(df, kind)):
        toks = enc.tokens("".join(chars))
        if len(toks.chars) != len(chars):
            raise ValueError(f"row {row}: {len(chars)} chars but {len(toks.chars)} after whitespace removal and "
                             "lower-casing (chars must be single non-space characters)")
        for a, b in windows(len(toks.ids), max_len - 2):
            win, c0 = toks.window(a, b), toks.first_char(a, b)
            word_ids, spans = select_words(win.word_tokens(matcher.match(win.chars), b - a, 1), max_words, rng)
            lab = [-100]
            for s, e in win.spans:
                t = token_tag(tags[c0 + s:c0 + e], scheme) if e > s else None
                lab.append(index[t] if t is not None else -100)
            ids = [enc.cls] + list(win.ids) + [enc.sep]
            out.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "word_ids": word_ids, "word_spans": spans,
                        "tag_labels": lab + [-100], "row": row, "start": c0, "n": len(win.chars),
                        "n_tokens": b - a, "token_spans": [list(sp) for sp in win.spans]})
    return out


def char_predictions(example: dict, token_pred: Sequence[int], labels: Sequence[str]) -> list[int]:
    """Per char of a window (``example["n"]`` of them), the label id predicted for it: on a one-char-per-token
    window the token's prediction; on a pieces window (``token_spans``) each piece's predicted tag spread over its
    chars (:func:`model.benchmark.metrics.char_tags`), a char no piece covers taking the previous char's label.

    Args:
        token_pred: label ids of the window's tokens (``[CLS]`` excluded), at least ``n_tokens`` of them.
    """
    if "token_spans" not in example:
        return list(token_pred[:example["n"]])
    scheme, index = tag_scheme(labels), {t: i for i, t in enumerate(labels)}
    out: list[int | None] = [None] * example["n"]
    for (s, e), p in zip(example["token_spans"], token_pred):
        if e > s:
            out[s:e] = [index[t] for t in char_tags(labels[p], e - s, scheme)]
    prev = 0
    for i, p in enumerate(out):
        prev = out[i] = p if p is not None else prev
    return out


def encode_sequences(df, kind: str, labels: Sequence[str], enc: CharEncoder, matcher: WordMatcher, max_len: int,
                     max_words: int, seed: int) -> list[dict]:
    """Sequence/pair example dicts for :func:`model.features.collate`, ``label`` = index in ``labels``."""
    index = {t: i for i, t in enumerate(labels)}
    rng = np.random.default_rng(seed)
    out = []
    if kind == "pair":
        it = ((to_chars(a), to_chars(b), lab) for a, b, lab in zip(df["text_a"], df["text_b"], df["label"]))
    else:
        it = ((to_chars(t), None, lab) for t, lab in zip(df["text"], df["label"]))
    pieces = is_pieces(enc)
    for a, b, lab in it:
        if pieces:  # the body's own pieces; the texts are re-read (to_chars drops what the tokenizer needs)
            e = encode_token_pair(*_texts_of(df, len(out), kind, enc), enc, matcher, max_len, max_words, rng)
        else:
            e = encode(a, b, enc, matcher, max_len, max_words, rng)
        out.append({"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "word_ids": e.word_ids,
                    "word_spans": e.word_spans, "label": index[lab]})
    return out


def _texts_of(df, i: int, kind: str, enc) -> tuple:
    """Row ``i``'s :class:`model.tokens.Tokens` (both sides of a pair, else the text and None)."""
    if kind == "pair":
        return as_tokens(enc, df["text_a"].iloc[i]), as_tokens(enc, df["text_b"].iloc[i])
    return as_tokens(enc, df["text"].iloc[i]), None


def encode_split(df, splits: Splits, enc: CharEncoder, matcher: WordMatcher, max_len: int, max_words: int,
                 seed: int) -> list[dict]:
    """Example dicts of one split for the task's kind (:func:`encode_tokens` or :func:`encode_sequences`)."""
    fn = encode_tokens if splits.task.kind in ("token", "word") else encode_sequences
    return fn(df, splits.task.kind, splits.labels, enc, matcher, max_len, max_words, seed)


@dataclass(frozen=True)
class Collator:
    """Batches for a benchmark model (picklable, for DataLoader workers): :func:`model.features.collate`'s char
    and word inputs (``words`` False: chars only, plain BERT), plus ``labels`` (batch, seq_len) -100-padded
    for token tasks, or (batch,) for sequence tasks."""

    words: bool
    max_words: int
    pad_id: int

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        from model.features import collate

        batch = collate(examples, self.max_words, self.pad_id)
        if not self.words:
            del batch["word_ids"], batch["matching_matrix"]
        if "tag_labels" in examples[0]:
            seq = batch["input_ids"].shape[1]
            lab = torch.full((len(examples), seq), -100, dtype=torch.long)
            for i, e in enumerate(examples):
                lab[i, :len(e["tag_labels"])] = torch.as_tensor(e["tag_labels"])
            batch["labels"] = lab
        return batch
