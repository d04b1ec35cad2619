"""The text of an HTML subtree as lines (SPEC §2): one line per block element, a data table one line per
row with its cells joined by :data:`CELL_SEP`, nothing emitted twice; with the helpers the header table,
chrome and extraction modules share (whitespace squeezing, decomposed-tag test, a tag index for simple
selectors). Every function is linear in the size of the subtree it reads."""
from __future__ import annotations

import html as html_lib
import re

from bs4 import Comment, Declaration, Doctype, NavigableString, ProcessingInstruction

from crawler.textsafe import strip_controls

# Spaces between CJK characters and CJK punctuation (inline-tag, source-wrap and OCR artefacts).
CJK_GAP = re.compile(r"(?<=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]) +(?=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef])")
# Block elements end a line; the subtrees of SKIP_TAGS are never text.
BLOCK_TAGS = frozenset(("address", "article", "aside", "blockquote", "caption", "center", "dd", "details", "div", "dl",
                        "dt", "fieldset", "figcaption", "figure", "footer", "form", "h1", "h2", "h3", "h4", "h5", "h6",
                        "header", "hr", "li", "main", "nav", "ol", "p", "pre", "section", "summary", "table", "tbody",
                        "td", "tfoot", "th", "thead", "tr", "ul"))
SKIP_TAGS = frozenset(("script", "style", "noscript", "template", "head", "title", "select", "button", "textarea",
                       "iframe", "object", "svg", "math"))
NOT_TEXT = (Comment, Declaration, Doctype, ProcessingInstruction)
CELL_SEP = "\t"               # between the cells of a table row on its line
_LAYOUT_CELL = 2000           # a table with a cell longer than this (chars) is page layout, not data
_DEDUP_MIN = 20               # a non-table line of at least this many non-space chars is emitted once
_TAG_TEXT = re.compile(r"</?[A-Za-z][A-Za-z0-9:_-]*(?:\s[^<>]*)?/?>|<![^<>]*>")


def is_gone(el) -> bool:
    """True if ``el`` was decomposed. bs4's ``Tag.decomposed`` searches the whole subtree for a
    ``<_decomposed>`` child (``Tag.__getattr__``) when the flag is unset: O(subtree) per call."""
    return vars(el).get("_decomposed", False)


def text_line(text: str) -> str:
    """One output line: whitespace runs (source newlines, NBSP, U+3000 included) collapsed, spaces
    between CJK characters (inline-tag and source-wrap artefacts) removed."""
    return CJK_GAP.sub("", " ".join(text.split()))


def inline_text(el, limit: int | None = None) -> str | None:
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
            if not isinstance(item, NOT_TEXT):
                parts.append(str(item))
            continue
        if item.name in SKIP_TAGS:
            continue
        if item.name in BLOCK_TAGS or item.name == "br":
            parts.append(" ")
        stack.extend(reversed(item.contents))
    return " ".join("".join(parts).split())


def layout_tables(root) -> set[int]:
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


class Renderer:
    """Block-structured text of a subtree: one line per block element or ``<br>``; a data table (no
    table inside it, no cell over :data:`_LAYOUT_CELL` chars) one line per row with its non-empty
    cells in order joined by :data:`CELL_SEP` (a cell's own lines, ``<p>``/``<br>``, collapsed into
    it), a row of a single cell keeps the cell's lines; a table identical to one already rendered is
    skipped. Linear in the subtree (each node visited at most twice)."""

    def __init__(self, root):
        self.nested = layout_tables(root)
        self.tables_seen: set[str] = set()

    def table_rows(self, table) -> list[list[tuple]] | None:
        """The non-empty cells of each row of a data table as ``(cell, text)``; None if ``table``
        is layout (holds a table, or a cell over :data:`_LAYOUT_CELL` chars) or has no rows."""
        if id(table) in self.nested:
            return None
        rows = []
        for tr in table.find_all("tr"):
            cells = [(c, text_line(inline_text(c))) for c in tr.find_all(("td", "th"), recursive=False) or [tr]]
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
                lines.append(CELL_SEP.join(t for _, t in row))
            elif row:  # a row of one cell (a caption row, a one-column table) keeps the cell's lines
                lines.extend(self.lines(row[0][0]))
        key = "\n".join(lines)
        if key in self.tables_seen:
            return []
        self.tables_seen.add(key)
        return lines

    def lines(self, node) -> list[str]:
        """The lines of the subtree under ``node`` (see the class)."""
        out: list[str] = []
        cur: list[str] = []

        def flush():
            if cur:
                ln = text_line("".join(cur))
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
                if not isinstance(item, NOT_TEXT):
                    cur.append(str(item))
                continue
            name = item.name
            if name in SKIP_TAGS:
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
            if name in BLOCK_TAGS:
                flush()
                stack.append(end)
            stack.extend(reversed(item.contents))
        flush()
        return out


def dedup_lines(lines: list[str]) -> list[str]:
    """``lines`` without repeats: a line equal to the one before it, or a line without cells of at
    least :data:`_DEDUP_MIN` non-space chars seen before (a container or fallback emitting a block twice)."""
    out: list[str] = []
    seen: set[str] = set()
    for ln in lines:
        if out and out[-1] == ln:
            continue
        if CELL_SEP not in ln and len(ln) - ln.count(" ") >= _DEDUP_MIN:
            if ln in seen:
                continue
            seen.add(ln)
        out.append(ln)
    return out


def body_lines(node) -> list[str]:
    """The text of an HTML subtree (a BeautifulSoup tag) as lines, see :class:`Renderer`, without
    repeated lines (:func:`dedup_lines`). Linear in the size of the subtree."""
    return dedup_lines(Renderer(node).lines(node))


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


def squeeze(text: str) -> str:
    """``text`` without spaces, tabs, newlines, NBSP and U+3000 (the form labels and titles are compared in)."""
    return text.replace("\u3000", "").replace("\xa0", "").replace(" ", "").replace("\t", "").replace("\n", "")


class TagIndex:
    """Every tag of a soup by name, id and class, built in one pass, to match the simple selectors
    of :data:`crawler.html_extract.BODY_SELECTORS` / ``NOISE_SELECTORS`` (``tag``, ``#id``, ``.class``, and ``A B``
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
