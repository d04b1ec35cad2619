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

Streaming (SPEC §1): :func:`iter_table` yields a table shard by shard (or in record batches of a
bounded number of rows) and :class:`TableWriter` writes shards as rows arrive, holding at most
``rows_per_shard`` rows per partition, and the manifest at the end; its shards and manifest are
byte-identical to :func:`write_table` on the concatenated rows. Both names and signatures are stable.
"""
from __future__ import annotations


import contextlib
import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from storage.atomic import atomic_path
from storage.hashing import file_sha256, json_sha256

SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.json"


class TableError(RuntimeError):
    """A table folder is missing, has no manifest, or a shard does not match its manifest."""


def _write_shard(part: pa.Table, folder: Path, rel: str, index: int) -> dict:
    """Write one shard ``<rel>part-<index>.parquet`` and return its manifest entry."""
    name = f"{rel}part-{index:05d}.parquet"
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(part, path, compression="zstd", write_statistics=True)
    return {"path": name, "rows": part.num_rows, "bytes": path.stat().st_size, "sha256": file_sha256(path)}


def _write_shards(table: pa.Table, folder: Path, rel: str, rows_per_shard: int) -> list[dict]:
    n = table.num_rows
    starts = range(0, max(n, 1), rows_per_shard) if n else [0]
    return [_write_shard(table.slice(start, rows_per_shard), folder, rel, i) for i, start in enumerate(starts)]


def _manifest(name: str, rows: int, schema: pa.Schema, partition_by: str | None, shards: list[dict],
              config, code_version: str, inputs, stats, extra_files) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "rows": rows,
        "columns": {f.name: str(f.type) for f in schema},
        "partition_by": partition_by,
        "shards": shards,
        "config": dict(config or {}),
        "code_version": code_version,
        "inputs": dict(inputs or {}),
        "stats": dict(stats or {}),
        "extra_files": {f: hashlib.sha256(b).hexdigest() for f, b in (extra_files or {}).items()},
    }


def _finish_folder(tmp: Path, manifest: dict, extra_files: Mapping[str, bytes] | None) -> None:
    for fname, blob in (extra_files or {}).items():
        (tmp / fname).write_bytes(blob)
    (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, ensure_ascii=False, indent=1, sort_keys=True,
                                                default=str), encoding="utf-8")


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
    if isinstance(data, pd.DataFrame) and schema is not None:
        data = _nulls_as_none(data)
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
        manifest = _manifest(name, table.num_rows, table.schema, partition_by, shards, config, code_version,
                             inputs, stats, extra_files)
        _finish_folder(tmp, manifest, extra_files)
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
    frames = list(iter_table(table_dir, columns, partition=partition, verify=verify))
    if not frames:
        return pd.DataFrame(columns=columns or list(read_manifest(table_dir)["columns"]))
    return pd.concat(frames, ignore_index=True)




def _to_table(data: pd.DataFrame | pa.Table, schema: pa.Schema | None) -> pa.Table:
    """``data`` as an Arrow table without schema metadata, converted to ``schema`` when one is given."""
    if isinstance(data, pd.DataFrame):
        table = pa.Table.from_pandas(data, preserve_index=False, schema=schema)
    else:
        table = data.select(schema.names).cast(schema) if schema is not None and data.schema != schema else data
    return table.replace_schema_metadata(None)


class TableWriter:
    """Write a table shard by shard as rows arrive; the manifest last; the folder swapped in atomically.

    Usage::

        with TableWriter(out_dir, name="sentences", schema=SCHEMA, rows_per_shard=50_000) as w:
            for frame in frames:
                w.write(frame)
            w.stats = {...}          # config, inputs, stats, extra_files may be set until the block ends
        w.manifest                   # the manifest written

    The shards and manifest are byte-identical to :func:`write_table` on the concatenated rows with the
    same arguments: the same shard boundaries (every ``rows_per_shard`` rows, per partition value for
    ``partition_by``), the same hive folders, the same manifest. Memory: at most ``rows_per_shard`` rows per
    partition value are buffered (plus the frame being written).

    Args: as :func:`write_table` (``config``, ``inputs``, ``stats``, ``extra_files`` also settable as
        attributes before the ``with`` block ends). ``schema``: give it for byte-identity whatever the
        frames (otherwise the first frame's inferred Arrow schema is used and later frames are converted to
        it; a frame that cannot be raises ``pyarrow.ArrowInvalid``/``ArrowTypeError``).

    Raises:
        ValueError: ``rows_per_shard`` < 1, ``partition_by`` not a column, or nothing written and no schema.
        On an exception inside the block nothing is published (``out_dir`` keeps its old table).
    """

    def __init__(self, out_dir: str | os.PathLike, *, name: str, config: Mapping[str, Any] | None = None,
                 code_version: str = "", inputs: Mapping[str, str] | None = None,
                 stats: Mapping[str, Any] | None = None, rows_per_shard: int = 50_000,
                 partition_by: str | None = None, schema: pa.Schema | None = None,
                 extra_files: Mapping[str, bytes] | None = None) -> None:
        if rows_per_shard < 1:
            raise ValueError("rows_per_shard must be >= 1")
        self.out_dir, self.name, self.rows_per_shard, self.partition_by = Path(out_dir), name, rows_per_shard, partition_by
        self.config, self.code_version, self.inputs, self.stats, self.extra_files = (
            config, code_version, inputs, stats, extra_files)
        self.schema = schema.remove_metadata() if schema is not None else None
        self.manifest: dict | None = None
        self.rows = 0
        self._buffers: dict[Any, list[pa.Table]] = {}
        self._shards: dict[Any, list[dict]] = {}
        self._stack: contextlib.ExitStack | None = None
        self._tmp: Path | None = None

    def __enter__(self) -> "TableWriter":
        self._stack = contextlib.ExitStack()
        self._tmp = self._stack.enter_context(atomic_path(self.out_dir))
        self._tmp.mkdir(parents=True)
        return self

    def write(self, data: pd.DataFrame | pa.Table) -> None:
        """Append rows (a DataFrame or an Arrow table); full shards are written at once.

        Raises:
            ValueError: ``partition_by`` is not a column; RuntimeError: outside the ``with`` block.
        """
        if self._tmp is None:
            raise RuntimeError("TableWriter.write outside its with block")
        table = _to_table(data, self.schema)
        if self.schema is None:
            self.schema = table.schema
        self.rows += table.num_rows
        if self.partition_by is None:
            self._append(None, table)
            return
        if self.partition_by not in table.column_names:
            raise ValueError(f"partition column {self.partition_by!r} not in table {self.name}")
        col = table.column(self.partition_by).to_pylist()
        rest = table.drop_columns([self.partition_by])
        for value in dict.fromkeys(col):
            self._append(value, rest.filter(pa.array([v == value for v in col])))

    def _append(self, key: Any, table: pa.Table) -> None:
        buf = self._buffers.setdefault(key, [])
        if table.num_rows:
            buf.append(table)
        while sum(t.num_rows for t in buf) >= self.rows_per_shard:
            whole = pa.concat_tables(buf).combine_chunks()
            self._flush(key, whole.slice(0, self.rows_per_shard))
            rest = whole.slice(self.rows_per_shard)
            buf[:] = [rest] if rest.num_rows else []

    def _flush(self, key: Any, part: pa.Table) -> None:
        shards = self._shards.setdefault(key, [])
        rel = "" if self.partition_by is None else f"{self.partition_by}={key}/"
        entry = _write_shard(part, self._tmp, rel, len(shards))
        if self.partition_by is not None:
            entry["partition"] = {self.partition_by: key}
        shards.append(entry)

    def __exit__(self, exc_type, exc, tb) -> bool:
        stack, self._stack = self._stack, None
        try:
            if exc_type is None:
                self._close()
        except BaseException as err:  # publish nothing: the temporary folder is removed
            stack.__exit__(type(err), err, err.__traceback__)
            raise
        finally:
            self._tmp = None
        return bool(stack.__exit__(exc_type, exc, tb))

    def _close(self) -> None:
        if self.schema is None:
            raise ValueError(f"nothing written to table {self.name} and no schema given")
        for key, buf in self._buffers.items():
            if buf:
                self._flush(key, pa.concat_tables(buf).combine_chunks())
        if self.partition_by is None and not self._shards:
            self._flush(None, self.schema.empty_table())
        keys = sorted(self._shards, key=str)
        shards = [s for k in keys for s in self._shards[k]]
        self.manifest = _manifest(self.name, self.rows, self.schema, self.partition_by, shards, self.config,
                                  self.code_version, self.inputs, self.stats, self.extra_files)
        _finish_folder(self._tmp, self.manifest, self.extra_files)


def write_table_stream(frames: Iterable[pd.DataFrame | pa.Table], out_dir: str | os.PathLike, **kwargs) -> dict:
    """Write ``frames`` (DataFrames or Arrow tables, in order) as one table through :class:`TableWriter`
    (keyword arguments as :func:`write_table`); returns the manifest. Byte-identical to ``write_table`` on
    the concatenated frames; memory bounded by ``rows_per_shard`` per partition plus one frame."""
    with TableWriter(out_dir, **kwargs) as w:
        for frame in frames:
            w.write(frame)
    return w.manifest


def iter_table(table_dir: str | os.PathLike, columns: list[str] | None = None, *,
               partition: Mapping[str, Any] | None = None, verify: bool = False,
               batch_rows: int | None = None) -> Iterator[pd.DataFrame]:
    """Yield a table's rows as DataFrames, one per shard in manifest order (partition columns restored).

    The concatenation of what it yields equals :func:`read_table` with the same arguments; memory holds one
    shard (or, with ``batch_rows``, one record batch of at most ``batch_rows`` rows: a shard is then read in
    batches, so a table with big shards streams too). A table with no matching shard yields nothing.

    Args:
        table_dir: the table folder; columns: columns to read (partition columns are always added);
        partition: keep only shards whose partition values match, e.g. ``{"split": "train"}``;
        verify: check each shard's sha256 against the manifest before reading it;
        batch_rows: read each shard in record batches of at most this many rows (>= 1).

    Raises:
        TableError: no manifest, or (``verify``) a shard whose sha256 differs.
        ValueError: ``batch_rows`` < 1.
    """
    if batch_rows is not None and batch_rows < 1:
        raise ValueError("batch_rows must be >= 1")
    table_dir = Path(table_dir)
    for s in read_manifest(table_dir)["shards"]:
        part = s.get("partition") or {}
        if partition and any(part.get(k) != v for k, v in partition.items()):
            continue
        path = table_dir / s["path"]
        if verify and file_sha256(path) != s["sha256"]:
            raise TableError(f"shard {path} does not match its manifest sha256")
        with pq.ParquetFile(path) as pf:  # closed even when the caller stops early
            tables = ([pf.read(columns=columns)] if batch_rows is None else
                      (pa.Table.from_batches([b], schema=b.schema)
                       for b in pf.iter_batches(batch_size=batch_rows, columns=columns)))
            for t in tables:
                df = t.to_pandas()
                for k, v in part.items():
                    df[k] = v
                yield df


def _nulls_as_none(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every all-null column as ``None`` objects: a column no row filled (NaN, float64 after a
    ``reindex``) converts to any type of an explicit schema (Arrow cannot cast float64 to date32)."""
    empty = [c for c in df.columns if df[c].dtype != object and df[c].isna().all()]
    if not empty:
        return df
    out = df.copy()
    for c in empty:
        out[c] = pd.Series([None] * len(out), index=out.index, dtype=object)
    return out
