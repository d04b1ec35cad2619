"""Import a CSV export of the corpus (``title,pubtime,channel,describes,contentText``) as documents.

This is the ``import`` half of the crawl/import stage (SPEC §1): one row per document, with the
source (= ``channel``), provenance URL joined from the sources list (``policy_sources.csv``, join on
``describes``) when one is given, and the raw text. Malformed metadata never crashes the import:
an unparseable ``pubtime`` becomes null and a ``describes`` that matches no URL (a sources-list URL
that is not an absolute http(s) address, :func:`http_url`, is none) leaves ``url`` null; each case is
counted in the returned warnings. Malformed structure is never imported: the CSV is parsed strictly,
and a record with the wrong number of fields, a metadata field far longer than the rest of its column
(or over :class:`ImportLimits`), or a field that holds what looks like further records (the mark of an
unbalanced quote swallowing rows) is an :class:`InputError` naming its line.
Control characters (NUL …) are removed from every field.
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

from crawler.textsafe import strip_controls

REQUIRED_COLUMNS = ("title", "pubtime", "channel", "describes", "contentText")
DOCUMENT_COLUMNS = ("doc_id", "source_id", "source", "url", "title", "pubtime", "issuer", "doc_number",
                    "written_date", "content_type", "fetched_at", "raw_sha256", "citation", "text")
# Policy metadata an import may map from its own columns (--region-column …), kept on ``documents`` for the
# policy record (policy.record): ``effective_date`` a date, the others strings.
METADATA_COLUMNS = ("region", "level", "effective_date", "validity")
# mapping field (``--region-column`` -> ``region_column``) -> the documents column it fills
METADATA_MAPPING = {"region_column": "region", "level_column": "level", "issuer_column": "issuer",
                    "doc_number_column": "doc_number", "published_column": "pubtime",
                    "effective_column": "effective_date", "validity_column": "validity"}
_DATE_FIELDS = ("pubtime", "effective_date")

_DATE_RE = re.compile(r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})")


class InputError(ValueError):
    """The input corpus file is missing, malformed or empty (message is one line naming the problem)."""


@dataclass
class ImportReport:
    """Counts of what the import met: rows read, and warnings by kind (e.g. ``pubtime_unparsed``)."""

    rows: int = 0
    warnings: Counter = field(default_factory=Counter)


@dataclass(frozen=True)
class ImportLimits:
    """Structural sanity of an import CSV (chars; lines are physical lines inside one field).

    ``max_chars`` / ``max_lines`` per metadata column; a metadata field longer than
    ``outlier_factor`` times its column's median and over ``outlier_floor`` chars is an outlier.
    """

    max_chars: tuple[tuple[str, int], ...] = (("title", 500), ("pubtime", 64), ("channel", 200),
                                              ("describes", 2000))
    max_lines: tuple[tuple[str, int], ...] = (("title", 8), ("pubtime", 1), ("channel", 1), ("describes", 4))
    outlier_factor: float = 20.0
    outlier_floor: int = 200


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


# what a browser strips from both ends of a link before reading its scheme (C0 controls and space, WHATWG URL
# Standard §4.4 "basic URL parser"), plus the other whitespace a text field may carry
_URL_EDGES = "".join(map(chr, range(0x21))) + "\x7f\x85\xa0\u2028\u2029\u3000\ufeff"
_HTTP_URL_RE = re.compile(r"https?://[^\s/?#\\@]+(?:[/?#\\][^\s]*)?", re.IGNORECASE | re.ASCII)
_URL_INNER_CONTROLS = re.compile(r"[\x00-\x20\x7f-\x9f\u2028\u2029]")


def http_url(value) -> str | None:
    """``value`` as a web address when it is an absolute http(s) URL with a host (its ends stripped of
    whitespace and control characters), else None: ``javascript:``, ``data:``, ``vbscript:``, relative or
    scheme-less addresses (in any letter case, behind any leading controls) are never a document's link.
    A control character or a space inside the address (which a browser drops or encodes, so the text would
    not be the link it opens), or user info before the host (``http://gov.cn@elsewhere``), makes it None too."""
    if not isinstance(value, str):
        return None
    url = value.strip(_URL_EDGES)
    if not _HTTP_URL_RE.fullmatch(url) or _URL_INNER_CONTROLS.search(url):
        return None
    return url


def load_source_urls(path: str | os.PathLike) -> dict[str, str]:
    """Map ``describes`` -> first URL from a provenance list with columns ``url,describes[,code]``.

    Rows whose ``url`` is not an http(s) URL (:func:`http_url`) are skipped.
    """
    urls: dict[str, str] = {}
    with open(path, encoding="utf-8-sig", newline="") as fh:
        for row in csv.DictReader(fh):
            url = http_url(row.get("url"))
            key = (row.get("describes") or "").strip()
            if key and url:
                urls.setdefault(key, url)
    return urls


def _content_type(url: str | None) -> str | None:
    if not url:
        return None
    return "pdf" if ".pdf" in url.lower().split("?")[0] or url.lower().endswith(".pdf") else "html"


def _looks_like_record(line: str, width: int) -> bool:
    """A physical line that parses as a whole CSV record of ``width`` fields with a date second."""
    try:
        fields = next(csv.reader([line], strict=True))
    except (csv.Error, StopIteration):
        return False
    return len(fields) == width and parse_pubtime(fields[1]) is not None and len(fields[1]) <= 40


def _bad_utf8_line(path: Path) -> str:
    """``"line N, byte K: "`` of the first physical line of ``path`` that is not UTF-8 ("" if none)."""
    with open(path, "rb") as fh:
        for n, line in enumerate(fh, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"line {n}, byte {exc.start + 1}: "
    return ""


def _read_records(path: Path, fh) -> tuple[list[str], list[tuple[int, int, list[str]]]]:
    """Header and ``(first line, last line, fields)`` per record, parsed strictly.

    Raises:
        InputError: a quoting error (the line named), or a record whose field count differs from the header's.
    """
    reader = csv.reader(fh, strict=True)
    try:
        header = next(reader, None) or []
        records, prev = [], reader.line_num
        for fields in reader:
            start = prev + 1
            prev = reader.line_num
            if not fields:
                continue
            if len(fields) != len(header):
                raise InputError(f"{path}: line {start}: record has {len(fields)} fields, the header {len(header)} "
                                 f"(record spans lines {start}-{prev}; check its quotes)")
            records.append((start, prev, fields))
    except csv.Error as exc:
        raise InputError(f"{path}: line {prev + 1}: malformed CSV record (parse error at line {reader.line_num}: "
                         f"{exc}); check its quotes") from exc
    return header, records


def _check_structure(path: Path, header: list[str], records: list, limits: ImportLimits) -> None:
    """Raise InputError at the first record whose fields betray a merge of several records."""
    max_chars, max_lines = dict(limits.max_chars), dict(limits.max_lines)
    cols = {c: header.index(c) for c in REQUIRED_COLUMNS}
    medians = {}
    for c in max_chars:
        lengths = sorted(len(f[cols[c]]) for _, _, f in records)
        medians[c] = lengths[len(lengths) // 2] if lengths else 0
    for start, end, fields in records:
        where = f"{path}: line {start}"
        span = f"record spans lines {start}-{end}"
        for c, cap in max_chars.items():
            value = fields[cols[c]]
            n = len(value)
            if n > cap:
                raise InputError(f"{where}: {c} is {n:,} chars, over {cap:,} ({span}; an unbalanced quote?)")
            if n > limits.outlier_floor and n > limits.outlier_factor * max(1, medians[c]):
                raise InputError(f"{where}: {c} is {n:,} chars, {n / max(1, medians[c]):.0f}x its column's median "
                                 f"({span}; an unbalanced quote?)")
            lines = value.count("\n") + 1
            if lines > max_lines[c]:
                raise InputError(f"{where}: {c} spans {lines} lines, over {max_lines[c]} ({span}; an unbalanced quote?)")
        for i, value in enumerate(fields):
            if "\n" in value and any(_looks_like_record(ln, len(header)) for ln in value.split("\n")[1:]):
                raise InputError(f"{where}: field {header[i]} holds a line that is a whole record ({span}; an "
                                 f"unbalanced quote merged records)")


def metadata_value(field: str, value) -> object:
    """A mapped metadata value as its documents column holds it: dates parsed (:func:`parse_pubtime`, None
    when unparsed), a boolean validity flag (LawRefBook's ``expired``) as ``"true"``/``"false"``, other values
    as one-line strings without control characters; blanks are None."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    if field in _DATE_FIELDS:
        return value if isinstance(value, date) else parse_pubtime(str(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    text = strip_controls(str(value), one_line=True).strip()
    return text or None


def check_metadata_columns(path, header: list[str], metadata: dict | None) -> dict[str, str]:
    """The mapped metadata columns (``{"region_column": "region", …}`` -> ``{"region": "region"}``: documents
    column -> input column).

    Raises:
        InputError: an unknown mapping field, or a mapped column the input lacks.
    """
    out = {}
    for key, column in (metadata or {}).items():
        if column is None:
            continue
        if key not in METADATA_MAPPING:
            raise InputError(f"{path}: unknown metadata mapping {key!r} (known: {', '.join(METADATA_MAPPING)})")
        if header is not None and column not in header:
            raise InputError(f"{path}: no column {column!r} for --{key[:-7].replace('_', '-')}-column")
        out[METADATA_MAPPING[key]] = column
    return out


def read_corpus_csv(path: str | os.PathLike, sources_csv: str | os.PathLike | None = None,
                    limits: ImportLimits = ImportLimits(), metadata: dict | None = None
                    ) -> tuple[pd.DataFrame, ImportReport]:
    """Read a corpus CSV export into a ``documents`` DataFrame (columns :data:`DOCUMENT_COLUMNS`).

    Args:
        path: the CSV (UTF-8, header ``title,pubtime,channel,describes,contentText``).
        sources_csv: optional provenance list joined on ``describes`` for the ``url`` column.
        limits: structural sanity checks (see :class:`ImportLimits`).
        metadata: policy metadata columns of the CSV beyond the required ones, as mapping fields
            (``{"region_column": "地区", "validity_column": "有效性"}``, :data:`METADATA_MAPPING`); their values
            fill ``region``, ``level``, ``issuer``, ``doc_number``, ``pubtime``, ``effective_date``, ``validity``.

    Returns:
        ``(documents, report)`` (columns :data:`DOCUMENT_COLUMNS` + :data:`METADATA_COLUMNS`); ``doc_id`` is a
        stable 16-hex id from the row's content (a repeated identical row gets a ``-2``, ``-3`` suffix). Control
        characters are removed from every field (the title becomes one line).

    Raises:
        InputError: the file is missing or unreadable, lacks a required or mapped column, is malformed (a
            quoting error, a record with the wrong number of fields, a field that betrays merged
            records: the message names the line), or holds no document with text.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    csv.field_size_limit(sys.maxsize)
    try:
        with open(path, encoding="utf-8-sig", newline="") as fh:
            header, records = _read_records(path, fh)
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: {_bad_utf8_line(path)}not UTF-8 text ({exc.reason})") from exc
    missing = [c for c in REQUIRED_COLUMNS if c not in header]
    if missing:
        raise InputError(f"{path}: CSV lacks required column(s) {', '.join(missing)} "
                         f"(expected {','.join(REQUIRED_COLUMNS)})")
    _check_structure(path, header, records, limits)
    meta = check_metadata_columns(path, header, metadata)
    rows = [dict(zip(header, fields)) for _, _, fields in records]
    urls = load_source_urls(sources_csv) if sources_csv and Path(sources_csv).is_file() else {}
    report = ImportReport(rows=len(rows))
    seen: Counter = Counter()
    records = [_row_document(row, urls, report, seen, meta) for row in rows]
    if not any(r["text"].strip() for r in records):
        raise InputError(f"{path}: empty corpus (no row with text in contentText)")
    df = pd.DataFrame.from_records(records, columns=[*DOCUMENT_COLUMNS, *METADATA_COLUMNS])
    return df, report


def _row_document(row: dict, urls: dict, report: ImportReport, seen: Counter, meta: dict) -> dict:
    """The document of one CSV row (warnings counted in ``report``, repeats of a row counted in ``seen``), its
    mapped metadata columns ``meta`` (documents column -> CSV column) filled in."""
    text = strip_controls(row.get("contentText") or "")
    if not text.strip():
        report.warnings["empty_text"] += 1
    channel = (strip_controls(row.get("channel") or "")).strip() or "unknown"
    describes = (strip_controls(row.get("describes") or "")).strip()
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
    doc = {
        "doc_id": doc_id, "source_id": source_id(channel), "source": channel, "url": url,
        "title": strip_controls(row.get("title") or "", one_line=True), "pubtime": pub, "issuer": None,
        "doc_number": None, "written_date": None, "content_type": _content_type(url), "fetched_at": None,
        "raw_sha256": digest, "citation": describes or None, "text": text,
        **{c: None for c in METADATA_COLUMNS},
    }
    for field_name, column in meta.items():
        value = metadata_value(field_name, row.get(column))
        if value is not None or field_name in METADATA_COLUMNS:
            doc[field_name] = value
    return doc
