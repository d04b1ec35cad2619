"""The header table of 信息公开 pages (SPEC §2: 标题, 发文机关, 发文字号, 来源, 主题分类, 公文种类, 成文日期,
发布日期, 有效性 …): found from its label cells, read into document fields, and removed from the body text. The
有效性 value is read as ``validity`` (the policy record's evidence ``header:有效性``, :mod:`policy.record`)."""
from __future__ import annotations

from dataclasses import dataclass

from bs4 import Comment, NavigableString, Tag

from crawler.html_text import NOT_TEXT, clean_title, inline_text, is_gone, squeeze

# Header-table labels (信息公开 pages) -> Document field (None: a label, no field). Weak labels also
# name cells of body tables (a penalty table's 名称): they count only inside a header block.
HEADER_FIELDS = {"标题": "title", "名称": "title", "文件名称": "title", "发文机关": "issuer", "发布机构": "issuer",
                 "发布机关": "issuer", "发文单位": "issuer", "发文字号": "doc_number", "文号": "doc_number",
                 "来源": "source", "信息来源": "source", "主题分类": "topic", "公文种类": "doc_type",
                 "体裁分类": "doc_type", "成文日期": "written_date", "发布日期": "pubtime", "发布时间": "pubtime",
                 "索引号": "index_no", "主题词": "keywords", "有效性": "validity", "公开方式": None, "公开范围": None,
                 "组配分类": None}
_WEAK_LABELS = frozenset(("名称", "文号", "有效性", "公开方式", "公开范围"))
_LABEL_TAGS = frozenset(("td", "th", "span", "b", "strong", "label", "li", "dt", "dd", "em", "font", "i"))
_VALUE_TAGS = frozenset(("td", "th", "span", "dd", "em", "font"))
_GROUP_TAGS = frozenset(("table", "ul", "ol", "dl"))


def _short_text(el, limit: int = 64) -> str | None:
    """The text of ``el`` if its subtree has at most ``limit`` nodes, else None (bounded work)."""
    parts = []
    for i, d in enumerate(el.descendants):
        if i >= limit:
            return None
        if isinstance(d, NavigableString) and not isinstance(d, Comment):
            parts.append(str(d))
    return "".join(parts)


def _label_of(text: str | None) -> tuple[str, str] | None:
    """``(label, inline value)`` if ``text`` is a header label (``标　　题：``) or a label with its
    value (``发布日期：2023-06-20``); None otherwise."""
    if text is None:
        return None
    key = squeeze(text).rstrip("：:")
    if key in HEADER_FIELDS:
        return key, ""
    for colon in ("：", ":"):
        head, sep, tail = text.partition(colon)
        if sep and squeeze(head) in HEADER_FIELDS and tail.strip():
            return squeeze(head), " ".join(tail.split())
    return None


@dataclass
class _Hit:
    label: object          # the label element (or the element holding label and value)
    value_el: object       # the value cell beside it, None for an inline value
    key: str
    value: str
    group: object = None   # nearest table/ul/ol/dl (or grandparent): the header block it belongs to


@dataclass
class Header:
    """A page's header table: ``fields`` (Document field -> value), the label ``hits`` inside header
    blocks, and those blocks (``groups``)."""

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
            return sib, clean_title(inline_text(sib, limit=256) or "")
    return None, ""


def _label_hit(s) -> _Hit | None:
    """The header label a text node belongs to (its element or one of 3 ancestors), with the value cell
    beside it or its inline value; a label with a value wins over an empty one nearer the text."""
    el, first = s.parent, None
    for _ in range(4):
        if el is None or el.name in ("body", "html", "[document]"):
            break
        found = _label_of(_short_text(el)) if el.name in _LABEL_TAGS else None
        if found is not None:
            key, inline = found
            if inline:
                return _Hit(el, None, key, clean_title(inline))
            value_el, value = _value_beside(el)
            hit = _Hit(el, value_el, key, value)
            first = first or hit
            if value:
                return hit
        el = el.parent
    return first


def _group_of(label) -> object:
    """The header block of a label element: its nearest table/ul/ol/dl (up to 8 levels), else its
    grandparent."""
    el = label.parent
    for _ in range(8):
        if el is None or el.name in ("body", "html", "[document]"):
            break
        if el.name in _GROUP_TAGS:
            return el
        el = el.parent
    return label.parent.parent if label.parent is not None else None


def read_header(soup, max_hits: int = 200) -> Header:
    """The header table (索引号, 标题, 发文机关, 发文字号, 成文日期, 发布日期 …): label cells found from
    the text nodes, each with the value cell beside it or its inline value, grouped by their block.
    Linear in page size: at most ``max_hits`` labels, each read with bounded work (at most 4
    ancestors, subtrees of at most 64 nodes, the next 16 siblings, values of at most 256 nodes)."""
    hits: list[_Hit] = []
    for s in soup.find_all(string=True):
        if len(s) > 300 or isinstance(s, NOT_TEXT) or not any(k in squeeze(s) for k in HEADER_FIELDS):
            continue
        first = _label_hit(s)
        if first is not None and not any(h.label is first.label for h in hits[-4:]):
            hits.append(first)
            if len(hits) >= max_hits:
                break
    keys_by_group: dict[int, set] = {}
    groups: dict[int, object] = {}
    for h in hits:
        h.group = g = _group_of(h.label)
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
    return Header(fields, [h for h in hits if id(h.group) in header_ids], [groups[i] for i in header_ids])


def drop_header(header: Header, keep: list) -> None:
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
        if is_gone(g):
            continue
        text = None if id(g) in protected else inline_text(g, limit=4000)
        if text is not None and len(squeeze(text)) <= 2 * size.get(id(g), 0) + 100:
            g.decompose()
    for h in header.hits:
        for el in (h.label, h.value_el):
            if el is not None and not is_gone(el) and id(el) not in protected:
                el.decompose()
