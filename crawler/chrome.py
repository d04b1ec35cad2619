"""Site chrome (boilerplate) of government pages (SPEC §2): the boilerplate signals of jusText (Pomikálek
2011: link density, short blocks between boilerplate) and trafilatura (Barbaresi 2021: elements outside the
main content node, known boilerplate), with the known chrome of Chinese government pages as data
(crawler/chrome_phrases.txt)."""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from bs4 import NavigableString, Tag

from crawler.html_text import BLOCK_TAGS, CELL_SEP, NOT_TEXT, SKIP_TAGS, is_gone, layout_tables, squeeze

_CHROME_FILE = Path(__file__).with_name("chrome_phrases.txt")
_SEPARATORS = re.compile(r"[\s|｜/／\\·•・>›»<‹«\-—–_:：【】\[\]()（）,，、.。!！?？;；'\"“”‘’]+")
_END_MARK = re.compile(r"[。！？；!?;]")
_DOC_LINK = re.compile(r"\.(?:pdf|docx?|xlsx?|wps|ofd|zip|rar|7z|et|csv|pptx?)(?:$|[?#])", re.I)
_CONTAINERS = frozenset(("div", "section", "article", "main", "td", "center", "body", "form"))
_CHROME_MAX = 200       # chars: longer elements/lines are never chrome by phrase (bounded work)
_BLOCK_CAP = 1500       # chars: what follows a chrome block heading is dropped only up to this size
_LINK_DENSE = 0.6       # share of link text from which a block outside the main content is navigation
_MAIN_SHARE = 0.9       # the main content node holds at least this share of the page's non-link text


@dataclass(frozen=True)
class ChromePhrases:
    """Known chrome (see ``chrome_phrases.txt``): ``tokens`` (a text made only of them is chrome),
    ``prefixes`` (breadcrumbs), ``contains`` (footers), ``blocks`` (headings of chrome blocks), ``labels``
    (chrome when nothing follows). All lower-case, whitespace-free."""

    tokens: frozenset
    prefixes: tuple
    contains: tuple
    blocks: frozenset
    labels: frozenset
    alphabet: frozenset = frozenset()   # the characters of the tokens (a text with others is not all tokens)
    longest: int = 0                    # the longest token (chars)


@functools.lru_cache(maxsize=4)
def load_chrome_phrases(path: str | None = None) -> ChromePhrases:
    """Read a chrome phrase file (default: the one shipped with the package).

    Raises:
        ValueError: a phrase outside a section, or an unknown section (names the line).
    """
    sections: dict[str, list[str]] = {k: [] for k in ("tokens", "prefixes", "contains", "blocks", "labels")}
    current = None
    text = Path(path or _CHROME_FILE).read_text(encoding="utf-8")
    for n, raw in enumerate(text.splitlines(), 1):
        line = "".join(raw.split()).lower()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]") and line[1:-1] in sections:
            current = line[1:-1]
        elif current is None or (line.startswith("[") and line.endswith("]") and len(line) > 2
                                 and line[1:-1].isascii()):
            raise ValueError(f"{path or _CHROME_FILE}:{n}: {raw!r} is outside a known section")
        else:
            sections[current].append(line)
    tokens = frozenset(sections["tokens"])
    return ChromePhrases(tokens, tuple(sections["prefixes"]), tuple(sections["contains"]),
                         frozenset(_chrome_key(b) for b in sections["blocks"]),
                         frozenset(_chrome_key(b) for b in sections["labels"]),
                         frozenset("".join(tokens)), max(map(len, tokens), default=0))


def _chrome_key(text: str) -> str:
    """``text`` lower-cased without whitespace and separators (the form chrome phrases are matched in)."""
    return _SEPARATORS.sub("", text).lower()


def _all_tokens(key: str, tokens: frozenset, longest: int) -> bool:
    """True if ``key`` splits entirely into ``tokens`` (word break, O(len * longest))."""
    ok = [True] + [False] * len(key)
    last = 0  # the last position a split reaches: none past last + longest
    for end in range(1, len(key) + 1):
        if end - last > longest:
            return False
        ok[end] = any(ok[start] and key[start:end] in tokens for start in range(max(0, end - longest), end))
        last = end if ok[end] else last
    return ok[-1]


def is_chrome(text: str, phrases: ChromePhrases) -> bool:
    """True if ``text`` (a line or an element's text) is site chrome by the phrase list: made only of
    chrome tokens and separators (``繁 | EN``, ``无障碍浏览``, ``手机扫一扫打开此页``), a breadcrumb, a
    footer line, a chrome block heading, or a label with nothing after it (``附件信息:``). Texts over
    :data:`_CHROME_MAX` chars are not. Pure separators count as chrome."""
    raw = "".join(text.split()).lower()
    if not raw or len(raw) > _CHROME_MAX:
        return False
    key = _chrome_key(raw)
    if not key:
        return True
    if key in phrases.blocks or key in phrases.labels:
        return True
    if len(key) <= 80 and phrases.alphabet.issuperset(key) and _all_tokens(key, phrases.tokens, phrases.longest):
        return True
    return raw.startswith(phrases.prefixes) or any(c in raw for c in phrases.contains)


@dataclass
class _Stats:
    """Per-element text figures of one bottom-up pass: ``text`` (squeezed, None past
    :data:`_CHROME_MAX` chars), ``chars``, ``link`` (chars inside ``<a>``), ``ends`` (sentence end marks
    outside links), ``doc_link`` (holds a link to a document file: an attachment)."""

    text: str | None = ""
    chars: int = 0
    link: int = 0
    ends: int = 0
    doc_link: bool = False


def _element_stats(root) -> dict[int, _Stats]:
    """:class:`_Stats` of every tag under ``root`` (id -> stats), in one post-order pass: linear."""
    stats: dict[int, _Stats] = {}
    stack = [(root, False)]
    while stack:
        el, done = stack.pop()
        if not done:
            stack.append((el, True))
            stack.extend((c, False) for c in reversed(el.contents) if isinstance(c, Tag) and c.name not in SKIP_TAGS)
            continue
        st = _Stats(doc_link=el.name == "a" and bool(_DOC_LINK.search(str(el.get("href") or ""))))
        parts: list[str] | None = []
        size = 0
        for c in el.contents:
            if isinstance(c, NavigableString):
                if isinstance(c, NOT_TEXT):
                    continue
                t = squeeze(str(c))
                st.chars, st.ends = st.chars + len(t), st.ends + len(_END_MARK.findall(t))
            elif isinstance(c, Tag) and c.name not in SKIP_TAGS:
                cs = stats[id(c)]
                st.chars, st.link, st.ends = st.chars + cs.chars, st.link + cs.link, st.ends + cs.ends
                st.doc_link = st.doc_link or cs.doc_link
                t = cs.text
            else:
                continue
            if parts is not None and t is not None and size + len(t) <= _CHROME_MAX:
                parts.append(t)
                size += len(t)
            else:
                parts = None
        st.text = None if parts is None else "".join(parts)
        if el.name == "a":
            st.link, st.ends = st.chars, 0
        stats[id(el)] = st
    return stats


def _title_keys(titles) -> set[str]:
    """Chrome keys of the page's titles long enough (>= 8 chars) not to be a signature line."""
    return {k for k in (_chrome_key(t or "") for t in titles) if len(k) >= 8}


def _chrome_element(el, st: _Stats, phrases: ChromePhrases, titles: set[str], in_main: bool) -> bool:
    """True if ``el`` is chrome: its text is known chrome or a repeated title (:func:`is_chrome`), or,
    outside the main content, it is a block of mostly link text without sentences (navigation, related
    links; a block linking a document file is an attachment list and stays)."""
    if st.chars and st.text is not None and (is_chrome(st.text, phrases) or _chrome_key(st.text) in titles):
        return True
    return (not in_main and el.name in BLOCK_TAGS and st.chars > 0 and st.link >= _LINK_DENSE * st.chars
            and not st.ends and not st.doc_link)


def drop_chrome(root, phrases: ChromePhrases, titles=(), keep=()) -> int:
    """Remove the site chrome elements under ``root`` (a BeautifulSoup tag), top down: an element is
    removed whole when :func:`_chrome_element` says so, with, for a chrome block heading (版权与免责声明),
    the siblings after it (up to :data:`_BLOCK_CAP` chars). The elements of ``keep`` (the main content
    nodes) and their ancestors are never removed whole, and inside them the link-density rule is off; a
    data table (no table inside) is removed whole or not at all. Linear in the size of the tree. Returns
    the number of elements removed."""
    stats = _element_stats(root)
    protected: set[int] = set()
    for node in keep:
        while node is not None and id(node) not in protected:
            protected.add(id(node))
            node = node.parent
    main = {id(k) for k in keep}
    layout = layout_tables(root)
    title_keys = _title_keys(titles)
    drop = []
    stack = [(root, False)]
    while stack:
        el, in_main = stack.pop()
        st = stats[id(el)]
        if el is not root and id(el) not in protected and _chrome_element(el, st, phrases, title_keys, in_main):
            drop.append(el)
            if st.text is not None and _chrome_key(st.text) in phrases.blocks:
                drop += _block_after(el, stats, protected)
            continue
        if el.name == "table" and id(el) not in layout:
            continue  # a data table is judged whole: its cells (中, 是, EN) are data
        in_main = in_main or id(el) in main
        stack.extend((c, in_main) for c in el.contents if isinstance(c, Tag) and c.name not in SKIP_TAGS)
    n = 0
    for el in drop:
        if not is_gone(el):
            el.decompose()
            n += 1
    return n


def _block_after(heading, stats: dict, protected: set) -> list:
    """The siblings after a chrome block heading (its paragraphs), if they hold at most :data:`_BLOCK_CAP`
    chars and none is protected; else none."""
    after = [s for s in heading.next_siblings if isinstance(s, Tag) and s.name not in SKIP_TAGS]
    if any(id(s) in protected for s in after) or sum(stats[id(s)].chars for s in after) > _BLOCK_CAP:
        return []
    loose = sum(len(squeeze(str(s))) for s in heading.next_siblings if isinstance(s, NavigableString))
    return after if loose + sum(stats[id(s)].chars for s in after) <= _BLOCK_CAP else []


def main_node(root):
    """The main content node (trafilatura's idea, by text mass): the deepest container element
    (div, section, article, main, td, center, form) holding at least :data:`_MAIN_SHARE` of the non-link
    text under ``root``; None if that is ``root`` itself or there is no text. Linear."""
    stats = _element_stats(root)
    total = stats[id(root)].chars - stats[id(root)].link
    if total <= 0:
        return None
    best, el = None, root
    while el is not None:
        if el is not root and el.name in _CONTAINERS:
            best = el
        el = next((c for c in el.contents if isinstance(c, Tag) and c.name not in SKIP_TAGS
                   and stats[id(c)].chars - stats[id(c)].link >= _MAIN_SHARE * total), None)
    return best


def drop_chrome_lines(lines: list[str], phrases: ChromePhrases, titles=()) -> list[str]:
    """``lines`` without chrome lines: known chrome or a repeated title (bad), and, as jusText does with
    short blocks, a short line (< 20 chars, no sentence end mark, not a table row) whose nearest longer
    neighbours on both sides are bad (the document's edges count as bad) when the text has good lines."""
    title_keys = _title_keys(titles)
    cls = []
    for ln in lines:
        if is_chrome(ln, phrases) or (CELL_SEP not in ln and _chrome_key(ln) in title_keys):
            cls.append("bad")
        elif CELL_SEP in ln or len(squeeze(ln)) >= 20 or _END_MARK.search(ln):
            cls.append("good")
        else:
            cls.append("short")
    if "good" in cls:
        left, prev = [], "bad"
        for c in cls:
            left.append(prev)
            prev = c if c != "short" else prev
        right, nxt = [], "bad"
        for c in reversed(cls):
            right.append(nxt)
            nxt = c if c != "short" else nxt
        right.reverse()
        cls = ["bad" if c == "short" and lft == "bad" and rgt == "bad" else c for c, lft, rgt in zip(cls, left, right)]
    return [ln for ln, c in zip(lines, cls) if c != "bad"]
