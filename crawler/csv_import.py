"""Import a CSV export of the corpus (``title,pubtime,channel,describes,contentText``) as documents.

This is the ``import`` half of the crawl/import stage (SPEC §1): one row per document, with the
source (= ``channel``), provenance URL joined from the sources list (``policy_sources.csv``, join on
``describes``) when one is given, and the raw text. Malformed metadata never crashes the import:
an unparseable ``pubtime`` becomes null and a ``describes`` that matches no URL leaves ``url``
null; each case is counted in the returned warnings.
"""
from __future__ import annotations

import csv
import hashlib
import os
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pandas as pd

REQUIRED_COLUMNS = ("title", "pubtime", "channel", "describes", "contentText")
DOCUMENT_COLUMNS = ("doc_id", "source_id", "source", "url", "title", "pubtime", "issuer", "doc_number",
                    "content_type", "fetched_at", "raw_sha256", "citation", "text")

_DATE_RE = re.compile(r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})")


class InputError(ValueError):
    """The input corpus file is missing, malformed or empty (message is one line naming the problem)."""


@dataclass
class ImportReport:
    """Counts of what the import met: rows read, and warnings by kind (e.g. ``pubtime_unparsed``)."""

    rows: int = 0
    warnings: Counter = field(default_factory=Counter)


def parse_pubtime(value: str | None) -> date | None:
    """Parse a publication date like ``2022-12-19``, ``\\t2023-01-05`` or ``2023年1月5日``; None if absent/invalid."""
    if not value:
        return None
    m = _DATE_RE.search(value.strip())
    if not m:
        return None
    try:
        return date(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    except ValueError:
        return None


def source_id(name: str) -> str:
    """Stable id of a source from its name: ``src-`` + the first 10 hex chars of sha256(name)."""
    return "src-" + hashlib.sha256(name.strip().encode("utf-8")).hexdigest()[:10]


def load_source_urls(path: str | os.PathLike) -> dict[str, str]:
    """Map ``describes`` -> first URL from a provenance list with columns ``url,describes[,code]``.

    Rows whose ``url`` is not an http(s) URL are skipped.
    """
    urls: dict[str, str] = {}
    with open(path, encoding="utf-8-sig", newline="") as fh:
        for row in csv.DictReader(fh):
            url = (row.get("url") or "").strip()
            key = (row.get("describes") or "").strip()
            if key and url.startswith(("http://", "https://")):
                urls.setdefault(key, url)
    return urls


def _content_type(url: str | None) -> str | None:
    if not url:
        return None
    return "pdf" if ".pdf" in url.lower().split("?")[0] or url.lower().endswith(".pdf") else "html"


def read_corpus_csv(path: str | os.PathLike, sources_csv: str | os.PathLike | None = None
                    ) -> tuple[pd.DataFrame, ImportReport]:
    """Read a corpus CSV export into a ``documents`` DataFrame (columns :data:`DOCUMENT_COLUMNS`).

    Args:
        path: the CSV (UTF-8, header ``title,pubtime,channel,describes,contentText``).
        sources_csv: optional provenance list joined on ``describes`` for the ``url`` column.

    Returns:
        ``(documents, report)``; ``doc_id`` is a stable 16-hex id from the row's content (a
        repeated identical row gets a ``-2``, ``-3`` suffix).

    Raises:
        InputError: the file is missing or unreadable, lacks a required column, or holds no
            document with text.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    csv.field_size_limit(sys.maxsize)
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [c for c in REQUIRED_COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise InputError(f"{path}: CSV lacks required column(s) {', '.join(missing)} "
                                 f"(expected {','.join(REQUIRED_COLUMNS)})")
            rows = list(reader)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text ({exc.reason})") from exc
    urls = load_source_urls(sources_csv) if sources_csv and Path(sources_csv).is_file() else {}
    report = ImportReport(rows=len(rows))
    records, seen = [], Counter()
    for row in rows:
        text = row.get("contentText") or ""
        if not text.strip():
            report.warnings["empty_text"] += 1
        channel = (row.get("channel") or "").strip() or "unknown"
        describes = (row.get("describes") or "").strip()
        pub_raw = row.get("pubtime") or ""
        pub = parse_pubtime(pub_raw)
        if pub is None:
            report.warnings["pubtime_missing" if not pub_raw.strip() else "pubtime_unparsed"] += 1
        elif pub_raw != pub_raw.strip():
            report.warnings["pubtime_whitespace_stripped"] += 1
        url = urls.get(describes)
        if urls and describes and url is None:
            report.warnings["citation_without_url"] += 1
        raw = "\x1f".join(row.get(c) or "" for c in REQUIRED_COLUMNS)
        digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()
        seen[digest] += 1
        doc_id = digest[:16] + (f"-{seen[digest]}" if seen[digest] > 1 else "")
        records.append({
            "doc_id": doc_id, "source_id": source_id(channel), "source": channel, "url": url,
            "title": " ".join((row.get("title") or "").split()), "pubtime": pub, "issuer": None,
            "doc_number": None, "content_type": _content_type(url), "fetched_at": None,
            "raw_sha256": digest, "citation": describes or None, "text": text,
        })
    if not any(r["text"].strip() for r in records):
        raise InputError(f"{path}: empty corpus (no row with text in contentText)")
    df = pd.DataFrame.from_records(records, columns=list(DOCUMENT_COLUMNS))
    return df, report
