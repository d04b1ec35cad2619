"""Extraction of a fetched body into a document (SPEC §2): HTML of government CMS templates (TRS,
Hanweb, the gov.cn portal) with a trafilatura fallback, and PDFs via pdfplumber with OCR
(tesseract ``chi_sim``) for pages without a text layer.

    python -m crawler.extract FILE --url URL [--content-type TYPE]     # prints the document as JSON
"""
from __future__ import annotations

import argparse
import functools
import html as html_lib
import io
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path

from bs4 import BeautifulSoup, Comment, Declaration, Doctype, NavigableString, ProcessingInstruction, Tag

from crawler.csv_import import parse_pubtime
from crawler.textsafe import strip_controls

BODY_SELECTORS = ("#UCAP-CONTENT", ".pages_content", ".TRS_Editor", ".trs_editor_view", "#zoom", ".zoom",
                  ".article-content", ".article_con", "#Zoom", ".bt_content", "article")
NOISE_SELECTORS = ("script", "style", "noscript", "nav", "header", "footer", "iframe", "form", ".share", "#share",
                   ".bdsharebuttonbox", ".fenxiang", ".footer", "#footer", ".header", "#header", ".nav", ".breadcrumb",
                   ".pages-date .font", ".print", ".close")
# Header-table labels (信息公开 pages) -> Document field (None: a label, no field). Weak labels also
# name cells of body tables (a penalty table's 名称): they count only inside a header block.
HEADER_FIELDS = {"标题": "title", "名称": "title", "文件名称": "title", "发文机关": "issuer", "发布机构": "issuer",
                 "发布机关": "issuer", "发文单位": "issuer", "发文字号": "doc_number", "文号": "doc_number",
                 "来源": "source", "信息来源": "source", "主题分类": "topic", "公文种类": "doc_type",
                 "体裁分类": "doc_type", "成文日期": "written_date", "发布日期": "pubtime", "发布时间": "pubtime",
                 "索引号": "index_no", "主题词": "keywords", "有效性": None, "公开方式": None, "公开范围": None,
                 "组配分类": None}
_WEAK_LABELS = frozenset(("名称", "文号", "有效性", "公开方式", "公开范围"))
META_FIELDS = {"articletitle": "title", "pubdate": "pubtime", "contentsource": "source", "columnname": "column",
               "firstimgsrc": None}
_CJK = re.compile(r"[\u4e00-\u9fff]")
_CJK_GAP = re.compile(r"(?<=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]) +(?=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef])")
_PAGE_NO = re.compile(r"^\s*(?:第\s*\d+\s*页.*|[-—–]?\s*\d{1,4}\s*[-—–]?|\d+\s*/\s*\d+)\s*$")


class ExtractionError(ValueError):
    """The body cannot be turned into a document (corrupt PDF, a non-PDF served as PDF, no text, a
    PDF over the page-count or page-size caps)."""


@dataclass(frozen=True)
class ExtractConfig:
    """Bounds on extraction. Times in seconds, sizes in bytes, page sizes in PDF points (1/72 in).

    timeout: wall-clock limit for one document (HTML or PDF, OCR included); memory: address space
        one extraction worker may grow by; workers: extraction processes; max_tasks: documents a
        worker extracts before it is replaced (:mod:`crawler.sandbox`).
    max_pages: a PDF with more pages is refused; max_ocr_pixels: a page whose rendering at
        ``ocr_resolution`` dpi would exceed it is rendered at a lower resolution, and refused if that
        falls below ``min_ocr_resolution``; ocr_timeout: limit for tesseract on one page.
    """

    timeout: float = 120.0
    memory: int = 2 * 1024 ** 3
    workers: int = 1
    max_tasks: int = 200
    max_pages: int = 500
    ocr_resolution: int = 200
    min_ocr_resolution: int = 100
    max_ocr_pixels: int = 40_000_000
    ocr_timeout: float = 60.0


@dataclass
class Document:
    """An extracted document. ``pubtime`` (the 发布日期, else the page's PubDate meta, else the
    成文日期) and ``written_date`` (the header table's 成文日期) may be None; ``ocr`` is True when
    any PDF page was OCR'd."""

    url: str
    content_type: str
    title: str = ""
    text: str = ""
    pubtime: date | None = None
    issuer: str | None = None
    doc_number: str | None = None
    source: str | None = None
    encoding: str | None = None
    pages: int | None = None
    ocr: bool = False
    ocr_pages: list[int] = field(default_factory=list)
    written_date: date | None = None


# ---------------------------------------------------------------- encodings

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_\-]+)""", re.I)
_ALIASES = {"gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "gb_2312-80": "gb18030", "utf8": "utf-8"}
_SINGLE_BYTE = {"iso-8859-1", "latin-1", "latin1", "windows-1252", "cp1252", "ascii", "us-ascii"}


def _norm(enc: str | None) -> str | None:
    if not enc:
        return None
    e = enc.strip().strip("\"'").lower()
    return _ALIASES.get(e, e)


def decode_html(body: bytes, content_type: str | None) -> tuple[str, str]:
    """Decode HTML bytes: the header charset, then the ``<meta>`` charset, then charset-normalizer's
    guess; the first that decodes strictly wins, except that a single-byte charset (a wrong header
    on a GBK page) loses to a detected CJK encoding. GB2312/GBK decode as GB18030 (their superset).

    Returns ``(text, encoding)``.
    """
    from charset_normalizer import from_bytes

    header = None
    if content_type and "charset=" in content_type.lower():
        header = _norm(content_type.lower().split("charset=")[-1].split(";")[0])
    m = _META_CHARSET.search(body[:4096])
    meta = _norm(m.group(1).decode("ascii", "ignore")) if m else None
    best = from_bytes(body[:200_000]).best()
    detected = _norm(best.encoding) if best else None
    candidates = [c for c in (header, meta, detected, "utf-8", "gb18030") if c]
    for enc in dict.fromkeys(candidates):
        if enc in _SINGLE_BYTE and (meta not in (None, enc) or (detected and detected not in _SINGLE_BYTE)):
            continue
        try:
            return body.decode(enc), enc
        except (UnicodeDecodeError, LookupError):
            continue
    return body.decode("utf-8", "replace"), "utf-8"


# ---------------------------------------------------------------- HTML

# Block elements end a line; the subtrees of _SKIP_TAGS are never text.
_BLOCKS = frozenset(("address", "article", "aside", "blockquote", "caption", "center", "dd", "details", "div", "dl",
                     "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
                     "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
                     "td", "tfoot", "th", "thead", "tr", "ul"))
_SKIP_TAGS = frozenset(("script", "style", "noscript", "template", "head", "title", "select", "button", "textarea",
                        "iframe", "object", "svg", "math"))
_NOT_TEXT = (Comment, Declaration, Doctype, ProcessingInstruction)
_LABEL_TAGS = frozenset(("td", "th", "span", "b", "strong", "label", "li", "dt", "dd", "em", "font", "i"))
_VALUE_TAGS = frozenset(("td", "th", "span", "dd", "em", "font"))
_GROUP_TAGS = frozenset(("table", "ul", "ol", "dl"))
_CELL_SEP = "\t"              # between the cells of a table row on its line
_FALLBACK_SEP = "\u241f"      # stands for _CELL_SEP through trafilatura, which collapses tabs
_LAYOUT_CELL = 2000           # a table with a cell longer than this (chars) is page layout, not data
_DEDUP_MIN = 20               # a non-table line of at least this many non-space chars is emitted once
_MIN_BODY = 20                # a body container with less text than this (chars) falls back to trafilatura
_TAG_TEXT = re.compile(r"</?[A-Za-z][A-Za-z0-9:_-]*(?:\s[^<>]*)?/?>|<![^<>]*>")


def _gone(el) -> bool:
    """True if ``el`` was decomposed. bs4's ``Tag.decomposed`` searches the whole subtree for a
    ``<_decomposed>`` child (``Tag.__getattr__``) when the flag is unset: O(subtree) per call."""
    return vars(el).get("_decomposed", False)


def _line(text: str) -> str:
    """One output line: whitespace runs (source newlines, NBSP, U+3000 included) collapsed, spaces
    between CJK characters (inline-tag and source-wrap artefacts) removed."""
    return _CJK_GAP.sub("", " ".join(text.split()))


def _inline_text(el, limit: int | None = None) -> str | None:
    """The text of ``el`` on one line: strings concatenated as a browser lays them out, block and
    ``<br>`` boundaries as spaces, whitespace collapsed. With ``limit``: None if the subtree holds
    more than ``limit`` nodes (bounded work). Linear in the subtree."""
    parts: list[str] = []
    stack = [el]
    n = 0
    while stack:
        item = stack.pop()
        n += 1
        if limit is not None and n > limit:
            return None
        if isinstance(item, NavigableString):
            if not isinstance(item, _NOT_TEXT):
                parts.append(str(item))
            continue
        if item.name in _SKIP_TAGS:
            continue
        if item.name in _BLOCKS or item.name == "br":
            parts.append(" ")
        stack.extend(reversed(item.contents))
    return " ".join("".join(parts).split())


def _tables_with_tables(root) -> set[int]:
    """Ids of the tables under (or above) ``root`` that hold another table (page layout). Linear:
    each ancestor chain is climbed until a node already climbed through."""
    nested: set[int] = set()
    climbed: set[int] = set()
    for t in root.find_all("table"):
        p = t.parent
        while p is not None and id(p) not in climbed:
            climbed.add(id(p))
            if p.name == "table":
                nested.add(id(p))
            p = p.parent
    return nested


class _Renderer:
    """Block-structured text of a subtree: one line per block element or ``<br>``; a data table (no
    table inside it, no cell over :data:`_LAYOUT_CELL` chars) one line per row with its non-empty
    cells in order joined by :data:`_CELL_SEP` (a cell's own lines, ``<p>``/``<br>``, collapsed into
    it), a row of a single cell keeps the cell's lines; a table identical to one already rendered is
    skipped. Linear in the subtree (each node visited at most twice)."""

    def __init__(self, root):
        self.nested = _tables_with_tables(root)
        self.tables_seen: set[str] = set()

    def table_rows(self, table) -> list[list[tuple]] | None:
        """The non-empty cells of each row of a data table as ``(cell, text)``; None if ``table``
        is layout (holds a table, or a cell over :data:`_LAYOUT_CELL` chars) or has no rows."""
        if id(table) in self.nested:
            return None
        rows = []
        for tr in table.find_all("tr"):
            cells = [(c, _line(_inline_text(c))) for c in tr.find_all(("td", "th"), recursive=False) or [tr]]
            if any(len(t) > _LAYOUT_CELL for _, t in cells):
                return None
            rows.append([(c, t) for c, t in cells if t])
        return rows if any(rows) else None

    def table(self, table) -> list[str] | None:
        """The lines of a data table (None if it is layout; [] if an identical table was rendered)."""
        rows = self.table_rows(table)
        if rows is None:
            return None
        lines: list[str] = []
        for row in rows:
            if len(row) >= 2:
                lines.append(_CELL_SEP.join(t for _, t in row))
            elif row:  # a row of one cell (a caption row, a one-column table) keeps the cell's lines
                lines.extend(self.lines(row[0][0]))
        key = "\n".join(lines)
        if key in self.tables_seen:
            return []
        self.tables_seen.add(key)
        return lines

    def lines(self, node) -> list[str]:
        out: list[str] = []
        cur: list[str] = []

        def flush():
            if cur:
                ln = _line("".join(cur))
                cur.clear()
                if ln:
                    out.append(ln)

        end = object()
        stack = [node]
        while stack:
            item = stack.pop()
            if item is end:
                flush()
                continue
            if isinstance(item, NavigableString):
                if not isinstance(item, _NOT_TEXT):
                    cur.append(str(item))
                continue
            name = item.name
            if name in _SKIP_TAGS:
                continue
            if name == "br":
                flush()
                continue
            if name == "table":
                rendered = self.table(item)
                if rendered is not None:
                    flush()
                    out.extend(rendered)
                    continue
            if name in _BLOCKS:
                flush()
                stack.append(end)
            stack.extend(reversed(item.contents))
        flush()
        return out


def _dedup(lines: list[str]) -> list[str]:
    """``lines`` without repeats: a line equal to the one before it, or a line without cells of at
    least :data:`_DEDUP_MIN` non-space chars seen before (a container or fallback emitting a block twice)."""
    out: list[str] = []
    seen: set[str] = set()
    for ln in lines:
        if out and out[-1] == ln:
            continue
        if _CELL_SEP not in ln and len(ln) - ln.count(" ") >= _DEDUP_MIN:
            if ln in seen:
                continue
            seen.add(ln)
        out.append(ln)
    return out


def body_lines(node) -> list[str]:
    """The text of an HTML subtree (a BeautifulSoup tag) as lines, see :class:`_Renderer`, without
    repeated lines (:func:`_dedup`). Linear in the size of the subtree."""
    return _dedup(_Renderer(node).lines(node))


def clean_title(value: str | None) -> str:
    """A title without markup: tags and entity-escaped tags (``<div>``, ``&lt;div&gt;``,
    ``&amp;lt;div&amp;gt;``) removed, entities decoded, control characters removed and whitespace
    collapsed to single spaces. Linear in the length of ``value``; "" for None."""
    if not value:
        return ""
    s = value
    for _ in range(3):  # markup escaped up to twice
        t = _TAG_TEXT.sub("", html_lib.unescape(s))
        if t == s:
            break
        s = t
    return strip_controls(s, one_line=True) or ""


def _short_text(el, limit: int = 64) -> str | None:
    """The text of ``el`` if its subtree has at most ``limit`` nodes, else None (bounded work)."""
    parts = []
    for i, d in enumerate(el.descendants):
        if i >= limit:
            return None
        if isinstance(d, NavigableString) and not isinstance(d, Comment):
            parts.append(str(d))
    return "".join(parts)


def _squeeze(text: str) -> str:
    return text.replace("\u3000", "").replace("\xa0", "").replace(" ", "").replace("\t", "").replace("\n", "")


def _label_of(text: str | None) -> tuple[str, str] | None:
    """``(label, inline value)`` if ``text`` is a header label (``标　　题：``) or a label with its
    value (``发布日期：2023-06-20``); None otherwise."""
    if text is None:
        return None
    key = _squeeze(text).rstrip("：:")
    if key in HEADER_FIELDS:
        return key, ""
    for colon in ("：", ":"):
        head, sep, tail = text.partition(colon)
        if sep and _squeeze(head) in HEADER_FIELDS and tail.strip():
            return _squeeze(head), " ".join(tail.split())
    return None


@dataclass
class _Hit:
    label: object          # the label element (or the element holding label and value)
    value_el: object       # the value cell beside it, None for an inline value
    key: str
    value: str
    group: object = None   # nearest table/ul/ol/dl (or grandparent): the header block it belongs to


@dataclass
class _Header:
    fields: dict
    hits: list
    groups: list           # header blocks: >= 2 distinct labels, one at least not weak


def _value_beside(el) -> tuple[object, str]:
    """The value cell after a label cell (the next 16 siblings): ``(element, text)``, text "" if the
    cell is empty or too large to be a header value."""
    for n, sib in enumerate(el.next_siblings):
        if n >= 16:
            break
        if isinstance(sib, Tag) and sib.name in _VALUE_TAGS:
            return sib, clean_title(_inline_text(sib, limit=256) or "")
    return None, ""


def _header_table(soup, max_hits: int = 200) -> _Header:
    """The header table (索引号, 标题, 发文机关, 发文字号, 成文日期, 发布日期 …): label cells found from
    the text nodes, each with the value cell beside it or its inline value, grouped by their block.
    Linear in page size: at most ``max_hits`` labels, each read with bounded work (at most 4
    ancestors, subtrees of at most 64 nodes, the next 16 siblings, values of at most 256 nodes)."""
    hits: list[_Hit] = []
    for s in soup.find_all(string=True):
        if len(s) > 300 or isinstance(s, _NOT_TEXT):
            continue
        squeezed = _squeeze(s)
        if not any(k in squeezed for k in HEADER_FIELDS):
            continue
        el, first = s.parent, None
        for _ in range(4):
            if el is None or el.name in ("body", "html", "[document]"):
                break
            found = _label_of(_short_text(el)) if el.name in _LABEL_TAGS else None
            if found is not None:
                key, inline = found
                if inline:
                    first = _Hit(el, None, key, clean_title(inline))
                    break
                value_el, value = _value_beside(el)
                hit = _Hit(el, value_el, key, value)
                first = first or hit
                if value:
                    first = hit
                    break
            el = el.parent
        if first is not None and not any(h.label is first.label for h in hits[-4:]):
            hits.append(first)
            if len(hits) >= max_hits:
                break
    keys_by_group: dict[int, set] = {}
    groups: dict[int, object] = {}
    for h in hits:
        g, el = None, h.label.parent
        for _ in range(8):
            if el is None or el.name in ("body", "html", "[document]"):
                break
            if el.name in _GROUP_TAGS:
                g = el
                break
            el = el.parent
        if g is None and h.label.parent is not None:
            g = h.label.parent.parent
        h.group = g
        if g is not None:
            groups[id(g)] = g
            keys_by_group.setdefault(id(g), set()).add(h.key)
    header_ids = {i for i, keys in keys_by_group.items() if len(keys) >= 2 and keys - _WEAK_LABELS}
    fields: dict = {}
    for in_header in (True, False):  # values of header blocks first; a lone weak label is no field
        for h in hits:
            if (id(h.group) in header_ids) != in_header or (not in_header and h.key in _WEAK_LABELS):
                continue
            name = HEADER_FIELDS[h.key]
            if name and h.value and name not in fields:
                fields[name] = h.value
    return _Header(fields, [h for h in hits if id(h.group) in header_ids], [groups[i] for i in header_ids])


def _drop_header(header: _Header, keep: list) -> None:
    """Remove the header blocks from the tree (they are metadata, not body text), except a block
    holding one of ``keep`` (the body containers) or whose text is not mostly labels and values
    (a layout table): from those only the label and value cells go. Bounded work per block."""
    protected: set[int] = set()
    for node in keep:
        while node is not None and id(node) not in protected:
            protected.add(id(node))
            node = node.parent
    size: dict[int, int] = {}
    for h in header.hits:
        size[id(h.group)] = size.get(id(h.group), 0) + len(h.key) + len(h.value) + 8
    for g in header.groups:
        if _gone(g):
            continue
        text = None if id(g) in protected else _inline_text(g, limit=4000)
        if text is not None and len(_squeeze(text)) <= 2 * size.get(id(g), 0) + 100:
            g.decompose()
    for h in header.hits:
        for el in (h.label, h.value_el):
            if el is not None and not _gone(el) and id(el) not in protected:
                el.decompose()


class _TagIndex:
    """Every tag of a soup by name, id and class, built in one pass, to match the simple selectors
    of :data:`BODY_SELECTORS` / :data:`NOISE_SELECTORS` (``tag``, ``#id``, ``.class``, and ``A B``
    descendant pairs of those) in time linear in the page; soupsieve's generic matching costs
    seconds per selector on a page of 100k nested tags."""

    def __init__(self, soup):
        self.by_name: dict[str, list] = {}
        self.by_id: dict[str, list] = {}
        self.by_class: dict[str, list] = {}
        for el in soup.find_all(True):
            self.by_name.setdefault(el.name, []).append(el)
            ident = el.get("id")
            if isinstance(ident, str) and ident:
                self.by_id.setdefault(ident, []).append(el)
            for c in el.get("class") or ():
                self.by_class.setdefault(c, []).append(el)

    def _simple(self, sel: str) -> list:
        if sel.startswith("#"):
            return self.by_id.get(sel[1:], [])
        if sel.startswith("."):
            return self.by_class.get(sel[1:], [])
        return self.by_name.get(sel.lower(), [])

    def select(self, selector: str) -> list:
        """Tags matching ``selector`` in document order (descendant pairs: inner inside any outer)."""
        parts = selector.split()
        if len(parts) == 1:
            return list(self._simple(parts[0]))
        if len(parts) != 2:
            raise ValueError(f"not a simple selector: {selector!r}")
        inside: set[int] = set()
        for outer in self._simple(parts[0]):
            if id(outer) not in inside:  # a nested outer's subtree is already marked: each tag once
                inside.update(id(d) for d in outer.descendants)
        return [el for el in self._simple(parts[1]) if id(el) in inside]


# ---------------------------------------------------------------- site chrome (boilerplate)
#
# The boilerplate signals of jusText (Pomikálek 2011: link density, short blocks between boilerplate) and
# trafilatura (Barbaresi 2021: elements outside the main content node, known boilerplate), with the
# known chrome of Chinese government pages as data (crawler/chrome_phrases.txt).

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
            stack.extend((c, False) for c in reversed(el.contents) if isinstance(c, Tag) and c.name not in _SKIP_TAGS)
            continue
        st = _Stats(doc_link=el.name == "a" and bool(_DOC_LINK.search(str(el.get("href") or ""))))
        parts: list[str] | None = []
        size = 0
        for c in el.contents:
            if isinstance(c, NavigableString):
                if isinstance(c, _NOT_TEXT):
                    continue
                t = _squeeze(str(c))
                st.chars, st.ends = st.chars + len(t), st.ends + len(_END_MARK.findall(t))
            elif isinstance(c, Tag) and c.name not in _SKIP_TAGS:
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
    return (not in_main and el.name in _BLOCKS and st.chars > 0 and st.link >= _LINK_DENSE * st.chars
            and not st.ends and not st.doc_link)


def drop_chrome(root, phrases: ChromePhrases, titles=(), keep=()) -> int:
    """Remove the site chrome elements under ``root`` (a BeautifulSoup tag), top down: an element is
    removed whole when :func:`_chrome_element` says so, with, for a chrome block heading (版权与免责声明),
    the siblings after it (up to :data:`_BLOCK_CAP` chars). The elements of ``keep`` (the main content
    nodes) and their ancestors are never removed whole, and inside them the link-density rule is off; a
    data table (no table inside) is removed whole or not at all. Linear in the size of the tree. Returns the number of elements removed."""
    stats = _element_stats(root)
    protected: set[int] = set()
    for node in keep:
        while node is not None and id(node) not in protected:
            protected.add(id(node))
            node = node.parent
    main = {id(k) for k in keep}
    layout = _tables_with_tables(root)
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
        stack.extend((c, in_main) for c in el.contents if isinstance(c, Tag) and c.name not in _SKIP_TAGS)
    n = 0
    for el in drop:
        if not _gone(el):
            el.decompose()
            n += 1
    return n


def _block_after(heading, stats: dict, protected: set) -> list:
    """The siblings after a chrome block heading (its paragraphs), if they hold at most :data:`_BLOCK_CAP`
    chars and none is protected; else none."""
    after = [s for s in heading.next_siblings if isinstance(s, Tag) and s.name not in _SKIP_TAGS]
    if any(id(s) in protected for s in after) or sum(stats[id(s)].chars for s in after) > _BLOCK_CAP:
        return []
    loose = sum(len(_squeeze(str(s))) for s in heading.next_siblings if isinstance(s, NavigableString))
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
        el = next((c for c in el.contents if isinstance(c, Tag) and c.name not in _SKIP_TAGS
                   and stats[id(c)].chars - stats[id(c)].link >= _MAIN_SHARE * total), None)
    return best


def drop_chrome_lines(lines: list[str], phrases: ChromePhrases, titles=()) -> list[str]:
    """``lines`` without chrome lines: known chrome or a repeated title (bad), and, as jusText does with
    short blocks, a short line (< 20 chars, no sentence end mark, not a table row) whose nearest longer
    neighbours on both sides are bad (the document's edges count as bad) when the text has good lines."""
    title_keys = _title_keys(titles)
    cls = []
    for ln in lines:
        if is_chrome(ln, phrases) or (_CELL_SEP not in ln and _chrome_key(ln) in title_keys):
            cls.append("bad")
        elif _CELL_SEP in ln or len(_squeeze(ln)) >= 20 or _END_MARK.search(ln):
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


def _fallback_lines(soup, url: str) -> list[str]:
    """trafilatura's main content of the (cleaned) page, its data tables first rewritten as one
    paragraph of one line per row (trafilatura splits multi-line cells out of their rows and may
    repeat a table), cells joined by :data:`_CELL_SEP`."""
    import trafilatura

    root = soup.body or soup
    renderer = _Renderer(root)
    for table in root.find_all("table"):
        if _gone(table) or id(table) in renderer.nested:
            continue
        lines = renderer.table(table)
        if lines is None:
            continue
        para = soup.new_tag("p")  # one paragraph, rows split by <br>: justext is quadratic in paragraphs
        for i, ln in enumerate(lines):
            if i:
                para.append(soup.new_tag("br"))
            para.append(NavigableString(ln.replace(_CELL_SEP, _FALLBACK_SEP)))
        table.replace_with(para)
    text = trafilatura.extract(str(soup), url=url, include_comments=False, include_tables=True,
                               favor_recall=True) or ""
    lines = []
    for t in text.splitlines():
        cells = [c for c in (_line(c) for c in t.split(_FALLBACK_SEP)) if c]
        if cells:
            lines.append(_CELL_SEP.join(cells))
    return lines


def extract_html(body: bytes, url: str, content_type: str | None = None, body_selector: str | None = None) -> Document:
    """HTML -> Document: metadata from ``<meta>`` tags and the header table (which is then removed:
    it is not body text), body from the CMS templates (``body_selector`` first, then
    :data:`BODY_SELECTORS`), else the main content node by text mass (:func:`main_node`), else
    trafilatura's main content; site chrome removed before (:func:`drop_chrome`: known chrome phrases,
    repeated titles, link-dense blocks outside the main content, chrome blocks such as a disclaimer) and
    after (:func:`drop_chrome_lines`); text one line per block, a table one line per row (cells joined by
    a tab), nothing emitted twice, a first line repeating the title dropped. Titles without markup (:func:`clean_title`). Linear in the page size.

    Raises:
        ExtractionError: no text could be found.
    """
    html, enc = decode_html(body, content_type)
    soup = BeautifulSoup(html, "lxml")
    meta = {}
    for tag in soup.find_all("meta"):
        name = (tag.get("name") or tag.get("property") or "").lower()
        if META_FIELDS.get(name) and tag.get("content"):
            meta.setdefault(META_FIELDS[name], clean_title(tag["content"]))
    header = _header_table(soup)
    table = header.fields
    page_title = clean_title(soup.title.string if soup.title and soup.title.string else
                             (soup.title.get_text(" ") if soup.title else ""))
    index = _TagIndex(soup)
    for sel in NOISE_SELECTORS:
        for el in index.select(sel):
            if not _gone(el):
                el.decompose()
    candidates = [soup.select_one(body_selector)] if body_selector else []  # a registry hint: any CSS
    candidates += [next((el for el in index.select(sel) if not _gone(el)), None) for sel in BODY_SELECTORS]
    candidates = [c for c in candidates if c is not None]
    h1 = next((el for el in index.select("h1") if not _gone(el)), None)
    h1_title = clean_title(_inline_text(h1, limit=4096) or "") if h1 is not None else ""
    _drop_header(header, candidates)
    title = table.get("title") or meta.get("title") or h1_title or page_title
    titles = (title, h1_title, meta.get("title"), table.get("title"))
    phrases = load_chrome_phrases()
    drop_chrome(soup.body or soup, phrases, titles, [c for c in candidates if not _gone(c)])
    lines: list[str] = []
    for node in candidates:
        if not _gone(node):
            lines = body_lines(node)
            if sum(map(len, lines)) >= _MIN_BODY:
                break
    if sum(map(len, lines)) < _MIN_BODY and (node := main_node(soup.body or soup)) is not None:
        lines = body_lines(node)  # no CMS container: the main content node by text mass
    if sum(map(len, lines)) < _MIN_BODY:
        lines = _dedup(lines + _fallback_lines(soup, url))
    lines = drop_chrome_lines(lines, phrases, titles)
    if lines and title and _squeeze(lines[0]) == _squeeze(title):
        lines = lines[1:]  # the title repeated as the body's first line (an <h1> in the container)
    text = "\n".join(lines)
    if not text.strip():
        raise ExtractionError("no text found in HTML body")
    pub = parse_pubtime(table.get("pubtime") or meta.get("pubtime") or table.get("written_date"))
    return Document(url=url, content_type="html", title=strip_controls(title, one_line=True),
                    text=strip_controls(text), pubtime=pub, issuer=strip_controls(table.get("issuer"), one_line=True),
                    doc_number=strip_controls(table.get("doc_number"), one_line=True),
                    source=strip_controls(table.get("source") or meta.get("source"), one_line=True), encoding=enc,
                    written_date=parse_pubtime(table.get("written_date")))


# ---------------------------------------------------------------- PDF

def ocr_resolution(width: float, height: float, cfg: ExtractConfig) -> int:
    """The resolution (dpi) to render a ``width`` x ``height`` pt page for OCR: ``cfg.ocr_resolution``,
    lowered so the image holds at most ``cfg.max_ocr_pixels`` pixels.

    Raises:
        ExtractionError: the page would need less than ``cfg.min_ocr_resolution`` dpi (or has no area).
    """
    area_in2 = (width / 72.0) * (height / 72.0)
    if not area_in2 > 0:
        raise ExtractionError(f"PDF page of {width} x {height} pt has no area")
    dpi = min(cfg.ocr_resolution, int((cfg.max_ocr_pixels / area_in2) ** 0.5))
    if dpi < cfg.min_ocr_resolution:
        raise ExtractionError(f"PDF page of {width:.0f} x {height:.0f} pt is too large to OCR: "
                              f"{cfg.min_ocr_resolution} dpi would need "
                              f"{area_in2 * cfg.min_ocr_resolution ** 2:,.0f} pixels, cap {cfg.max_ocr_pixels:,}")
    return dpi


def _ocr(page, cfg: ExtractConfig) -> str:
    import pytesseract

    img = page.to_image(resolution=ocr_resolution(float(page.width), float(page.height), cfg)).original
    try:
        text = pytesseract.image_to_string(img, lang="chi_sim", timeout=cfg.ocr_timeout)
    except RuntimeError as exc:  # pytesseract's timeout
        raise ExtractionError(f"OCR of page {page.page_number}: {exc}") from exc
    return _CJK_GAP.sub("", text)


def _drop_running_lines(pages: list[list[str]]) -> list[list[str]]:
    """Drop page numbers and header/footer lines repeated on at least half of the pages (>= 3 pages)."""
    n = len(pages)
    edge = Counter()
    for lines in pages:
        for ln in set(lines[:2] + lines[-2:]):
            edge[ln] += 1
    running = {ln for ln, c in edge.items() if n >= 3 and c >= max(2, n / 2)}
    return [[ln for ln in lines if ln not in running and not _PAGE_NO.match(ln)] for lines in pages]


def _out_of_memory(exc: BaseException) -> bool:
    """True if ``exc`` is, wraps or was caused by a MemoryError (pdfplumber wraps pdfminer's errors)."""
    seen = 0
    stack = [exc]
    while stack and seen < 20:
        e = stack.pop()
        seen += 1
        if isinstance(e, MemoryError):
            return True
        stack += [x for x in (e.__cause__, e.__context__, *e.args) if isinstance(x, BaseException)]
    return False


def extract_pdf(body: bytes, url: str, ocr: bool = True, min_chars: int = 10,
                cfg: ExtractConfig = ExtractConfig()) -> Document:
    """PDF -> Document: pdfplumber text per page in order, running headers/footers and page numbers
    dropped; a page with fewer than ``min_chars`` chars of text layer is OCR'd (tesseract chi_sim).
    Page count and OCR image size are checked against ``cfg`` before any page is read or rendered;
    memory and time are bounded only when run through :mod:`crawler.sandbox`.

    Raises:
        ExtractionError: the body is not a PDF or cannot be parsed, is over the caps, or no text results.
        MemoryError: the PDF needs more memory than the process may have (e.g. a FlateDecode bomb).
    """
    import pdfplumber

    if not body.lstrip()[:5].startswith(b"%PDF"):
        raise ExtractionError("not a PDF: body does not start with %PDF (e.g. an HTML page served as PDF)")
    try:
        pdf = pdfplumber.open(io.BytesIO(body))
        raw_pages, ocr_pages = [], []
        with pdf:
            info = pdf.metadata or {}
            n_pages = len(pdf.pages)
            if n_pages > cfg.max_pages:
                raise ExtractionError(f"PDF has {n_pages} pages, over the cap of {cfg.max_pages}")
            for i, page in enumerate(pdf.pages):
                t = page.extract_text() or ""
                if len(t.strip()) < min_chars and ocr:
                    t = _ocr(page, cfg)
                    ocr_pages.append(i)
                raw_pages.append([_CJK_GAP.sub("", ln.strip()) for ln in t.splitlines() if ln.strip()])
    except (ExtractionError, MemoryError):
        raise
    except Exception as exc:  # pdfminer raises many types for broken files
        if _out_of_memory(exc):
            raise MemoryError(f"PDF needs more memory than allowed: {exc}"[:300]) from exc
        raise ExtractionError(f"corrupt PDF: {type(exc).__name__}: {exc}"[:300]) from exc
    pages = _drop_running_lines(raw_pages)
    text = "\n".join(ln for lines in pages for ln in lines)
    if not text.strip():
        raise ExtractionError("no text in PDF (text layer empty and OCR found nothing)")
    title = str(info.get("Title") or "").strip() or next((ln for lines in pages for ln in lines), "")[:100]
    created = str(info.get("CreationDate") or "")  # PDF dates look like D:20231103120000+08'00'
    pub = parse_pubtime(f"{created[2:6]}-{created[6:8]}-{created[8:10]}") if created.startswith("D:") else None
    return Document(url=url, content_type="pdf", title=strip_controls(title, one_line=True), text=strip_controls(text),
                    pages=len(raw_pages), ocr=bool(ocr_pages),
                    ocr_pages=ocr_pages, pubtime=pub)


# ---------------------------------------------------------------- entry

def is_pdf(body: bytes, url: str, content_type: str | None) -> bool:
    """A PDF by header, magic bytes or URL."""
    ct = (content_type or "").lower()
    return "pdf" in ct or body.lstrip()[:5].startswith(b"%PDF") or url.lower().split("?")[0].endswith(".pdf")


_OFFICE_SUFFIXES = (".doc", ".docx", ".xls", ".xlsx", ".ppt", ".pptx", ".wps", ".odt", ".zip", ".rar", ".7z")
_HTML_START = re.compile(rb"<\s*(?:!doctype|html|head|body|meta|title|div|p|table)\b", re.I)


def binary_problem(body: bytes, url: str, content_type: str | None) -> str | None:
    """Why ``body`` is not an HTML page to extract (None when it may be one): NUL bytes in its first 4 KiB
    (not UTF-16), or a Word/Excel/archive body (by URL suffix or Content-Type) with no HTML tag in its
    first 4 KiB. Such files are not extracted (SPEC §2 reads HTML and PDF), never read as HTML garbage."""
    head = body[:4096]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")) or _HTML_START.search(head):
        return None
    suffix = next((x for x in _OFFICE_SUFFIXES if url.lower().split("?")[0].endswith(x)), None)
    ct = (content_type or "").lower()
    office = suffix or next((t for t in ("msword", "officedocument", "ms-excel", "zip", "octet-stream") if t in ct), None)
    if b"\x00" in head:
        return f"binary body ({office or 'NUL bytes'}), not HTML or PDF"
    if office:
        return f"{office} body without HTML, not extracted (HTML and PDF only)"
    return None


def extract(body: bytes, url: str, content_type: str | None, hints: dict | None = None,
            cfg: ExtractConfig = ExtractConfig()) -> Document:
    """The one entry point: bytes of a fetched response -> :class:`Document`, in this process (the
    crawl runs it in a bounded worker: :class:`crawler.sandbox.ExtractionPool`).

    Args:
        content_type: the response's Content-Type header (None if unknown).
        hints: per-source registry hints (``body``: a CSS selector).
        cfg: PDF caps (page count, OCR image size).

    Raises:
        ExtractionError: see :func:`extract_html` / :func:`extract_pdf`; a binary body that is neither
            (:func:`binary_problem`: a Word file, random bytes served as ``.docx``).
        MemoryError: see :func:`extract_pdf`.
    """
    if is_pdf(body, url, content_type):
        return extract_pdf(body, url, cfg=cfg)
    problem = binary_problem(body, url, content_type)
    if problem is not None:
        raise ExtractionError(problem)
    return extract_html(body, url, content_type, (hints or {}).get("body"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m crawler.extract")
    ap.add_argument("file")
    ap.add_argument("--url", required=True)
    ap.add_argument("--content-type", default=None)
    args = ap.parse_args(argv)
    try:
        with open(args.file, "rb") as fh:
            doc = extract(fh.read(), args.url, args.content_type)
    except (OSError, ExtractionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(asdict(doc), ensure_ascii=False, default=str, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
