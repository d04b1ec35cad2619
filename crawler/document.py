"""What extraction produces and how it is bounded (SPEC §2): the :class:`Document` of one fetched
body, the :class:`ExtractConfig` bounds, and :class:`ExtractionError` for a body that yields no document."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date


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
