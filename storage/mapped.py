"""Mapped stages: plan -> parts -> merge (segmentation, embedding).

A plan is a small JSON-able dict computed from the stage's input (its fingerprint and the row ranges of
the parts), passed to every part as a parameter, so a part's cache key sees exactly what it will
process. Each part writes one Parquet file named by its own cache key under the stage's part folder
(:func:`parts_dir`, :func:`part_file`) and returns its :func:`part_record` (path, sha256, rows); the merge
gets the records as a parameter, reads the files in part order (verifying their sha256) and writes the
stage's table. Parts can run in any order on any task runner (threads, Dask workers): the merged bytes are
the same.

Between tasks a record's ``path`` is relative to the data dir (:func:`carried_record`), so records, and the
cache keys they enter, do not depend on where the data dir is; :func:`absolute_records` turns them back
before a library function reads them. Which stage writes part files and which takes whose records is
declared in its contract (``Stage.part_file``, ``Stage.takes_parts``: SPEC §1).
"""
from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from storage.atomic import atomic_path, atomic_write_bytes
from storage.hashing import file_sha256

PARTS_ROOT = "cache/parts"


class StalePlanError(RuntimeError):
    """A part or merge was given a plan that no longer matches its input table."""


def plan_ranges(rows: int, n_parts: int) -> list[list[int]]:
    """``n_parts`` contiguous ``[lo, hi)`` row ranges covering ``rows`` rows (sizes differ by at most one).

    Raises:
        ValueError: ``n_parts`` < 1 or ``rows`` < 0.
    """
    if n_parts < 1 or rows < 0:
        raise ValueError(f"need n_parts >= 1 and rows >= 0, got {n_parts}, {rows}")
    return [[i * rows // n_parts, (i + 1) * rows // n_parts] for i in range(n_parts)]


def parts_dir(data_dir: str | os.PathLike, stage: str) -> Path:
    """Where the mapped stage called ``stage`` writes its part files: ``data_dir/cache/parts/<stage>``."""
    return Path(data_dir) / PARTS_ROOT / stage


def part_file(parts_dir: str | os.PathLike, key: str, suffix: str = ".parquet") -> Path:
    """Where the part with cache key ``key`` is written: ``parts_dir/<key[:32]><suffix>`` (``suffix`` ""
    names a folder, e.g. a plan's staging folder)."""
    return Path(parts_dir) / f"{key[:32]}{suffix}"


def write_part(df: pd.DataFrame, path: str | os.PathLike, **meta) -> dict:
    """Write one part as zstd Parquet (atomically) and return its :func:`part_record` with ``meta`` added."""
    table = pa.Table.from_pandas(df, preserve_index=False).replace_schema_metadata(None)
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    atomic_write_bytes(path, buf.getvalue())
    return {**part_record(path), "rows": int(len(df)), **meta}


def write_part_stream(frames: Iterable[pd.DataFrame | pa.Table], path: str | os.PathLike, schema: pa.Schema,
                      **meta) -> dict:
    """Write a part from ``frames`` (one zstd row group each, converted to ``schema``) atomically, holding one
    frame at a time; returns its :func:`part_record` with ``rows`` and ``meta`` added. The bytes depend on
    the frames' sizes (a part is an internal file; the merge reads its rows)."""
    rows = 0
    schema = schema.remove_metadata()
    with atomic_path(path) as tmp:
        with pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for frame in frames:
                t = (pa.Table.from_pandas(frame, preserve_index=False, schema=schema)
                     if isinstance(frame, pd.DataFrame) else frame).replace_schema_metadata(None)
                rows += t.num_rows
                writer.write_table(t)
    return {**part_record(path), "rows": rows, **meta}


def verify_parts(records: list[dict]) -> None:
    """Check every part file of ``records`` against its sha256.

    Raises:
        StalePlanError: a part file is missing or its bytes differ from its record (re-run the parts).
    """
    for r in records:
        p = Path(r["path"])
        if not p.is_file() or file_sha256(p) != r["sha256"]:
            raise StalePlanError(f"part file {p} is missing or changed since its part ran")


def iter_parts(records: list[dict], columns: list[str] | None = None) -> Iterator[pa.Table]:
    """The rows of the part files of ``records`` in order, one Arrow table per row group (call
    :func:`verify_parts` first; memory: one row group)."""
    for r in records:
        with pq.ParquetFile(r["path"]) as pf:
            for i in range(pf.num_row_groups):
                yield pf.read_row_group(i, columns=columns)


def part_record(path: str | os.PathLike) -> dict:
    """``{"path": str, "sha256": hex}`` of a written part file."""
    return {"path": str(path), "sha256": file_sha256(path)}


def carried_record(result: Any, out: str | os.PathLike, data_dir: str | os.PathLike, **meta) -> dict:
    """The record a part task returns for its part file (or folder) ``out`` under ``data_dir``: ``result``
    (a dict, or a count: the rows written, as ``rows``), with the file's :func:`part_record` beneath it, ``path``
    relative to ``data_dir`` and ``meta`` added."""
    rec = dict(result) if isinstance(result, dict) else {"rows": result}
    base = part_record(out) if Path(out).is_file() else {}
    return {**base, **rec, "path": str(Path(out).relative_to(data_dir)), **meta}


def absolute_records(value: Any, data_dir: str | os.PathLike) -> Any:
    """Records carried between tasks (one dict, a list of them, or None) with ``path`` made absolute under
    ``data_dir``; a record without ``path`` is returned unchanged."""
    if isinstance(value, list):
        return [absolute_records(v, data_dir) for v in value]
    if isinstance(value, dict) and "path" in value:
        return {**value, "path": str(Path(data_dir) / value["path"])}
    return value


def record_list(value: Any) -> list[dict]:
    """The records in ``value`` (one dict, a list of dicts, or None) as a list."""
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def read_parts(records: list[dict]) -> pd.DataFrame:
    """Concatenate the part files of ``records`` in order, each checked against its sha256.

    Raises:
        StalePlanError: a part file is missing or its bytes differ from its record (re-run the parts).
    """
    frames = []
    for r in records:
        p = Path(r["path"])
        if not p.is_file() or file_sha256(p) != r["sha256"]:
            raise StalePlanError(f"part file {p} is missing or changed since its part ran")
        frames.append(pd.read_parquet(p))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def prune_parts(parts_dir: str | os.PathLike, keep: list[dict]) -> int:
    """Delete the part files and folders under ``parts_dir`` that ``keep`` does not name; returns how many."""
    import shutil

    keep_paths = {Path(r["path"]).resolve() for r in keep}
    n = 0
    for f in Path(parts_dir).iterdir() if Path(parts_dir).is_dir() else []:
        if f.resolve() not in keep_paths:
            shutil.rmtree(f) if f.is_dir() and not f.is_symlink() else f.unlink(missing_ok=True)
            n += 1
    return n
