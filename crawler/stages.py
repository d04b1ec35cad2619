"""Crawl stages over storage (SPEC §1, §2), for scheduled refreshes: plan -> one crawl per source -> merge.

- :func:`crawl_plan`: the registry's source ids (validates the registry).
- :func:`crawl_source_stage`: one source -> its crawl state, archived bodies and two part files
  (:func:`crawler.partition.crawl_source`); requests to a host shared with other sources are spaced by a
  :class:`~crawler.hostclock.HostClock` under ``<crawl_root>/hosts``.
- :func:`merge_crawl`: the part records -> ``documents`` (with first_seen / last_seen / last_changed),
  ``crawl_failures`` and ``crawl_diff`` (new / changed / unchanged / gone / kept / dropped per URL).
- :func:`crawl_stage`: the three in one process (sources one after another), for notebooks and benches.
"""
from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq

from crawler.crawl import CrawlConfig
from crawler.hostclock import HostClock
from crawler.partition import SourceUnreachable, crawl_source, merge_sources, source_by_id, unreachable_record
from crawler.registry import DEFAULT_REGISTRY, load_registry
from crawler.sandbox import extractor_version
from storage import atomic_path, file_sha256, manifest_fingerprint, read_manifest, write_table
from storage.mapped import read_parts
from storage.contracts import Stage, table
from storage.tables import TableError


def crawl_plan(registry: str | os.PathLike = DEFAULT_REGISTRY) -> list[str]:
    """The ids of the registry's sources, in registry order (one crawl partition each).

    Raises:
        crawler.registry.RegistryError: the registry is invalid (every problem listed).
    """
    return [s.id for s in load_registry(registry)]


def previous_documents(documents_dir, source_id: str | None = None) -> tuple[pd.DataFrame | None, str | None]:
    """The current ``documents`` table (only ``source_id``'s rows when given, read shard by shard with a
    filter) and the extractor version recorded in its manifest; ``(None, None)`` when there is none yet."""
    try:
        m = read_manifest(documents_dir)
    except TableError:
        return None, None
    filters = [("source_id", "==", source_id)] if source_id else None
    frames = [pq.read_table(Path(documents_dir) / s["path"], filters=filters).to_pandas() for s in m["shards"]]
    frames = [f for f in frames if len(f)] or frames[:1]
    return (pd.concat(frames, ignore_index=True) if frames else None), m.get("config", {}).get("extractor")


def _before(clock: HostClock, before_request):
    def wait(netloc: str) -> None:
        clock.wait(netloc)
        if before_request is not None:
            before_request(netloc)
    return wait


def crawl_source_stage(crawl_root, documents_dir, source_id: str, registry: str | os.PathLike = DEFAULT_REGISTRY,
                       cfg: CrawlConfig = CrawlConfig(), on_progress=None, before_request=None) -> dict:
    """Crawl the source ``source_id`` of ``registry`` into ``crawl_root``, reusing the extraction of bodies
    the current ``documents`` table already holds. Returns its part record (see
    :func:`crawler.partition.crawl_source`).

    Raises:
        KeyError: no such source. SourceUnreachable: every request failed for a network reason.
    """
    source = source_by_id(registry, source_id)
    previous, extractor = previous_documents(documents_dir, source_id)
    clock = HostClock(Path(crawl_root) / "hosts", cfg.fetch.delay)
    return crawl_source(source, crawl_root, cfg, previous, extractor, on_progress, _before(clock, before_request))


def merge_crawl(records: list[dict], documents_dir, failures_dir, diff_dir, registry: str | os.PathLike = DEFAULT_REGISTRY,
                cfg: CrawlConfig = CrawlConfig(), crawl_root=None) -> dict:
    """Write ``documents``, ``crawl_failures`` and ``crawl_diff`` from the per-source records (in registry
    order; an unreachable source's record from :func:`crawler.partition.unreachable_record`), and, with
    ``crawl_root``, ``<crawl_root>/raw_index.parquet``: every crawled URL's state record (status, body sha256,
    fetched_at, error). Nothing partial reaches ``documents``: each table is swapped in whole. Returns the
    stats (diff counts per source and in all, unreachable sources, per-source counts, documents, failures by
    reason)."""
    if crawl_root is not None:
        pages = read_parts([r["pages"] for r in records if r.get("pages")])
        with atomic_path(Path(crawl_root) / "raw_index.parquet") as tmp:
            pages.to_parquet(tmp, index=False)
    previous, _ = previous_documents(documents_dir)
    ids = crawl_plan(registry)
    docs, fails, diff, stats = merge_sources(records, ids, previous)
    stats.update(documents=int(len(docs)), sources=len(ids), ocr_documents=int(docs["ocr"].fillna(False).sum())
                 if "ocr" in docs else 0,
                 failures={str(k): int(v) for k, v in fails["reason"].value_counts().items()})
    config = {**asdict(cfg), "registry": str(registry), "extractor": extractor_version(cfg.extract)}
    cv = CRAWL_MERGE.code_version()
    inputs = {"registry": file_sha256(registry)}
    write_table(diff, diff_dir, name="crawl_diff", config=config, code_version=cv, inputs=inputs,
                stats={"diff": stats["diff"]})
    write_table(fails, failures_dir, name="crawl_failures", config=config, code_version=cv, stats=stats)
    docs = docs.drop(columns=["ocr"], errors="ignore")
    for col in ("fetched_at", "first_seen", "last_seen", "last_changed"):
        docs[col] = pd.to_datetime(docs[col], utc=True).astype("datetime64[s, UTC]")
    write_table(docs, documents_dir, name="documents", config=config, code_version=cv,
                inputs={**inputs, "crawl_diff": manifest_fingerprint(diff_dir)}, stats=stats)
    return stats


def crawl_stage(documents_dir, failures_dir, crawl_root, registry: str | os.PathLike = DEFAULT_REGISTRY,
                cfg: CrawlConfig = CrawlConfig(), on_progress=None, before_request=None,
                diff_dir=None) -> dict:
    """Plan, crawl every source in turn (an unreachable one is reported, the others go on), merge.
    ``diff_dir`` defaults to ``crawl_diff`` beside ``documents_dir``. Returns :func:`merge_crawl`'s stats."""
    records = []
    for sid in crawl_plan(registry):
        try:
            records.append(crawl_source_stage(crawl_root, documents_dir, sid, registry, cfg, on_progress,
                                              before_request))
        except SourceUnreachable as exc:
            records.append(unreachable_record(source_by_id(registry, sid), exc))
    diff_dir = diff_dir or Path(documents_dir).parent / "crawl_diff"
    return merge_crawl(records, documents_dir, failures_dir, diff_dir, registry, cfg, crawl_root)


# Stage contracts (see storage.contracts). Not cached: a crawl looks at the web; its archive and per-source
# crawl states (scratch) make a rerun fetch only new URLs, the current documents (scratch for a source's crawl)
# spare extracting bodies again.
CRAWL_SOURCE = Stage("crawl-source", "crawler.stages:crawl_source_stage", reads=(),
                     config=CrawlConfig, inputs=("source_id",), files=("registry",), scratch=("crawl", "documents"),
                     args={"crawl_root": "crawl", "documents_dir": "documents"})
CRAWL_MERGE = Stage("crawl", "crawler.stages:merge_crawl", writes=(table("documents"), table("crawl_failures"), table("crawl_diff")),
                    config=CrawlConfig, inputs=("records",), files=("registry",), scratch=("crawl",),
                    args={"documents_dir": "documents", "failures_dir": "crawl_failures", "diff_dir": "crawl_diff",
                          "crawl_root": "crawl"})
STAGES = (CRAWL_SOURCE, CRAWL_MERGE)
