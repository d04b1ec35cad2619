"""Import documents from JSON Lines (plain or ``.gz``) or Parquet with a column mapping.

The CSV export of the policy corpus has its own fixed columns (:mod:`crawler.csv_import`); other
collections (a statute pool, a national policy library export) arrive as records with their own field
names. :class:`ColumnMapping` says which field holds the id, the text, the title and, optionally, the
source, the publication date and the URL. The record's id is kept as ``external_id`` on every document
(and from there on every chunk and search hit); ``doc_id`` is a stable 16-hex id derived from it.

Bad records never crash the import and are never merged: a JSON Lines line that is not UTF-8, does not
parse (nested too deep, an integer too long), is longer than ``max_line_bytes``, is not an object, lacks
the text field, has an empty text, a field of the wrong type (text, title, source, URL: a string; id: a
string or an integer) or a lone surrogate is a reject ``{"line", "reason"}`` (line numbers from 1; a UTF-8
byte order mark before the first line is read as the file's encoding mark, not as part of the record); a
repeated external id is a reject too (the first record wins), and an id that repeats another only as a
string vs a number (``1`` and ``"1"``) says so. A gzip inflating past ``max_inflated_bytes`` and a Parquet
column of the wrong type (binary, list, struct for a text column) are one :class:`InputError`. Control
characters are removed from every field. A URL that is not an absolute http(s) address (``javascript:``,
``data:``, relative; :func:`crawler.csv_import.http_url`) is metadata gone wrong, not a bad record: the document
is kept with ``url`` null and the case counted in the report's warnings (``url_not_http``), as the CSV import
treats a malformed ``pubtime``.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from crawler.csv_import import (DOCUMENT_COLUMNS, METADATA_COLUMNS, InputError, ImportReport, check_metadata_columns,
                                http_url, metadata_value, parse_pubtime, source_id)
from crawler.textsafe import strip_controls

RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".parquet")
MAX_LINE_BYTES = 64 * 1024 * 1024          # one JSON Lines record (bytes, decoded from gzip)
MAX_INFLATED_BYTES = 16 * 1024 ** 3        # a whole file after gzip inflation (bytes)


@dataclass(frozen=True)
class ColumnMapping:
    """Field names of a record collection. ``id_column`` None: the id is the record's line (JSON Lines)
    or row number (Parquet), 1-based, as a string. Optional columns left None are null in ``documents``;
    ``default_source`` names the source when no ``source_column`` is given. The policy metadata columns
    (``region_column`` … ``validity_column``, :data:`crawler.csv_import.METADATA_MAPPING`) fill ``region``,
    ``level``, ``issuer``, ``doc_number``, ``pubtime`` (``published_column``, when no ``pubtime_column``),
    ``effective_date`` and ``validity``; a record's value of any JSON type is kept as text (a boolean
    ``expired`` flag as ``"true"``/``"false"``), a date parsed or left null."""

    text_column: str = "text"
    title_column: str | None = "title"
    id_column: str | None = "id"
    source_column: str | None = None
    pubtime_column: str | None = None
    url_column: str | None = None
    default_source: str = "import"
    region_column: str | None = None
    level_column: str | None = None
    issuer_column: str | None = None
    doc_number_column: str | None = None
    published_column: str | None = None
    effective_column: str | None = None
    validity_column: str | None = None

    def metadata(self) -> dict[str, str]:
        """The policy metadata columns mapped (``{"region_column": "region", …}``, only those given)."""
        return {k: v for k, v in self.__dict__.items() if k.endswith("_column") and v is not None
                and k not in ("text_column", "title_column", "id_column", "source_column", "pubtime_column",
                              "url_column")}


def is_record_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a JSON Lines or Parquet file (by suffix)."""
    name = str(path).lower()
    return name.endswith(RECORD_SUFFIXES)


def _lines(fh, max_line: int, max_total: int, path: Path) -> Iterator[tuple[int, bytes | None]]:
    """``(line number, bytes)`` of a binary stream, each read in at most ``max_line + 1`` bytes (an over-long
    line gives ``None`` and is skipped to its end in bounded reads).

    Raises:
        InputError: more than ``max_total`` bytes read (a decompression bomb).
    """
    total, line_no = 0, 0
    while True:
        line = fh.readline(max_line + 1)
        if not line:
            return
        line_no += 1
        if line_no == 1 and line.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark: the file's, not the record's
            total += 3
            line = line[3:]
        total += len(line)
        too_long = len(line) > max_line
        while too_long and not line.endswith(b"\n"):
            line = fh.readline(1024 * 1024)
            total += len(line)
            if not line or total > max_total:
                break
        if total > max_total:
            raise InputError(f"{path}: more than {max_total} bytes after decompression (line {line_no}): "
                             "not imported")
        yield line_no, None if too_long else line


def _parse_line(raw: bytes) -> dict | str:
    """The JSON object of one line, or why it is rejected."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.start + 1} of the line)"
    try:
        obj = json.loads(line)
    except RecursionError:
        return "not JSON (nested too deep)"
    except ValueError as exc:
        return f"not JSON ({getattr(exc, 'msg', str(exc))[:120]})"
    if not isinstance(obj, dict):
        return f"not a JSON object ({type(obj).__name__})"
    return obj


def _jsonl_records(path: Path, report: ImportReport, rejects: list[dict], max_line: int = MAX_LINE_BYTES,
                   max_total: int = MAX_INFLATED_BYTES) -> Iterator[tuple[int, dict]]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as fh:
            for line_no, raw in _lines(fh, max_line, max_total, path):
                if raw is not None and not raw.strip():
                    continue
                report.rows += 1
                obj = f"line over {max_line} bytes" if raw is None else _parse_line(raw)
                if isinstance(obj, str):
                    rejects.append({"line": line_no, "reason": obj})
                    continue
                yield line_no, obj
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read as JSON Lines ({exc})") from exc


_PARQUET_KINDS = {"text": "string", "title": "string", "source": "string", "url": "string",
                  "id": "string or integer", "pubtime": "string, date or timestamp"}


def _check_parquet_types(path: Path, m: ColumnMapping) -> None:
    """Raises InputError naming a mapped column whose Parquet type is not what the mapping reads."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pq.read_schema(path)
    ok = {"string": lambda t: pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t)}
    ok["string or integer"] = lambda t: ok["string"](t) or pa.types.is_integer(t)
    ok["string, date or timestamp"] = lambda t: ok["string"](t) or pa.types.is_temporal(t)
    for role, kind in _PARQUET_KINDS.items():
        col = getattr(m, f"{role}_column")
        if col is None or col not in schema.names:
            continue
        t = schema.field(col).type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if not ok[kind](t):
            raise InputError(f"{path}: column {col!r} ({role}) is of type {t}, not {kind}: not imported")


def _parquet_records(path: Path, report: ImportReport, m: ColumnMapping) -> Iterator[tuple[int, dict]]:
    try:
        _check_parquet_types(path, m)
        df = pd.read_parquet(path)
    except InputError:
        raise
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc
    report.rows = len(df)
    for i, rec in enumerate(df.to_dict("records"), 1):
        yield i, rec


class _Reject(ValueError):
    """A record's field of the wrong type or not valid Unicode (the message is the reject reason)."""


def _text(value: Any, field: str = "", one_line: bool = False, ints: bool = False) -> str | None:
    """A string field without control characters (None/NaN: None). A dict, list, bytes or other non-string
    value (an integer where ``ints``) is a :class:`_Reject`, never its Python repr; so is a lone surrogate."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    if ints and isinstance(value, float) and value.is_integer():  # an integer id column with nulls, via pandas
        value = int(value)
    if ints and isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        kind = "a string or an integer" if ints else "a string"
        raise _Reject(f"field {field!r} is {type(value).__name__}, not {kind}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Reject(f"field {field!r} holds a lone surrogate (not valid Unicode)") from None
    return strip_controls(value, one_line=one_line)


def _document(line: int, rec: dict, m: ColumnMapping) -> dict | str:
    """The document of one record, or the reason it is rejected."""
    if m.text_column not in rec:
        return f"no {m.text_column!r} field"
    try:
        return _fields(line, rec, m)
    except _Reject as exc:
        return str(exc)


def _fields(line: int, rec: dict, m: ColumnMapping) -> dict | str:
    text = _text(rec.get(m.text_column), m.text_column) or ""
    if not text.strip():
        return "empty text"
    ext = _text(rec.get(m.id_column), m.id_column, ints=True) if m.id_column else str(line)
    if not ext:
        return f"no {m.id_column!r} field"
    source = (_text(rec.get(m.source_column), m.source_column, True) if m.source_column else None) \
        or m.default_source
    url = _text(rec.get(m.url_column), m.url_column, True) if m.url_column else None
    pub = rec.get(m.pubtime_column) if m.pubtime_column else None
    try:
        raw = json.dumps(rec, ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")
    except (UnicodeEncodeError, ValueError) as exc:
        return f"record not valid Unicode ({type(exc).__name__})"
    doc = {"doc_id": hashlib.sha256(ext.encode("utf-8")).hexdigest()[:16], "external_id": ext,
           "source_id": source_id(source), "source": source, "url": url,
           "title": (_text(rec.get(m.title_column), m.title_column, True) if m.title_column else None) or "",
           "pubtime": parse_pubtime(str(pub or "")) if m.pubtime_column else None,
           "issuer": None, "doc_number": None, "written_date": None, "content_type": None, "fetched_at": None,
           "raw_sha256": hashlib.sha256(raw).hexdigest(), "citation": None, "text": text,
           **{c: None for c in METADATA_COLUMNS}}
    for field_name, column in check_metadata_columns(None, None, m.metadata()).items():
        if field_name == "pubtime" and m.pubtime_column:
            continue
        doc[field_name] = metadata_value(field_name, rec.get(column))
    return doc


def _id_kind(rec: dict, m: ColumnMapping) -> str:
    value = rec.get(m.id_column) if m.id_column else None
    return "a number" if isinstance(value, int) else "a string"


def read_records(path: str | os.PathLike, mapping: ColumnMapping = ColumnMapping(), *,
                 max_line_bytes: int = MAX_LINE_BYTES, max_inflated_bytes: int = MAX_INFLATED_BYTES
                 ) -> tuple[pd.DataFrame, ImportReport, list[dict]]:
    """Read a JSON Lines (``.jsonl``, ``.jsonl.gz``, ``.ndjson``) or Parquet file into ``documents``.

    ``max_line_bytes``: a longer JSON Lines record is a reject (read in bounded memory);
    ``max_inflated_bytes``: a file yielding more bytes (after gzip) is an InputError.

    Returns:
        ``(documents, report, rejects)``: documents with :data:`~crawler.csv_import.DOCUMENT_COLUMNS` plus
        ``external_id``; the report counts records read; rejects are ``{"line", "reason"}`` dicts.

    Raises:
        InputError: the file is missing, unreadable, of an unknown kind, inflates past
            ``max_inflated_bytes``, has a mapped Parquet column of the wrong type, or yields no document.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    if not is_record_file(path):
        raise InputError(f"{path}: not a JSON Lines or Parquet file (suffixes {', '.join(RECORD_SUFFIXES)})")
    report, rejects, docs, seen = ImportReport(), [], [], {}
    records = _parquet_records(path, report, mapping) if path.name.lower().endswith(".parquet") else \
        _jsonl_records(path, report, rejects, max_line_bytes, max_inflated_bytes)
    for line, rec in records:
        doc = _document(line, rec, mapping)
        if isinstance(doc, str):
            rejects.append({"line": line, "reason": doc})
        elif doc["external_id"] in seen:
            first, kind = seen[doc["external_id"]], _id_kind(rec, mapping)
            same = kind == first[1]
            rejects.append({"line": line, "reason": f"repeated id {doc['external_id']!r}" if same else
                            f"repeated id {doc['external_id']!r} ({kind} here, {first[1]} on line {first[0]})"})
        else:
            seen[doc["external_id"]] = (line, _id_kind(rec, mapping))
            if doc["url"] is not None and http_url(doc["url"]) is None:
                report.warnings["url_not_http"] += 1
            doc["url"] = http_url(doc["url"])
            docs.append(doc)
    if not docs:
        raise InputError(f"{path}: no document with text (mapping text column {mapping.text_column!r}; "
                         f"{len(rejects)} record(s) rejected)")
    for r in rejects:
        report.warnings[r["reason"].split(" (")[0]] += 1
    return (pd.DataFrame.from_records(docs, columns=[*DOCUMENT_COLUMNS, "external_id", *METADATA_COLUMNS]), report,
            rejects)
