"""HTML -> :class:`~crawler.document.Document` (SPEC §2): metadata from ``<meta>`` tags and the header
table, body from the TRS/Hanweb CMS containers, else the main content node, else trafilatura; site chrome
removed."""
from __future__ import annotations

from bs4 import BeautifulSoup, NavigableString

from crawler.charsets import decode_html
from crawler.chrome import drop_chrome, drop_chrome_lines, load_chrome_phrases, main_node
from crawler.csv_import import parse_pubtime
from crawler.document import Document, ExtractionError
from crawler.html_header import drop_header, read_header
from crawler.html_text import (CELL_SEP, Renderer, TagIndex, body_lines, clean_title, dedup_lines, inline_text, is_gone,
                               squeeze, text_line)
from crawler.textsafe import strip_controls

BODY_SELECTORS = ("#UCAP-CONTENT", ".pages_content", ".TRS_Editor", ".trs_editor_view", "#zoom", ".zoom",
                  ".article-content", ".article_con", "#Zoom", ".bt_content", "article")
NOISE_SELECTORS = ("script", "style", "noscript", "nav", "header", "footer", "iframe", "form", ".share", "#share",
                   ".bdsharebuttonbox", ".fenxiang", ".footer", "#footer", ".header", "#header", ".nav", ".breadcrumb",
                   ".pages-date .font", ".print", ".close")
META_FIELDS = {"articletitle": "title", "pubdate": "pubtime", "contentsource": "source", "columnname": "column",
               "firstimgsrc": None}
_FALLBACK_SEP = "\u241f"      # stands for CELL_SEP through trafilatura, which collapses tabs
_MIN_BODY = 20                # a body container with less text than this (chars) falls back to trafilatura


def _fallback_lines(soup, url: str) -> list[str]:
    """trafilatura's main content of the (cleaned) page, its data tables first rewritten as one
    paragraph of one line per row (trafilatura splits multi-line cells out of their rows and may
    repeat a table), cells joined by :data:`CELL_SEP`."""
    import trafilatura

    root = soup.body or soup
    renderer = Renderer(root)
    for table in root.find_all("table"):
        if is_gone(table) or id(table) in renderer.nested:
            continue
        lines = renderer.table(table)
        if lines is None:
            continue
        para = soup.new_tag("p")  # one paragraph, rows split by <br>: justext is quadratic in paragraphs
        for i, ln in enumerate(lines):
            if i:
                para.append(soup.new_tag("br"))
            para.append(NavigableString(ln.replace(CELL_SEP, _FALLBACK_SEP)))
        table.replace_with(para)
    text = trafilatura.extract(str(soup), url=url, include_comments=False, include_tables=True,
                               favor_recall=True) or ""
    lines = []
    for t in text.splitlines():
        cells = [c for c in (text_line(c) for c in t.split(_FALLBACK_SEP)) if c]
        if cells:
            lines.append(CELL_SEP.join(cells))
    return lines


def _meta_fields(soup) -> dict:
    """The Document fields of the page's ``<meta>`` tags (:data:`META_FIELDS`), first tag per field."""
    meta = {}
    for tag in soup.find_all("meta"):
        name = (tag.get("name") or tag.get("property") or "").lower()
        if META_FIELDS.get(name) and tag.get("content"):
            meta.setdefault(META_FIELDS[name], clean_title(tag["content"]))
    return meta


def _body(soup, candidates: list, url: str) -> list[str]:
    """The body lines: those of the first CMS container still in the tree with at least
    :data:`_MIN_BODY` chars, else of the main content node by text mass, else with trafilatura's."""
    lines: list[str] = []
    for node in candidates:
        if not is_gone(node):
            lines = body_lines(node)
            if sum(map(len, lines)) >= _MIN_BODY:
                return lines
    if (node := main_node(soup.body or soup)) is not None:
        lines = body_lines(node)  # no CMS container: the main content node by text mass
    if sum(map(len, lines)) < _MIN_BODY:
        lines = dedup_lines(lines + _fallback_lines(soup, url))
    return lines


def extract_html(body: bytes, url: str, content_type: str | None = None, body_selector: str | None = None) -> Document:
    """HTML -> Document: metadata from ``<meta>`` tags and the header table (which is then removed: it is
    not body text), body from the CMS templates (``body_selector`` first, then :data:`BODY_SELECTORS`), else
    the main content node by text mass (:func:`~crawler.chrome.main_node`), else trafilatura's main content;
    site chrome removed before (:func:`~crawler.chrome.drop_chrome`: known chrome phrases, repeated titles,
    link-dense blocks outside the main content, chrome blocks such as a disclaimer) and after
    (:func:`~crawler.chrome.drop_chrome_lines`); text one line per block, a table one line per row (cells
    joined by a tab), nothing emitted twice, a first line repeating the title dropped. Titles without markup
    (:func:`~crawler.html_text.clean_title`). Linear in the page size.

    Raises:
        ExtractionError: no text could be found.
    """
    html, enc = decode_html(body, content_type)
    soup = BeautifulSoup(html, "lxml")
    meta = _meta_fields(soup)
    header = read_header(soup)
    table = header.fields
    page_title = clean_title(soup.title.string if soup.title and soup.title.string else
                             (soup.title.get_text(" ") if soup.title else ""))
    index = TagIndex(soup)
    for sel in NOISE_SELECTORS:
        for el in index.select(sel):
            if not is_gone(el):
                el.decompose()
    candidates = [soup.select_one(body_selector)] if body_selector else []  # a registry hint: any CSS
    candidates += [next((el for el in index.select(sel) if not is_gone(el)), None) for sel in BODY_SELECTORS]
    candidates = [c for c in candidates if c is not None]
    h1 = next((el for el in index.select("h1") if not is_gone(el)), None)
    h1_title = clean_title(inline_text(h1, limit=4096) or "") if h1 is not None else ""
    drop_header(header, candidates)
    title = table.get("title") or meta.get("title") or h1_title or page_title
    titles = (title, h1_title, meta.get("title"), table.get("title"))
    phrases = load_chrome_phrases()
    drop_chrome(soup.body or soup, phrases, titles, [c for c in candidates if not is_gone(c)])
    lines = _body(soup, candidates, url)
    lines = drop_chrome_lines(lines, phrases, titles)
    if lines and title and squeeze(lines[0]) == squeeze(title):
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
