"""Extraction of a fetched body into a document (SPEC §2): HTML of government CMS templates (TRS,
Hanweb, the gov.cn portal) with a trafilatura fallback, and PDFs via pdfplumber with OCR
(tesseract ``chi_sim``) for pages without a text layer.

    python -m crawler.extract FILE --url URL [--content-type TYPE]     # prints the document as JSON
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict

from crawler.document import Document, ExtractConfig, ExtractionError
from crawler.html_extract import extract_html
from crawler.pdf_extract import extract_pdf


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
