"""Import documents from JSON Lines (plain or ``.gz``) or Parquet with a column mapping.

The CSV export of the policy corpus has its own fixed columns (:mod:`crawler.csv_import`); other
collections (a statute pool, a national policy library export) arrive as records with their own field
names. :class:`ColumnMapping` says which field holds the id, the text, the title and, optionally, the
source, the publication date and the URL. The record's id is kept as ``external_id`` on every document
(and from there on every chunk and search hit); ``doc_id`` is a stable 16-hex id derived from it.

Bad records never crash the import and are never merged: a JSON Lines line that does not parse, is not
an object, lacks the text field or has an empty text is a reject ``{"line", "reason"}`` (line numbers
from 1); a repeated external id is a reject too (the first record wins). Control characters are removed
from every field.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pandas as pd

from crawler.csv_import import DOCUMENT_COLUMNS, InputError, ImportReport, parse_pubtime, source_id
from crawler.textsafe import strip_controls

RECORD_SUFFIXES = (".jsonl", ".jsonl.gz", ".ndjson", ".parquet")


@dataclass(frozen=True)
class ColumnMapping:
    """Field names of a record collection. ``id_column`` None: the id is the record's line (JSON Lines)
    or row number (Parquet), 1-based, as a string. Optional columns left None are null in ``documents``;
    ``default_source`` names the source when no ``source_column`` is given."""

    text_column: str = "text"
    title_column: str | None = "title"
    id_column: str | None = "id"
    source_column: str | None = None
    pubtime_column: str | None = None
    url_column: str | None = None
    default_source: str = "import"


def is_record_file(path: str | os.PathLike) -> bool:
    """Whether ``path`` names a JSON Lines or Parquet file (by suffix)."""
    name = str(path).lower()
    return name.endswith(RECORD_SUFFIXES)


def _jsonl_records(path: Path, report: ImportReport, rejects: list[dict]) -> Iterator[tuple[int, dict]]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as fh:
            for line_no, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                report.rows += 1
                try:
                    obj = json.loads(line)
                except ValueError as exc:
                    rejects.append({"line": line_no, "reason": f"not JSON ({exc.msg})"})
                    continue
                if not isinstance(obj, dict):
                    rejects.append({"line": line_no, "reason": f"not a JSON object ({type(obj).__name__})"})
                    continue
                yield line_no, obj
    except (OSError, UnicodeDecodeError, EOFError) as exc:
        raise InputError(f"{path}: cannot read as UTF-8 JSON Lines ({exc})") from exc


def _parquet_records(path: Path, report: ImportReport) -> Iterator[tuple[int, dict]]:
    try:
        df = pd.read_parquet(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from exc
    report.rows = len(df)
    for i, rec in enumerate(df.to_dict("records"), 1):
        yield i, rec


def _text(value: Any, one_line: bool = False) -> str | None:
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return None
    return strip_controls(str(value), one_line=one_line)


def _document(line: int, rec: dict, m: ColumnMapping) -> dict | str:
    """The document of one record, or the reason it is rejected."""
    if m.text_column not in rec:
        return f"no {m.text_column!r} field"
    text = _text(rec.get(m.text_column)) or ""
    if not text.strip():
        return "empty text"
    ext = _text(rec.get(m.id_column)) if m.id_column else str(line)
    if not ext:
        return f"no {m.id_column!r} field"
    source = (_text(rec.get(m.source_column), True) if m.source_column else None) or m.default_source
    url = _text(rec.get(m.url_column), True) if m.url_column else None
    return {"doc_id": hashlib.sha256(ext.encode("utf-8")).hexdigest()[:16], "external_id": ext,
            "source_id": source_id(source), "source": source, "url": url,
            "title": (_text(rec.get(m.title_column), True) if m.title_column else None) or "",
            "pubtime": parse_pubtime(str(rec.get(m.pubtime_column) or "")) if m.pubtime_column else None,
            "issuer": None, "doc_number": None, "written_date": None, "content_type": None, "fetched_at": None,
            "raw_sha256": hashlib.sha256(json.dumps(rec, ensure_ascii=False, sort_keys=True, default=str)
                                         .encode("utf-8")).hexdigest(),
            "citation": None, "text": text}


def read_records(path: str | os.PathLike, mapping: ColumnMapping = ColumnMapping()
                 ) -> tuple[pd.DataFrame, ImportReport, list[dict]]:
    """Read a JSON Lines (``.jsonl``, ``.jsonl.gz``, ``.ndjson``) or Parquet file into ``documents``.

    Returns:
        ``(documents, report, rejects)``: documents with :data:`~crawler.csv_import.DOCUMENT_COLUMNS` plus
        ``external_id``; the report counts records read; rejects are ``{"line", "reason"}`` dicts.

    Raises:
        InputError: the file is missing, unreadable, of an unknown kind, or yields no document.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"input file not found: {path}")
    if not is_record_file(path):
        raise InputError(f"{path}: not a JSON Lines or Parquet file (suffixes {', '.join(RECORD_SUFFIXES)})")
    report, rejects, docs, seen = ImportReport(), [], [], set()
    records = _parquet_records(path, report) if path.name.lower().endswith(".parquet") else \
        _jsonl_records(path, report, rejects)
    for line, rec in records:
        doc = _document(line, rec, mapping)
        if isinstance(doc, str):
            rejects.append({"line": line, "reason": doc})
        elif doc["external_id"] in seen:
            rejects.append({"line": line, "reason": f"repeated id {doc['external_id']!r}"})
        else:
            seen.add(doc["external_id"])
            docs.append(doc)
    if not docs:
        raise InputError(f"{path}: no document with text (mapping text column {mapping.text_column!r}; "
                         f"{len(rejects)} record(s) rejected)")
    for r in rejects:
        report.warnings[r["reason"].split(" (")[0]] += 1
    return pd.DataFrame.from_records(docs, columns=[*DOCUMENT_COLUMNS, "external_id"]), report, rejects
