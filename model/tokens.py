"""Token streams: what PolicyBERT's body reads per position (SPEC §6, "Tokens of a SentencePiece body").

Two kinds, one interface (:class:`TokenStream`):

- ``chars``: one character per position (:class:`CharStream`, a :class:`model.features.CharEncoder`): the
  from-scratch model and char-level bodies, exactly as before (the char path of every encoder is unchanged);
- ``pieces``: the body's own SentencePiece pieces (:class:`PieceStream`, e.g. multilingual-e5-small's
  tokenizer, :mod:`model.e5_tokenizer`), each with its character span.

Words are always matched on characters (:func:`model.features.to_chars`: whitespace dropped, latin
lower-cased); a :class:`Tokens` carries those characters and, per token, the ``[start, end)`` span of
characters it covers, so a word (char span) maps to the tokens whose spans overlap it (:meth:`Tokens.word_tokens`),
and whole-word masking masks every token a masked word overlaps (:mod:`model.pretrain_data`).

Piece spans come from the fast tokenizer's offsets (original text positions), moved onto the whitespace-free
char positions; a lone ``▁`` piece (the metaspace SentencePiece prepends, or a space) covers no char, although
``tokenizers`` reports the prepended one over the first character.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from model.features import CharEncoder, to_chars

STREAM_FILE = "token_stream.json"
KINDS = ("chars", "pieces")


class TokenStreamError(ValueError):
    """A folder holds no tokenizer a stream can be built from, or a tokenizer lacks a special piece."""


@dataclass(frozen=True)
class Tokens:
    """One text as a body reads it.

    Attributes:
        ids: token ids, ``(n_tokens,)``, no ``[CLS]``/``[SEP]``.
        chars: the chars words are matched on (:func:`model.features.to_chars` of the text).
        spans: per token ``(start, end)`` in ``chars`` (end exclusive; ``start == end``: covers no char), or
            None for one char per token (token i = char i).
    """

    ids: list[int]
    chars: list[str]
    spans: list[tuple[int, int]] | None = None

    def head(self, n: int) -> "Tokens":
        """The first ``n`` tokens, with the chars up to the last char they cover."""
        if self.spans is None:
            return Tokens(self.ids[:n], self.chars[:n])
        spans = self.spans[:n]
        end = max((e for _, e in spans), default=0)
        return Tokens(self.ids[:n], self.chars[:end], spans)

    def window(self, a: int, b: int) -> "Tokens":
        """Tokens ``a..b`` as their own :class:`Tokens`: the chars of the span they cover, spans shifted to it
        (a text cut into windows of the body's length: benchmarks, embedding)."""
        if self.spans is None:
            return Tokens(self.ids[a:b], self.chars[a:b])
        spans = self.spans[a:b]
        covered = [(s, e) for s, e in spans if e > s]
        c0 = min((s for s, _ in covered), default=0)
        c1 = max((e for _, e in covered), default=c0)
        return Tokens(self.ids[a:b], self.chars[c0:c1], [(s - c0, e - c0) if e > s else (0, 0) for s, e in spans])

    def first_char(self, a: int, b: int) -> int:
        """The position in :attr:`chars` of the first char tokens ``a..b`` cover (:meth:`window`'s start; 0 if
        they cover none)."""
        if self.spans is None:
            return a
        return min((s for s, e in self.spans[a:b] if e > s), default=0)

    def word_tokens(self, matches: Sequence[tuple], limit: int, offset: int = 0) -> list[tuple]:
        """Char-level spans ``(start, length, *rest)`` (word matches, segmented words) -> token-level
        ``(first token + offset, token count, *rest)``: the tokens whose char spans overlap the word, kept
        when they all lie in the first ``limit`` tokens and there is at least one. Order is kept."""
        if self.spans is None:
            return [(s + offset, ln, *rest) for s, ln, *rest in matches if s + ln <= limit]
        first, last = self._token_of_char()
        out = []
        for s, ln, *rest in matches:
            lo, hi = first[s:s + ln], last[s:s + ln]
            lo, hi = lo[lo >= 0], hi[hi >= 0]
            if len(lo) and hi.max() < limit:
                t0 = int(lo.min())
                out.append((t0 + offset, int(hi.max()) - t0 + 1, *rest))
        return out

    def _token_of_char(self) -> tuple[np.ndarray, np.ndarray]:
        """Per char, the first and last token covering it (-1: none), ``(n_chars,)`` int64 each."""
        n = len(self.chars)
        first, last = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        for t, (s, e) in enumerate(self.spans):
            if e > s:
                seg = first[s:e]
                seg[seg < 0] = t
                last[s:e] = t
        return first, last


class TokenStream:
    """The interface of a stream: ``kind``, special ids ``pad unk cls sep mask``, ``size`` (id range),
    :meth:`tokens`, :meth:`random_ids` (MLM's 10 % random replacement) and :meth:`save`."""

    kind: str
    pad: int
    unk: int
    cls: int
    sep: int
    mask: int
    size: int

    def tokens(self, text: str) -> Tokens:
        """The text's tokens (no specials)."""
        raise NotImplementedError

    def random_ids(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` random non-special ids."""
        raise NotImplementedError

    def save(self, out_dir: str | os.PathLike) -> None:
        """Write what :func:`load_stream` reads back into ``out_dir``."""
        raise NotImplementedError


class CharStream(CharEncoder, TokenStream):
    """One char per position over a BERT ``vocab.txt`` (:class:`model.features.CharEncoder`)."""

    kind = "chars"

    def tokens(self, text: str) -> Tokens:
        chars = to_chars(text)
        return Tokens(self.ids(chars), chars)

    def save(self, out_dir: str | os.PathLike) -> None:
        from model.features import save_char_tokenizer

        vocab = sorted(self.vocab, key=self.vocab.get)
        save_char_tokenizer(vocab, out_dir)
        _write_kind(out_dir, self.kind)


_PIECE_SPECIALS = {"pad": "<pad>", "unk": "<unk>", "cls": "<s>", "sep": "</s>", "mask": "<mask>"}


class PieceStream(TokenStream):
    """The body's own SentencePiece pieces (a ``tokenizers`` fast tokenizer; XLM-R specials ``<s> </s> <pad>
    <unk> <mask>`` as ``[CLS] [SEP] [PAD] [UNK] [MASK]``).

    Raises:
        TokenStreamError: a special piece is missing from the tokenizer.
    """

    kind = "pieces"

    def __init__(self, tokenizer):
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        missing = [p for p in _PIECE_SPECIALS.values() if p not in vocab]
        if missing:
            raise TokenStreamError(f"tokenizer lacks special pieces {missing}")
        self.tokenizer = tokenizer
        for name, piece in _PIECE_SPECIALS.items():
            setattr(self, name, vocab[piece])
        self.size = max(vocab.values()) + 1
        specials = {vocab[p] for p in _PIECE_SPECIALS.values()}
        self._normal = np.array(sorted(set(vocab.values()) - specials), dtype=np.int64)
        self._space = vocab.get("▁")

    @classmethod
    def from_dir(cls, path: str | os.PathLike) -> "PieceStream":
        """From a folder's ``tokenizer.json`` (e.g. the converted e5 checkpoint, :mod:`model.e5`)."""
        from tokenizers import Tokenizer

        f = Path(path) / "tokenizer.json"
        if not f.is_file():
            raise TokenStreamError(f"{path}: no tokenizer.json")
        return cls(Tokenizer.from_file(str(f)))

    def tokens(self, text: str) -> Tokens:
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        # char position of each original position once whitespace is dropped (what to_chars keeps)
        keep = np.fromiter((not c.isspace() for c in text), dtype=np.int64, count=len(text))
        cum = np.concatenate([[0], np.cumsum(keep)])
        spans = [(0, 0) if i == self._space else (int(cum[s]), int(cum[e]))
                 for i, (s, e) in zip(enc.ids, enc.offsets)]
        return Tokens(list(enc.ids), to_chars(text), spans)

    def ids(self, chars: Sequence[str]) -> list[int]:
        """The ids of the pieces of ``"".join(chars)`` (word embeddings of a new word encoder)."""
        return list(self.tokenizer.encode("".join(chars), add_special_tokens=False).ids)

    def random_ids(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return self._normal[rng.integers(len(self._normal), size=n)]

    def save(self, out_dir: str | os.PathLike) -> None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(str(Path(out_dir) / "tokenizer.json"))
        _write_kind(out_dir, self.kind)


def _write_kind(out_dir, kind: str) -> None:
    (Path(out_dir) / STREAM_FILE).write_text(json.dumps({"kind": kind}), encoding="utf-8")


def stream_kind(path: str | os.PathLike) -> str:
    """The stream a folder holds: ``token_stream.json``'s kind, else ``chars`` with a ``vocab.txt``, else
    ``pieces`` with a ``tokenizer.json``.

    Raises:
        TokenStreamError: none of these files, or an unknown kind.
    """
    p = Path(path)
    if (p / STREAM_FILE).is_file():
        kind = json.loads((p / STREAM_FILE).read_text(encoding="utf-8")).get("kind")
        if kind not in KINDS:
            raise TokenStreamError(f"{p / STREAM_FILE}: unknown kind {kind!r} (one of {KINDS})")
        return kind
    if (p / "vocab.txt").is_file():
        return "chars"
    if (p / "tokenizer.json").is_file():
        return "pieces"
    raise TokenStreamError(f"{p}: no vocab.txt or tokenizer.json to read tokens with")


def load_stream(path: str | os.PathLike) -> CharStream | PieceStream:
    """The token stream of a tokenizer or checkpoint folder (:func:`stream_kind`)."""
    if stream_kind(path) == "chars":
        from transformers import BertTokenizer

        return CharStream(BertTokenizer(vocab=str(Path(path) / "vocab.txt")).get_vocab())
    return PieceStream.from_dir(path)


def as_tokens(enc, text: str) -> Tokens:
    """``enc.tokens(text)`` for a stream; a plain :class:`model.features.CharEncoder` reads one char per position."""
    if hasattr(enc, "tokens"):
        return enc.tokens(text)
    chars = to_chars(text)
    return Tokens(enc.ids(chars), chars)
