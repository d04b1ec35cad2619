"""Documents in groups: the streaming side of the text stages (SPEC §1).

Every text stage reads its input in groups of whole documents (``shard_docs`` documents, in table order)
and writes its output through :class:`storage.tables.TableWriter`, so its memory is bounded by the group
and shard sizes, not by the corpus. The tables it reads keep the rows of one document contiguous
(``documents``, ``documents_clean``, ``sentences``, ``segments`` are written document by document).
Spill folders (intermediate files of a stage) are named like an atomic build beside the stage's output
(``.name.<uid>.tmp``), so what a killed run leaves is removed by :func:`storage.atomic.clean_leftovers`.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from storage.tables import iter_table

DEFAULT_SHARD_DOCS = 256
"""Documents per group of the text stages (a bound on what one group holds in memory)."""
READ_BATCH_ROWS = 20_000
"""Rows per record batch when a stage reads a table of many rows per document (sentences, segments)."""


def iter_doc_groups(table_dir: str | os.PathLike, columns: list[str] | None, docs_per_group: int, *,
                    batch_rows: int | None = None) -> Iterator[pd.DataFrame]:
    """Yield the rows of ``table_dir`` as frames of ``docs_per_group`` whole documents (the last frame may
    hold fewer), in table order; ``doc_id`` is always read.

    The frames depend only on the table's rows and ``docs_per_group``, never on its shard layout or
    ``batch_rows``. Memory: one record batch of at most ``batch_rows`` rows (default
    :data:`READ_BATCH_ROWS`) plus one group.

    Raises:
        ValueError: ``docs_per_group`` < 1; storage.TableError: no table at ``table_dir``.
    """
    if docs_per_group < 1:
        raise ValueError(f"docs_per_group must be >= 1, got {docs_per_group}")
    cols = None if columns is None else list(dict.fromkeys(["doc_id", *columns]))
    pending: pd.DataFrame | None = None
    for df in iter_table(table_dir, cols, batch_rows=batch_rows or READ_BATCH_ROWS):
        if pending is not None and len(pending):
            df = pd.concat([pending, df], ignore_index=True)
        starts = _doc_starts(df)
        k = 0
        while len(starts) - 1 - k >= docs_per_group:  # the last document may go on in the next batch
            yield df.iloc[starts[k]:starts[k + docs_per_group]].reset_index(drop=True)
            k += docs_per_group
        pending = df.iloc[starts[k]:].reset_index(drop=True) if len(starts) else df
    if pending is not None and len(pending):
        starts = _doc_starts(pending)
        for k in range(0, len(starts), docs_per_group):
            hi = starts[k + docs_per_group] if k + docs_per_group < len(starts) else len(pending)
            yield pending.iloc[starts[k]:hi].reset_index(drop=True)


def _doc_starts(df: pd.DataFrame) -> np.ndarray:
    """Row positions where a new document starts (empty for an empty frame)."""
    ids = df["doc_id"].to_numpy()
    if not len(ids):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1])


@contextlib.contextmanager
def spill_dir(beside: str | os.PathLike) -> Iterator[Path]:
    """A scratch folder ``.name.<uid>.tmp`` beside ``beside`` (a stage output), removed on exit."""
    out = Path(beside)
    tmp = out.parent / f".{out.name}.{uuid.uuid4().hex[:8]}.tmp"
    tmp.mkdir(parents=True)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class BucketSpill:
    """Rows spilled to disk by bucket, read back one bucket at a time (the shuffle of a map-reduce).

    ``add(df, buckets)`` buffers rows with their bucket numbers (0 <= b < ``n_buckets``); once more than
    ``buffer_rows`` rows are buffered every bucket's rows go to a new Parquet run file under
    ``folder/b=<bucket>/``. :meth:`read` returns one bucket's rows (its runs in write order). Memory: the
    buffer, then one bucket.
    """

    def __init__(self, folder: str | os.PathLike, n_buckets: int, buffer_rows: int = 100_000) -> None:
        if n_buckets < 1:
            raise ValueError(f"n_buckets must be >= 1, got {n_buckets}")
        self.folder, self.n_buckets, self.buffer_rows = Path(folder), n_buckets, buffer_rows
        self._buf: list[pd.DataFrame] = []
        self._rows = 0
        self._runs = 0

    def add(self, df: pd.DataFrame, buckets: np.ndarray) -> None:
        """Buffer ``df``'s rows, row i going to bucket ``buckets[i]``."""
        if len(df):
            self._buf.append(df.assign(_bucket=np.asarray(buckets, dtype=np.int64)))
            self._rows += len(df)
        if self._rows > self.buffer_rows:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows as one run file per non-empty bucket."""
        if not self._buf:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        df = pd.concat(self._buf, ignore_index=True)
        self._buf, self._rows = [], 0
        for b, part in df.groupby("_bucket", sort=True):
            path = self.folder / f"b={int(b):05d}" / f"run-{self._runs:05d}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(pa.Table.from_pandas(part.drop(columns="_bucket"), preserve_index=False), path)
        self._runs += 1

    def read(self, bucket: int, columns: list[str] | None = None) -> pd.DataFrame | None:
        """All rows of ``bucket`` (None when it has none), optionally only ``columns``; call :meth:`flush`
        first."""
        folder = self.folder / f"b={bucket:05d}"
        if not folder.is_dir():
            return None
        return pd.concat([pd.read_parquet(p, columns=columns) for p in sorted(folder.glob("run-*.parquet"))],
                         ignore_index=True)


def iter_rows(table_dir: str | os.PathLike, columns: list[str] | None, lo: int, hi: int,
              chunk_rows: int) -> Iterator[pd.DataFrame]:
    """Rows ``[lo, hi)`` of an unpartitioned table (manifest order) in frames of ``chunk_rows`` rows (the
    last may hold fewer); shards outside the range are not read. Memory: one record batch plus one chunk.

    Raises:
        ValueError: ``chunk_rows`` < 1 or a bad range; storage.TableError: no table.
    """
    from storage.tables import read_manifest

    if chunk_rows < 1 or not 0 <= lo <= hi:
        raise ValueError(f"need chunk_rows >= 1 and 0 <= lo <= hi, got {chunk_rows}, [{lo}, {hi})")
    table_dir = Path(table_dir)
    buf: list[pd.DataFrame] = []
    n_buf = 0
    start = 0
    for shard in read_manifest(table_dir)["shards"]:
        end = start + int(shard["rows"])
        if end > lo and start < hi:
            import pyarrow.parquet as pq

            pos = start
            for b in pq.ParquetFile(table_dir / shard["path"]).iter_batches(batch_size=chunk_rows, columns=columns):
                b_lo, b_hi = max(lo - pos, 0), min(hi - pos, b.num_rows)
                if b_hi > b_lo:
                    buf.append(b.slice(b_lo, b_hi - b_lo).to_pandas())
                    n_buf += b_hi - b_lo
                pos += b.num_rows
                while n_buf >= chunk_rows:
                    df = pd.concat(buf, ignore_index=True)
                    yield df.iloc[:chunk_rows].reset_index(drop=True)
                    rest = df.iloc[chunk_rows:].reset_index(drop=True)
                    buf, n_buf = ([rest] if len(rest) else []), len(rest)
                if pos >= hi:
                    break
        start = end
        if start >= hi:
            break
    if n_buf:
        yield pd.concat(buf, ignore_index=True)
