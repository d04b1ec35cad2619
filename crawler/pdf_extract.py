"""PDF -> :class:`~crawler.document.Document` (SPEC §2): the pdfplumber text layer page by page, OCR
(tesseract ``chi_sim``) for pages without one, running headers/footers and page numbers dropped."""
from __future__ import annotations

import io
import re
from collections import Counter

from crawler.csv_import import parse_pubtime
from crawler.document import Document, ExtractConfig, ExtractionError
from crawler.html_text import CJK_GAP
from crawler.textsafe import strip_controls

_PAGE_NO = re.compile(r"^\s*(?:第\s*\d+\s*页.*|[-—–]?\s*\d{1,4}\s*[-—–]?|\d+\s*/\s*\d+)\s*$")


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
    return CJK_GAP.sub("", text)


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
                raw_pages.append([CJK_GAP.sub("", ln.strip()) for ln in t.splitlines() if ln.strip()])
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
