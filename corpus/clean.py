"""Cleaning rules of SPEC §3 (thesis §3.2.2): each rule is a named function ``text -> (text, n)``
returning the cleaned text and how many matches it changed, so the stage report counts every rule.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterable

import numpy as np

from storage.bounds import check_bounds

CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_CHAR = re.compile(f"[{CJK}]")
# CJK characters plus full-width punctuation: context in which half-width marks become full width
_CJK_CTX = f"[{CJK}\u3000-\u303f\uff00-\uffef“”‘’]"

Rule = Callable[[str], "tuple[str, int]"]


def _sub(pattern: re.Pattern, repl, text: str) -> tuple[str, int]:
    return pattern.subn(repl, text)


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u200b-\u200f\u2028\u2029\ufeff]")
_ODD_SPACE = re.compile(r"[\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000\t]")


def remove_control_chars(text: str) -> tuple[str, int]:
    """Remove control and zero-width characters (``\\x0c`` form feeds, BOMs); odd spaces become ' '."""
    text, n = _sub(_CONTROL, "", text)
    text, m = _sub(_ODD_SPACE, " ", text)
    return text, n + m


_MOJIBAKE = re.compile(r"[\ufffd\ue000-\uf8ff]|(?:[ÃÂâ][\u0080-\u00bf€™œ\u201a-\u201e]){1,}")


def remove_mojibake(text: str) -> tuple[str, int]:
    """Remove replacement chars (U+FFFD), private-use glyphs from PDF fonts, and UTF-8-as-Latin-1 runs (``â€”``)."""
    return _sub(_MOJIBAKE, "", text)


_SOFT_NEWLINE = re.compile(r"(?<![。！？；!?;：:\n])[ \t]*\n[ \t]*(?!\n)")
_PARAGRAPH = re.compile(r"\s*\n\s*\n\s*")


def join_broken_lines(text: str) -> tuple[str, int]:
    """Replace newlines that are not paragraph boundaries (no end mark before, no blank line) by nothing."""
    text, n = _sub(_SOFT_NEWLINE, "", text)
    text, m = _sub(_PARAGRAPH, "\n", text)
    return text, n + m


_URL = re.compile(r"(?:https?://|www\.)[A-Za-z0-9\-._~:/?#\[\]@!$&'*+,;=%]+"
                  r"|(?<![A-Za-z0-9\-.@])[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.(?:com|cn|org|net|gov|edu)(?![A-Za-z])"
                  r"(?:/[A-Za-z0-9\-._~/?=&%#]*)?")


def remove_urls(text: str) -> tuple[str, int]:
    """Remove ``http(s)://…``, ``www.…`` and bare ``….com/.cn/.org/.net/.gov/.edu`` addresses."""
    return _sub(_URL, "", text)


_TABLE_ROW = re.compile(r"\|(?:[^|\n]{0,40}\|){2,}")
_DASH_TABLE = re.compile(f"(?:[{CJK}A-Za-z0-9]{{1,8}}——){{2,}}[{CJK}A-Za-z0-9]{{1,8}}(?:——)?")


def remove_table_residue(text: str) -> tuple[str, int]:
    """Remove ``|xx|yy|`` table rows and runs of >= 3 short column names joined by ``——``."""
    text, n = _sub(_TABLE_ROW, "", text)
    text, m = _sub(_DASH_TABLE, "", text)
    return text, n + m


_FOOTER = re.compile(r"第\s*\d+\s*页\s*[,，/]?\s*共\s*\d+\s*页"         # 第 3 页 共 10 页
                     r"|(?:^|(?<=\n)|(?<=\s))第\s*\d+\s*页(?=\s|$)"      # 第 3 页 standing alone
                     r"|(?<![A-Za-z0-9\-—–])[-—–]\s*\d{1,3}\s*[-—–](?![A-Za-z0-9\-—–])", re.M)  # - 3 -


def remove_page_footers(text: str) -> tuple[str, int]:
    """Remove page numbering: ``第 x 页 共 y 页``, a ``第 x 页`` standing alone, ``- 3 -``, ``— 3 —``.

    A ``第 x 页`` inside a sentence (a citation such as ``出版社，第71页。``) is kept."""
    return _sub(_FOOTER, "", text)


_ATTACHMENT = re.compile(r"附件\s*[:：]?\s*\d{1,2}\s*[:：.、]?\s*(?=\n|$)|^附件\s*\d{0,2}\s*[:：]?\s*$", re.M)


def remove_attachment_lines(text: str) -> tuple[str, int]:
    """Remove attachment marker lines (``附件 1``, ``附件：``) standing alone on a line or at the end."""
    return _sub(_ATTACHMENT, "", text)


_REF_MARK = re.compile(r"\[\s*(?:图|表|注)?\s*\d{1,3}\s*\]|［\s*\d{1,3}\s*］|(?<=[^\s\d(（])\(\d{1,2}\)")


def remove_reference_marks(text: str) -> tuple[str, int]:
    """Remove bracketed reference marks: ``[1]``, ``[图 1]``, ``[表2]`` and ``(1)`` glued to preceding text."""
    return _sub(_REF_MARK, "", text)


_HALF_TO_FULL = {":": "：", ",": "，", ";": "；", "?": "？", "!": "！"}
_HALF_BEFORE = re.compile(f"(?<={_CJK_CTX})\\s*([:,;?!])(?!\\d)")
_HALF_AFTER = re.compile(f"([:,;?!])\\s*(?={_CJK_CTX})")
_PAREN = re.compile(r"\(([^()\n]{0,200})\)")
_CJK_CTX_RE = re.compile(_CJK_CTX)


def normalize_punctuation(text: str) -> tuple[str, int]:
    """Half-width ``: , ; ? !`` next to Chinese text become full width (``，`` ``：`` …); a ``( … )`` pair
    becomes ``（ … ）`` as a pair when it holds or touches Chinese text; ``1,000`` and latin stay."""

    pairs = [0]

    def paren(m: re.Match) -> str:
        before = m.string[m.start() - 1] if m.start() else ""
        after = m.string[m.end()] if m.end() < len(m.string) else ""
        if _CJK_CHAR.search(m.group(1)) or _CJK_CTX_RE.match(before or " ") or _CJK_CTX_RE.match(after or " "):
            pairs[0] += 1
            return f"（{m.group(1)}）"
        return m.group(0)

    def repl(m: re.Match) -> str:
        return _HALF_TO_FULL[m.group(1)]

    new = _PAREN.sub(paren, text)
    new, a = _HALF_BEFORE.subn(repl, new)
    new, b = _HALF_AFTER.subn(repl, new)
    return new, pairs[0] + a + b


_CJK_SPACE = re.compile(f"(?<={_CJK_CTX})[ ]+(?={_CJK_CTX})")
_MULTI_SPACE = re.compile(r"[ ]{2,}")


def remove_cjk_spaces(text: str) -> tuple[str, int]:
    """Remove spaces between CJK characters/punctuation; collapse other runs of spaces to one."""
    text, n = _sub(_CJK_SPACE, "", text)
    text, m = _sub(_MULTI_SPACE, " ", text)
    return text, n + m


RULES: tuple[tuple[str, Rule], ...] = (
    ("control_chars", remove_control_chars),
    ("mojibake", remove_mojibake),
    ("broken_lines", join_broken_lines),
    ("urls", remove_urls),
    ("table_residue", remove_table_residue),
    ("page_footers", remove_page_footers),
    ("attachment_lines", remove_attachment_lines),
    ("reference_marks", remove_reference_marks),
    ("punctuation", normalize_punctuation),
    ("cjk_spaces", remove_cjk_spaces),
)


@dataclass(frozen=True)
class CleanConfig:
    """Cleaning and rejection settings (SPEC §3).

    min_chars: documents shorter than this after cleaning are rejected (chars).
    min_cjk_ratio: documents whose share of CJK characters among non-space chars is lower are
        rejected as mostly non-Chinese.
    near_dup_threshold: MinHash Jaccard threshold for near-duplicates (0 disables).
    num_perm: MinHash permutations; shingle: character n-gram size of the shingles.
    shard_docs: documents the stage holds at a time (memory only: the output is the same for any value).
    repeat_share: a line found in more than this share of one source's distinct documents is site chrome
        and removed (the repeated-line rule of C4 / CCNet, per source); 1.0 disables the rule.
    repeat_min_docs: sources with fewer distinct documents are not checked (the share is noise there).

    Raises:
        ValueError: a setting outside its bounds (named in the message).
    """

    min_chars: int = 20
    min_cjk_ratio: float = 0.3
    near_dup_threshold: float = 0.9
    num_perm: int = 128
    shingle: int = 5
    shard_docs: int = 256
    repeat_share: float = 0.5
    repeat_min_docs: int = 20

    def __post_init__(self):
        check_bounds(self, min_chars=(0, None), min_cjk_ratio=(0, 1), near_dup_threshold=(0, 1),
                     num_perm=(1, 4096), shingle=(1, 1000), shard_docs=(1, 10_000_000),
                     repeat_share=(">", 0, 1), repeat_min_docs=(2, None))


def clean_text(text: str) -> tuple[str, Counter]:
    """Apply every rule of :data:`RULES` in order (after NFC normalisation).

    Returns:
        ``(cleaned text, Counter rule name -> matches changed)``.
    """
    counts: Counter = Counter()
    text = unicodedata.normalize("NFC", text)
    for name, rule in RULES:
        text, n = rule(text)
        if n:
            counts[name] += n
    return text.strip(), counts


def cjk_ratio(text: str) -> float:
    """Share of CJK ideographs among the non-whitespace characters of ``text`` (0.0 for empty)."""
    chars = [c for c in text if not c.isspace()]
    if not chars:
        return 0.0
    return sum(1 for c in chars if _CJK_CHAR.match(c)) / len(chars)


# ---------------------------------------------------------------- repeated lines (site chrome per source)
#
# C4 (Raffel et al. 2020) and CCNet (Wenzek et al. 2020) drop lines that repeat across pages: here, per
# source, a line found in more than ``repeat_share`` of the source's distinct documents is chrome (a
# header, footer or disclaimer the extractor did not know). Document structure is never counted: table
# rows (tab-separated cells), short numbered headings (第一章 总则, 一、总体要求), and the parts of an
# official document's layout (GB/T 9704) that repeat across one issuer's documents: the addressee line
# ending in a colon (各省、自治区、直辖市人民政府：) and the issuer's signature above the date.

_HEADING = re.compile(r"^(?:第[一二三四五六七八九十百千零〇\d]+[编章节条款部分]|[一二三四五六七八九十]+[、.．]"
                      r"|[（(][一二三四五六七八九十\d]+[）)]|\d+[.、．])")
_DATE_LINE = re.compile(r"^\s*(?:\d{4}|[一二三四五六七八九十〇零○]{4})\s*年\s*[\d一二三四五六七八九十]{1,3}\s*月"
                        r"\s*[\d一二三四五六七八九十]{1,3}\s*日\s*$")


def repeat_line(line: str) -> str | None:
    """The form a line is counted in (whitespace collapsed), or None if the rule never removes it: empty,
    a table row, a numbered heading of at most 20 chars, or a line ending in a colon (an addressee)."""
    if "\t" in line:
        return None
    key = " ".join(line.split())
    if not key or (len(key) <= 20 and _HEADING.match(key)) or key.endswith(("：", ":")):
        return None
    return key


def countable_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, counted form)`` of the lines of ``text`` the repeated-line rule may remove
    (:func:`repeat_line`; a line right above a date line, the signature, is structure too)."""
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines):
        key = repeat_line(line)
        if key is not None and not (i + 1 < len(lines) and _DATE_LINE.match(lines[i + 1])):
            out.append((i, key))
    return out


def line_hash(source: str, line: str) -> int:
    """64-bit key of a (source, line) pair: the first 8 bytes of blake2b(source US line)."""
    return int.from_bytes(hashlib.blake2b(f"{source}\x1f{line}".encode("utf-8"), digest_size=8).digest(), "little")


def doc_line_keys(source: str, text: str) -> np.ndarray:
    """The distinct :func:`line_hash` keys of a document's countable lines (uint64, sorted)."""
    keys = {line_hash(source, k) for _, k in countable_lines(text)}
    return np.array(sorted(keys), dtype=np.uint64)


@dataclass
class LineCounts:
    """Documents per (source, line) over a corpus, built document by document (:meth:`add`) and merged
    in chunks: memory 12 bytes per distinct (source, line) plus one chunk. Exact duplicates of a source's
    document are counted once (the same page cited twice is not a repeat)."""

    chunk: int = 1_000_000
    docs: Counter = field(default_factory=Counter)
    _seen: set = field(default_factory=set)
    _keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.uint64))
    _counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    _src: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int32))
    _sources: dict = field(default_factory=dict)
    _buf: list = field(default_factory=list)
    _buf_rows: int = 0

    def add(self, source: str, text: str) -> None:
        """Count the distinct lines of one document of ``source``."""
        digest = hashlib.blake2b(f"{source}\x1f{text}".encode("utf-8"), digest_size=8).digest()
        if digest in self._seen:
            return
        self._seen.add(digest)
        self.docs[source] += 1
        keys = doc_line_keys(source, text)
        idx = self._sources.setdefault(source, len(self._sources))
        self._buf.append((keys, np.full(len(keys), idx, np.int32)))
        self._buf_rows += len(keys)
        if self._buf_rows >= self.chunk:
            self._merge()

    def _merge(self) -> None:
        if not self._buf:
            return
        keys = np.concatenate([self._keys] + [k for k, _ in self._buf])
        counts = np.concatenate([self._counts, np.ones(self._buf_rows, np.int32)])
        src = np.concatenate([self._src] + [s for _, s in self._buf])
        order = np.argsort(keys, kind="stable")
        keys, counts, src = keys[order], counts[order], src[order]
        starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if len(keys) else np.zeros(0, int)
        self._keys, self._src = keys[starts], src[starts]
        self._counts = np.add.reduceat(counts, starts).astype(np.int32) if len(keys) else counts
        self._buf, self._buf_rows = [], 0

    def chrome(self, share: float, min_docs: int) -> set[int]:
        """Keys of the lines found in more than ``share`` of their source's documents, in sources of at
        least ``min_docs`` documents."""
        self._merge()
        n_docs = np.zeros(len(self._sources), np.int64)
        for source, idx in self._sources.items():
            n_docs[idx] = self.docs[source]
        n = n_docs[self._src] if len(self._src) else np.zeros(0, np.int64)
        hit = (n >= min_docs) & (self._counts > share * n)
        return set(self._keys[hit].tolist())


def remove_repeated_lines(source: str, text: str, chrome: set[int]) -> tuple[str, list[str]]:
    """``text`` without its countable lines (:func:`countable_lines`) whose (source, line) key is in
    ``chrome`` (from :meth:`LineCounts.chrome`); returns ``(text, removed lines)``."""
    if not chrome:
        return text, []
    gone = {i for i, k in countable_lines(text) if line_hash(source, k) in chrome}
    if not gone:
        return text, []
    lines = text.split("\n")
    return "\n".join(ln for i, ln in enumerate(lines) if i not in gone), [lines[i] for i in sorted(gone)]


def repeated_line_stats(removed: Counter, docs: Counter, max_examples: int = 5) -> dict:
    """Per source with removals (most lines removed first): its distinct documents, the lines removed,
    the distinct lines and up to ``max_examples`` of them (most frequent first), from ``removed``:
    (source, line) -> times removed."""
    per: dict[str, Counter] = {}
    for (source, line), n in removed.items():
        per.setdefault(source, Counter())[" ".join(line.split())] += n
    out = {}
    for source, c in sorted(per.items(), key=lambda kv: (-sum(kv[1].values()), kv[0])):
        examples = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:max_examples]
        out[source] = {"documents": int(docs[source]), "lines_removed": int(sum(c.values())),
                       "distinct_lines": len(c), "examples": [ln[:120] for ln, _ in examples]}
    return out
