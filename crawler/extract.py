"""Extraction of a fetched body into a document (SPEC §2): HTML of government CMS templates (TRS,
Hanweb, the gov.cn portal) with a trafilatura fallback, and PDFs via pdfplumber with OCR
(tesseract ``chi_sim``) for pages without a text layer.

    python -m crawler.extract FILE --url URL [--content-type TYPE]     # prints the document as JSON
"""
from __future__ import annotations

import argparse
import io
import json
import re
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import date

from bs4 import BeautifulSoup

from crawler.csv_import import parse_pubtime

BODY_SELECTORS = ("#UCAP-CONTENT", ".pages_content", ".TRS_Editor", ".trs_editor_view", "#zoom", ".zoom",
                  ".article-content", ".article_con", "#Zoom", ".bt_content", "article")
NOISE_SELECTORS = ("script", "style", "noscript", "nav", "header", "footer", "iframe", "form", ".share", "#share",
                   ".bdsharebuttonbox", ".fenxiang", ".footer", "#footer", ".header", "#header", ".nav", ".breadcrumb",
                   ".pages-date .font", ".print", ".close")
HEADER_FIELDS = {"标题": "title", "发文机关": "issuer", "发文字号": "doc_number", "来源": "source",
                 "主题分类": "topic", "公文种类": "doc_type", "成文日期": "written_date", "发布日期": "pubtime"}
META_FIELDS = {"articletitle": "title", "pubdate": "pubtime", "contentsource": "source", "columnname": "column",
               "firstimgsrc": None}
_CJK = re.compile(r"[\u4e00-\u9fff]")
_CJK_GAP = re.compile(r"(?<=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef]) +(?=[\u3000-\u303f\u4e00-\u9fff\uff00-\uffef])")
_PAGE_NO = re.compile(r"^\s*(?:第\s*\d+\s*页.*|[-—–]?\s*\d{1,4}\s*[-—–]?|\d+\s*/\s*\d+)\s*$")


class ExtractionError(ValueError):
    """The body cannot be turned into a document (corrupt PDF, a non-PDF served as PDF, no text)."""


@dataclass
class Document:
    """An extracted document. ``pubtime`` may be None; ``ocr`` is True when any PDF page was OCR'd."""

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

def _text_of(node) -> str:
    for br in node.find_all("br"):
        br.replace_with("\n")
    blocks = []
    for el in node.find_all(["p", "div", "li", "h1", "h2", "h3", "h4", "tr", "td"]):
        if not el.find(["p", "div", "li", "tr"]):
            t = el.get_text(" ", strip=True)
            if t:
                blocks.append(t)
    text = "\n".join(blocks) if blocks else node.get_text("\n", strip=True)
    lines = [_CJK_GAP.sub("", ln.strip()) for ln in text.splitlines()]
    out = []
    for ln in lines:
        if ln and (not out or out[-1] != ln):
            out.append(ln)
    return "\n".join(out)


def _header_table(soup) -> dict:
    found = {}
    for td in soup.find_all(["td", "th", "span", "b", "strong", "label"]):
        key = td.get_text("", strip=True).replace("\u3000", "").rstrip("：:")
        if key in HEADER_FIELDS and HEADER_FIELDS[key] not in found:
            nxt = td.find_next_sibling(["td", "th", "span"])
            val = nxt.get_text(" ", strip=True) if nxt else ""
            if val:
                found[HEADER_FIELDS[key]] = val
    return found


def extract_html(body: bytes, url: str, content_type: str | None = None, body_selector: str | None = None) -> Document:
    """HTML -> Document: metadata from ``<meta>`` tags and the header table, body from the CMS
    templates (``body_selector`` first, then :data:`BODY_SELECTORS`), else trafilatura's main content.

    Raises:
        ExtractionError: no text could be found.
    """
    html, enc = decode_html(body, content_type)
    soup = BeautifulSoup(html, "lxml")
    meta = {}
    for tag in soup.find_all("meta"):
        name = (tag.get("name") or tag.get("property") or "").lower()
        if META_FIELDS.get(name) and tag.get("content"):
            meta.setdefault(META_FIELDS[name], tag["content"].strip())
    table = _header_table(soup)
    for sel in NOISE_SELECTORS:
        for el in soup.select(sel):
            el.decompose()
    text = ""
    for sel in ((body_selector,) if body_selector else ()) + BODY_SELECTORS:
        node = soup.select_one(sel)
        if node is not None:
            text = _text_of(node)
            if len(text) >= 20:
                break
    if len(text) < 20:
        import trafilatura

        text = trafilatura.extract(html, url=url, include_comments=False, include_tables=True,
                                   favor_recall=True) or ""
    if not text.strip():
        raise ExtractionError("no text found in HTML body")
    h1 = soup.find("h1")
    title = (table.get("title") or meta.get("title") or (h1.get_text(" ", strip=True) if h1 else "")
             or (soup.title.get_text(" ", strip=True) if soup.title else ""))
    pub = parse_pubtime(table.get("pubtime") or meta.get("pubtime") or table.get("written_date"))
    return Document(url=url, content_type="html", title=title, text=text, pubtime=pub, issuer=table.get("issuer"),
                    doc_number=table.get("doc_number"), source=table.get("source") or meta.get("source"), encoding=enc)


# ---------------------------------------------------------------- PDF

def _ocr(page, resolution: int = 200) -> str:
    import pytesseract

    img = page.to_image(resolution=resolution).original
    return _CJK_GAP.sub("", pytesseract.image_to_string(img, lang="chi_sim"))


def _drop_running_lines(pages: list[list[str]]) -> list[list[str]]:
    """Drop page numbers and header/footer lines repeated on at least half of the pages (>= 3 pages)."""
    n = len(pages)
    edge = Counter()
    for lines in pages:
        for ln in set(lines[:2] + lines[-2:]):
            edge[ln] += 1
    running = {ln for ln, c in edge.items() if n >= 3 and c >= max(2, n / 2)}
    return [[ln for ln in lines if ln not in running and not _PAGE_NO.match(ln)] for lines in pages]


def extract_pdf(body: bytes, url: str, ocr: bool = True, min_chars: int = 10) -> Document:
    """PDF -> Document: pdfplumber text per page in order, running headers/footers and page numbers
    dropped; a page with fewer than ``min_chars`` chars of text layer is OCR'd (tesseract chi_sim).

    Raises:
        ExtractionError: the body is not a PDF or cannot be parsed, or no text results.
    """
    import pdfplumber

    if not body.lstrip()[:5].startswith(b"%PDF"):
        raise ExtractionError("not a PDF: body does not start with %PDF (e.g. an HTML page served as PDF)")
    try:
        pdf = pdfplumber.open(io.BytesIO(body))
        raw_pages, ocr_pages = [], []
        with pdf:
            info = pdf.metadata or {}
            for i, page in enumerate(pdf.pages):
                t = page.extract_text() or ""
                if len(t.strip()) < min_chars and ocr:
                    t = _ocr(page)
                    ocr_pages.append(i)
                raw_pages.append([_CJK_GAP.sub("", ln.strip()) for ln in t.splitlines() if ln.strip()])
    except ExtractionError:
        raise
    except Exception as exc:  # pdfminer raises many types for broken files
        raise ExtractionError(f"corrupt PDF: {type(exc).__name__}: {exc}"[:300]) from exc
    pages = _drop_running_lines(raw_pages)
    text = "\n".join(ln for lines in pages for ln in lines)
    if not text.strip():
        raise ExtractionError("no text in PDF (text layer empty and OCR found nothing)")
    title = str(info.get("Title") or "").strip() or next((ln for lines in pages for ln in lines), "")[:100]
    created = str(info.get("CreationDate") or "")  # PDF dates look like D:20231103120000+08'00'
    pub = parse_pubtime(f"{created[2:6]}-{created[6:8]}-{created[8:10]}") if created.startswith("D:") else None
    return Document(url=url, content_type="pdf", title=title, text=text, pages=len(raw_pages), ocr=bool(ocr_pages),
                    ocr_pages=ocr_pages, pubtime=pub)


# ---------------------------------------------------------------- entry

def is_pdf(body: bytes, url: str, content_type: str | None) -> bool:
    """A PDF by header, magic bytes or URL."""
    ct = (content_type or "").lower()
    return "pdf" in ct or body.lstrip()[:5].startswith(b"%PDF") or url.lower().split("?")[0].endswith(".pdf")


def extract(body: bytes, url: str, content_type: str | None, hints: dict | None = None) -> Document:
    """The one entry point: bytes of a fetched response -> :class:`Document`.

    Args:
        content_type: the response's Content-Type header (None if unknown).
        hints: per-source registry hints (``body``: a CSS selector).

    Raises:
        ExtractionError: see :func:`extract_html` / :func:`extract_pdf`.
    """
    if is_pdf(body, url, content_type):
        return extract_pdf(body, url)
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
