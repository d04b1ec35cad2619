"""Sharded Parquet tables with a ``manifest.json`` (the data contract of SPEC §1).

Layout of a table folder::

    <table>/manifest.json
    <table>/part-00000.parquet                  # unpartitioned
    <table>/split=train/part-00000.parquet      # hive-style partition column

The manifest holds the schema version, the row count, per shard its path, rows, bytes and
sha256, the config and code version that produced it, the input fingerprints and stage stats.
The whole folder is built under a temporary name and renamed into place, so a reader sees the
old table or the new one, never a half-written shard. Readers list shards from the manifest,
never by globbing.
"""
from __future__ import annotations


import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from storage.atomic import atomic_path
from storage.hashing import file_sha256, json_sha256

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"


class TableError(RuntimeError):
    """A table folder is missing, has no manifest, or a shard does not match its manifest."""


def _write_shards(table: pa.Table, folder: Path, rel: str, rows_per_shard: int) -> list[dict]:
    shards = []
    n = table.num_rows
    starts = range(0, max(n, 1), rows_per_shard) if n else [0]
    for i, start in enumerate(starts):
        part = table.slice(start, rows_per_shard)
        name = f"{rel}part-{i:05d}.parquet"
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(part, path, compression="zstd", write_statistics=True)
        shards.append({"path": name, "rows": part.num_rows, "bytes": path.stat().st_size,
                       "sha256": file_sha256(path)})
    return shards


def write_table(
    data: pd.DataFrame | pa.Table,
    out_dir: str | os.PathLike,
    *,
    name: str,
    config: Mapping[str, Any] | None = None,
    code_version: str = "",
    inputs: Mapping[str, str] | None = None,
    stats: Mapping[str, Any] | None = None,
    rows_per_shard: int = 50_000,
    partition_by: str | None = None,
    schema: pa.Schema | None = None,
    extra_files: Mapping[str, bytes] | None = None,
) -> dict:
    """Write ``data`` as zstd Parquet shards plus ``manifest.json`` into ``out_dir``, atomically.

    Args:
        data: the rows; a DataFrame is converted with ``preserve_index=False``.
        out_dir: the table folder; an existing table there is replaced as a whole.
        name: table name recorded in the manifest (e.g. ``"documents"``).
        config: the stage config (JSON-able) recorded in the manifest.
        code_version: hash of the code that produced the table.
        inputs: input table name -> fingerprint (see :func:`manifest_fingerprint`).
        stats: stage statistics (counts, report figures), JSON-able.
        rows_per_shard: rows per Parquet file (>= 1).
        partition_by: a column written as hive folders (``split=train/``) and dropped from the files.
        schema: optional explicit Arrow schema.
        extra_files: file name -> bytes written into the table folder in the same atomic swap
            (e.g. ``vocab.txt`` beside ``vocab`` shards).

    Returns:
        The manifest dict (also written to ``out_dir/manifest.json``).

    Raises:
        ValueError: ``rows_per_shard`` < 1 or ``partition_by`` is not a column.
    """
    if rows_per_shard < 1:
        raise ValueError("rows_per_shard must be >= 1")
    table = (pa.Table.from_pandas(data, preserve_index=False, schema=schema)
             if isinstance(data, pd.DataFrame) else data)
    table = table.replace_schema_metadata(None)
    out_dir = Path(out_dir)
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        shards: list[dict] = []
        if partition_by is not None:
            if partition_by not in table.column_names:
                raise ValueError(f"partition column {partition_by!r} not in table {name}")
            col = table.column(partition_by).to_pylist()
            rest = table.drop_columns([partition_by])
            for value in sorted(set(col), key=str):
                mask = pa.array([v == value for v in col])
                for s in _write_shards(rest.filter(mask), tmp, f"{partition_by}={value}/", rows_per_shard):
                    s["partition"] = {partition_by: value}
                    shards.append(s)
        else:
            shards = _write_shards(table, tmp, "", rows_per_shard)
        for fname, blob in (extra_files or {}).items():
            (tmp / fname).write_bytes(blob)
        manifest = {
            "schema_version": SCHEMA_VERSION,
            "name": name,
            "rows": table.num_rows,
            "columns": {f.name: str(f.type) for f in table.schema},
            "partition_by": partition_by,
            "shards": shards,
            "config": dict(config or {}),
            "code_version": code_version,
            "inputs": dict(inputs or {}),
            "stats": dict(stats or {}),
            "extra_files": {f: hashlib.sha256(b).hexdigest() for f, b in (extra_files or {}).items()},
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True,
                                                    default=str), encoding="utf-8")
    return manifest


def read_manifest(table_dir: str | os.PathLike) -> dict:
    """Load ``table_dir/manifest.json``.

    Raises:
        TableError: the folder or its manifest is missing.
    """
    path = Path(table_dir) / MANIFEST_NAME
    if not path.is_file():
        raise TableError(f"no table at {table_dir}: {MANIFEST_NAME} missing (run the stage that writes it)")
    return json.loads(path.read_text(encoding="utf-8"))


def manifest_fingerprint(table_dir: str | os.PathLike) -> str:
    """A table's content fingerprint: sha256 over its shards' (path, sha256) and its extra files' sha256.

    The config, code version, stats and producer recorded in the manifest do not enter it: two runs that
    write the same bytes give the same fingerprint, whatever produced them (stages below then hit the cache).

    Raises:
        TableError: no manifest.
    """
    m = read_manifest(table_dir)
    return json_sha256({"shards": [(s["path"], s["sha256"]) for s in m["shards"]],
                        "extra_files": m.get("extra_files") or {}})


def read_table(table_dir: str | os.PathLike, columns: list[str] | None = None, *,
               partition: Mapping[str, Any] | None = None, verify: bool = False) -> pd.DataFrame:
    """Read the shards a manifest lists into one DataFrame (partition columns restored).

    Args:
        table_dir: the table folder.
        columns: columns to read (partition columns are always added).
        partition: keep only shards whose partition values match, e.g. ``{"split": "train"}``.
        verify: check each shard's sha256 against the manifest first.

    Raises:
        TableError: no manifest, or (``verify``) a shard whose sha256 differs.
    """
    table_dir = Path(table_dir)
    m = read_manifest(table_dir)
    frames = []
    for s in m["shards"]:
        part = s.get("partition") or {}
        if partition and any(part.get(k) != v for k, v in partition.items()):
            continue
        path = table_dir / s["path"]
        if verify and file_sha256(path) != s["sha256"]:
            raise TableError(f"shard {path} does not match its manifest sha256")
        df = pq.read_table(path, columns=columns).to_pandas()
        for k, v in part.items():
            df[k] = v
        frames.append(df)
    if not frames:
        cols = columns or [c for c in m["columns"]]
        return pd.DataFrame(columns=cols)
    return pd.concat(frames, ignore_index=True)


