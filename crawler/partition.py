"""Per-source crawl partitions (SPEC §2): one crawl per source, then a merge.

Each source is crawled on its own (:func:`crawl_source`): its own crawl state
(``<crawl_root>/sources/<source_id>/state.sqlite``), the shared content-addressed archive
(``<crawl_root>/raw``), its documents and failures written as two part files. A source whose every request
failed for a network reason raises :class:`SourceUnreachable` (the orchestrator retries it alone and reports
it; the other sources go on). :func:`merge_sources` assembles the parts into the ``documents``,
``crawl_failures`` and ``crawl_diff`` tables (see :mod:`crawler.diff`).

Politeness across sources that share a host: every source's fetcher calls ``before_request(netloc)``; pass
:meth:`crawler.hostclock.HostClock.wait` so requests to one host from parallel source crawls stay spaced.
Only new and changed bodies are extracted: a page whose raw body (sha256) is the one the previous
``documents`` table holds reuses that row when the extractor version is the same.
"""
from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from crawler.archive import CrawlState, RawArchive
from crawler.crawl import CrawlConfig, crawl, documents_from_archive
from crawler.csv_import import DOCUMENT_COLUMNS
from crawler.diff import GONE_STATUS, crawl_diff, diff_counts
from crawler.registry import Source, load_registry
from crawler.sandbox import extractor_version
from storage.mapped import read_parts, write_part

LEGACY_STATE = "state.sqlite"  # the one crawl state of crawls before per-source partitions
NETWORK_REASONS = ("connection_error", "timeout", "deadline", "truncated", "http_429", "robots_unreachable")


class SourceUnreachable(RuntimeError):
    """Every request of a source failed for a network reason (connection, timeout, 5xx, 429): nothing of
    it was confirmed this refresh. Raised so the orchestrator can retry the source alone."""


def source_by_id(registry: str | os.PathLike, source_id: str) -> Source:
    """The registry entry with id ``source_id``.

    Raises:
        crawler.registry.RegistryError: the registry is invalid.
        KeyError: no source has that id.
    """
    for s in load_registry(registry):
        if s.id == source_id:
            return s
    raise KeyError(f"no source with id {source_id!r} in {registry}")


def _unreachable(counts: dict) -> bool:
    ok = counts["fetched"] + counts["not_modified"] + counts["skipped"]
    failed = counts["failed"]
    return ok == 0 and bool(failed) and all(r in NETWORK_REASONS or r.startswith("http_5") for r in failed)


def _reusable(previous: pd.DataFrame | None, source_id: str, same_extractor: bool) -> dict[str, dict]:
    if previous is None or not same_extractor or not len(previous):
        return {}
    rows = previous[previous["source_id"] == source_id]
    return {r["raw_sha256"]: r for r in rows.to_dict("records") if r.get("raw_sha256")}


def crawl_source(source: Source, crawl_root: str | os.PathLike, cfg: CrawlConfig = CrawlConfig(),
                 previous: pd.DataFrame | None = None, previous_extractor: str | None = None,
                 on_progress=None, before_request=None) -> dict:
    """Crawl one source and extract its pages; write its documents and failures as part files.

    Args:
        source: the registry entry.
        crawl_root: the crawl folder (archive ``raw/`` shared by all sources, ``sources/<id>/`` per source).
        cfg: crawl config (politeness, bounds, ``refresh`` for conditional re-checks).
        previous: the previous ``documents`` table (rows of other sources are ignored), for reuse.
        previous_extractor: the extractor version that produced ``previous`` (reuse only when it is this one).
        on_progress, before_request: see :func:`crawler.crawl.crawl`.

    Returns:
        The part record: ``source_id``, ``name``, ``counts`` (the crawl counts), ``documents``/``failures``
        (row counts), ``reused`` (documents not re-extracted), ``gone`` (URL -> 404/410 of this source's
        pages), ``docs``, ``fails`` and ``pages`` (``{"path", "sha256", "rows"}`` of the part files: documents,
        failures, and the source's crawl state records).

    Raises:
        SourceUnreachable: every request failed for a network reason.
    """
    sdir = Path(crawl_root) / "sources" / source.id
    fresh = not (sdir / "state.sqlite").exists()
    state, archive = CrawlState(sdir / "state.sqlite"), RawArchive(crawl_root)
    try:
        if fresh:  # a data dir crawled before per-source partitions: carry this source's records over
            state.import_source(Path(crawl_root) / LEGACY_STATE, source.id)
        counts = crawl([source], state, archive, cfg, on_progress, before_request)
        if _unreachable(counts):
            raise SourceUnreachable(f"source {source.id} ({source.name}): every request failed: {counts['failed']}")
        reuse = _reusable(previous, source.id, previous_extractor == extractor_version(cfg.extract))
        docs, fails = documents_from_archive([source], state, archive, cfg.extract, reuse=reuse)
        pages = state.frame()
    finally:
        state.close()
    kinds = pages["kind"] if "kind" in pages else pd.Series([None] * len(pages))
    gone = {u: int(s) for u, s, k in zip(pages["url"], pages["status"], kinds)
            if pd.notna(s) and int(s) in GONE_STATUS and k != "listing"}
    return {"source_id": source.id, "name": source.name, "counts": counts, "documents": int(len(docs)),
            "failures": int(len(fails)), "reused": int(docs.attrs.get("reused", 0)), "gone": gone,
            "docs": write_part(docs, sdir / "documents.parquet"),
            "fails": write_part(fails, sdir / "failures.parquet"),
            "pages": write_part(pages, sdir / "pages.parquet")}


def unreachable_record(source: Source, error: BaseException | str) -> dict:
    """The record of a source whose crawl failed (after its retries): no parts, the error kept."""
    return {"source_id": source.id, "name": source.name, "error": str(error)[:500], "counts": None,
            "documents": 0, "failures": 0, "reused": 0, "gone": {}, "docs": None, "fails": None, "pages": None}


def merge_sources(records: list[dict], registry_ids: list[str], previous: pd.DataFrame | None
                  ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, dict]:
    """Assemble per-source records (from :func:`crawl_source` or :func:`unreachable_record`).

    Returns:
        ``(documents, failures, diff, stats)``: documents with lifecycle columns (see :func:`crawl_diff`),
        failures (url, source_id, reason, detail; an unreachable source adds one row with reason
        ``source_unreachable``), the diff table and stats (per-source and total diff counts, unreachable
        source ids, per-source crawl counts).

    Raises:
        storage.mapped.StalePlanError: a part file is missing or changed since its source was crawled.
    """
    ok = [r for r in records if r.get("docs")]
    current = read_parts([r["docs"] for r in ok])
    if len(current):  # a page registered under two sources belongs to the first in registry order
        current = current.drop_duplicates("url").drop_duplicates("doc_id").reset_index(drop=True)
    failures = read_parts([r["fails"] for r in ok])
    cols = ["url", "source_id", "reason", "detail"]
    failures = failures if len(failures) else pd.DataFrame(columns=cols)
    down = [r for r in records if not r.get("docs")]
    if down:
        failures = pd.concat([failures, pd.DataFrame([(None, r["source_id"], "source_unreachable", r["error"])
                                                      for r in down], columns=cols)], ignore_index=True)
    gone = {u: s for r in ok for u, s in r["gone"].items()}
    if not len(current.columns):
        current = pd.DataFrame(columns=[*DOCUMENT_COLUMNS, "ocr"])
    documents, diff = crawl_diff(previous, current, gone, registry_ids)
    stats = {"diff": diff_counts(diff), "unreachable": [r["source_id"] for r in down],
             "per_source": {r["source_id"]: {"name": r["name"], "documents": r["documents"], "failures": r["failures"],
                                             "reused": r["reused"], "error": r.get("error"),
                                             "fetched": (r["counts"] or {}).get("fetched", 0)} for r in records}}
    return documents, failures.reset_index(drop=True), diff, stats
