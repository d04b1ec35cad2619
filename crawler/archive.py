"""Raw response archive and crawl state (SPEC §2: raw responses archived so extraction can be re-run offline).

- :class:`RawArchive`: every body stored once, content-addressed: ``raw/ab/<sha256>`` written
  atomically; extraction can be re-run from it with no network.
- :class:`CrawlState`: one SQLite row per URL (status, final URL, body sha256, content type,
  ETag / Last-Modified, fetched_at, error), committed after every fetch, so a killed crawl resumes
  without refetching what it has; exported as a Parquet index beside the archive. It also records
  extraction failures by body sha256 (and extractor version), so a body that failed is not
  extracted again until its bytes (or the extractor) change. ``kind`` tells a ``document`` fetch
  from a ``listing`` fetch (listing pages, sitemaps, feeds, robots.txt read for discovery); state
  files written before the column existed gain it on open (their rows read None: documents, or
  the legacy ``listings`` of the registry).
"""
from __future__ import annotations

import hashlib
import os
import sqlite3
import threading
from pathlib import Path

import pandas as pd

from storage.atomic import atomic_write_bytes

COLUMNS = ("url", "source_id", "status", "final_url", "raw_sha256", "content_type", "etag", "last_modified",
           "fetched_at", "error", "detail", "attempts", "bytes", "kind")
KINDS = ("document", "listing")


class RawArchive:
    """Content-addressed store of response bodies under ``root/raw``."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root) / "raw"

    def path(self, sha: str) -> Path:
        return self.root / sha[:2] / sha

    def put(self, body: bytes) -> str:
        """Store ``body`` (once) and return its sha256."""
        sha = hashlib.sha256(body).hexdigest()
        p = self.path(sha)
        if not p.is_file():
            atomic_write_bytes(p, body)
        return sha

    def get(self, sha: str) -> bytes:
        """The body with this sha256. Raises FileNotFoundError."""
        return self.path(sha).read_bytes()


class CrawlState:
    """Per-URL crawl records in SQLite (WAL); safe to share between threads."""

    def __init__(self, path: str | os.PathLike):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._lock = threading.Lock()
        cols = ", ".join(f"{c} {'TEXT PRIMARY KEY' if c == 'url' else ''}" for c in COLUMNS)
        self._db.execute(f"CREATE TABLE IF NOT EXISTS pages ({cols})")
        have = {row[1] for row in self._db.execute("PRAGMA table_info(pages)")}
        for c in COLUMNS:
            if c not in have:  # a state file from an older version: add the column (rows read None)
                self._db.execute(f"ALTER TABLE pages ADD COLUMN {c}")
        self._db.execute("CREATE TABLE IF NOT EXISTS extraction_failures (raw_sha256 TEXT PRIMARY KEY, "
                         "extractor TEXT, reason TEXT, detail TEXT)")

    def get(self, url: str) -> dict | None:
        with self._lock:
            row = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM pages WHERE url = ?", (url,)).fetchone()
        return dict(zip(COLUMNS, row)) if row else None

    def put(self, record: dict) -> None:
        """Insert or replace the record of ``record['url']`` (committed at once); ``kind`` is one of
        :data:`KINDS` or None (read as ``document``)."""
        values = [record.get(c) for c in COLUMNS]
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO pages ({', '.join(COLUMNS)}) VALUES "
                             f"({', '.join('?' for _ in COLUMNS)})", values)

    def extraction_failure(self, raw_sha256: str, extractor: str) -> tuple[str, str] | None:
        """``(reason, detail)`` if the body ``raw_sha256`` failed extraction with this ``extractor``
        version, else None."""
        with self._lock:
            row = self._db.execute("SELECT reason, detail FROM extraction_failures WHERE raw_sha256 = ? AND "
                                   "extractor = ?", (raw_sha256, extractor)).fetchone()
        return (row[0], row[1]) if row else None

    def put_extraction_failure(self, raw_sha256: str, extractor: str, reason: str, detail: str) -> None:
        """Record that the body ``raw_sha256`` failed extraction (committed at once)."""
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO extraction_failures VALUES (?, ?, ?, ?)",
                             (raw_sha256, extractor, reason, detail))

    def import_source(self, path: str | os.PathLike, source_id: str) -> int:
        """Copy the page records of ``source_id`` from another crawl state file (read-only; e.g. the single
        ``crawl/state.sqlite`` of crawls before per-source partitions) where this state has none for a URL.
        Extraction failures are not copied (they are re-derived). Returns the rows copied; 0 when ``path``
        is missing or has no ``pages`` table."""
        import sqlite3 as _sqlite

        if not Path(path).is_file():
            return 0
        src = _sqlite.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True)
        try:
            have = {r[1] for r in src.execute("PRAGMA table_info(pages)")}
            cols = [c for c in COLUMNS if c in have]
            if "url" not in have:
                return 0
            rows = src.execute(f"SELECT {', '.join(cols)} FROM pages WHERE source_id = ?", (source_id,)).fetchall()
        finally:
            src.close()
        n = 0
        for row in rows:
            rec = dict(zip(cols, row))
            if self.get(rec["url"]) is None:
                self.put(rec)
                n += 1
        return n

    def frame(self) -> pd.DataFrame:
        """All records as a DataFrame (columns :data:`COLUMNS`)."""
        with self._lock:
            rows = self._db.execute(f"SELECT {', '.join(COLUMNS)} FROM pages ORDER BY url").fetchall()
        return pd.DataFrame(rows, columns=list(COLUMNS))

    def close(self) -> None:
        self._db.close()
