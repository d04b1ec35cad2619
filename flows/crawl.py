"""The crawl as per-source partitions, for scheduled refreshes (SPEC §2): plan -> one task per source -> merge.

``crawl_sources`` is a subflow with its own thread pool (crawling waits on the network and on per-host
politeness, not on the CPU): each registry source is a mapped ``crawl-<source_id>`` task, retried alone when
its hosts do not answer; the merge runs even when some sources failed (``allow_failure``), reports them
as unreachable and keeps their previous documents.
"""
from __future__ import annotations

from prefect import allow_failure, flow, unmapped
from prefect.task_runners import ThreadPoolTaskRunner

from crawler.stages import CRAWL_MERGE
from tasks import stages as T
from tasks.assets import materializing as M

CRAWL_THREADS = 16


@flow(name="crawl-sources", task_runner=ThreadPoolTaskRunner(max_workers=CRAWL_THREADS))
def crawl_sources(data_dir: str, registry: str | None = None, refresh: bool = False) -> dict:
    """Crawl every source of ``registry`` into ``data_dir`` (``crawl/``, ``documents``, ``crawl_failures``,
    ``crawl_diff``); returns the merge stats (diff counts per source and in all, unreachable sources)."""
    ids = T.crawl_plan(registry)
    parts = T.crawl_source.map(unmapped(data_dir), ids, unmapped(registry), unmapped(refresh))
    return M(T.crawl_merge, CRAWL_MERGE, data_dir)(data_dir, registry, refresh, ids, records=allow_failure(parts))
