"""The crawl: registry sources -> fetched, archived responses -> ``documents`` (issue: crawler).

Each host gets one worker thread (so requests to one host are sequential and spaced by the
fetcher's delay) and hosts run in parallel. A URL already fetched successfully is not fetched
again unless ``refresh`` is set, and then with a conditional GET. Listing pages add the links
that match their source's ``link_pattern``. Extraction runs from the archive, with no network, in
bounded worker processes (:mod:`crawler.sandbox`); a body that failed is recorded by its sha256 and
not extracted again until it changes.
"""
from __future__ import annotations

import contextlib
import re
import threading
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urljoin, urlsplit

import pandas as pd
from bs4 import BeautifulSoup

from crawler.archive import CrawlState, RawArchive
from crawler.extract import ExtractConfig
from crawler.fetch import FetchConfig, Fetcher
from crawler.registry import Source
from crawler.sandbox import ExtractionPool, SandboxError, extractor_version
from crawler.textsafe import strip_controls


@dataclass(frozen=True)
class CrawlConfig:
    """fetch: politeness and fetch bounds; extract: extraction bounds; max_hosts: hosts crawled in
    parallel; refresh: re-check pages already fetched (conditional GET); max_links_per_listing: cap
    on links taken from one listing."""

    fetch: FetchConfig = field(default_factory=FetchConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    max_hosts: int = 32
    refresh: bool = False
    max_links_per_listing: int = 200


def _links(body: bytes, base: str, pattern: str | None, limit: int) -> list[str]:
    if not pattern:
        return []
    rx = re.compile(pattern)
    soup = BeautifulSoup(body, "lxml")
    out = []
    for a in soup.find_all("a", href=True):
        u = urljoin(base, a["href"])
        if rx.search(u) and u not in out:
            out.append(u)
    return out[:limit]


def crawl(sources: list[Source], state: CrawlState, archive: RawArchive, cfg: CrawlConfig = CrawlConfig(),
          on_progress=None, before_request=None) -> dict:
    """Fetch every seed and listing-discovered URL of ``sources`` into ``archive`` and ``state``.

    ``on_progress(done, total)`` is called after every URL; ``before_request(netloc)`` before every
    request (see :class:`~crawler.fetch.Fetcher`).

    Returns counts: fetched, not_modified, skipped (already done), failed by reason, seconds per host.
    """
    fetcher = Fetcher({h for s in sources for h in s.hosts}, cfg.fetch, before_request,
                      allow_private=any(s.allow_private_addresses for s in sources))
    by_host: dict[str, list[tuple[str, Source, bool]]] = defaultdict(list)
    for s in sources:
        for u in s.listings:
            by_host[urlsplit(u).netloc].append((u, s, True))
        for u in s.seeds:
            by_host[urlsplit(u).netloc].append((u, s, False))
    counts: dict = {"fetched": 0, "not_modified": 0, "skipped": 0, "failed": defaultdict(int), "discovered": 0,
                    "done": 0}
    total = [sum(len(q) for q in by_host.values())]
    lock = threading.Lock()

    def count(key: str, n: int = 1, reason: str | None = None) -> None:
        with lock:
            if reason is None:
                counts[key] += n
            else:
                counts[key][reason] += n

    def work(queue: list[tuple[str, Source, bool]]) -> None:
        seen = set()
        while queue:
            url, src, is_listing = queue.pop(0)
            count("done")
            if on_progress is not None:
                on_progress(counts["done"], total[0])
            if url in seen:
                continue
            seen.add(url)
            old = state.get(url)
            if old and old["error"] is None and not cfg.refresh and not is_listing:
                count("skipped")
                continue
            validators = ({"etag": old["etag"], "last_modified": old["last_modified"]}
                          if old and old["error"] is None else None)
            res = fetcher.fetch(url, validators)
            if res.not_modified:
                count("not_modified")
                state.put({**old, "fetched_at": res.fetched_at, "status": 304})
                continue
            rec = {"url": url, "source_id": src.id, "status": res.status, "final_url": res.final_url,
                   "fetched_at": res.fetched_at, "error": res.error, "detail": res.detail, "attempts": res.attempts}
            if res.ok:
                rec.update(raw_sha256=archive.put(res.body), content_type=res.headers.get("Content-Type"),
                           etag=res.headers.get("ETag"), last_modified=res.headers.get("Last-Modified"),
                           bytes=len(res.body))
                count("fetched")
                if is_listing:
                    links = _links(res.body, res.final_url, src.link_pattern, cfg.max_links_per_listing)
                    count("discovered", len(links))
                    with lock:
                        total[0] += len(links)
                    queue.extend((u, src, False) for u in links)
            else:
                count("failed", reason=res.error)
            state.put(rec)

    with ThreadPoolExecutor(max_workers=max(1, min(cfg.max_hosts, len(by_host)))) as pool:
        list(pool.map(work, by_host.values()))
    counts["failed"] = dict(counts["failed"])
    counts["hosts"] = len(by_host)
    return counts


def documents_from_archive(sources: list[Source], state: CrawlState, archive: RawArchive,
                           cfg: ExtractConfig = ExtractConfig()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Extract every successfully fetched page (offline, from the archive, in bounded workers).

    A body that failed extraction before (same sha256, same extractor version) is not extracted
    again: its recorded failure is reported.

    Returns ``(documents, failures)``: documents in the SPEC §1 schema (plus ``citation`` None and
    ``ocr``), failures with url, source_id, reason, detail (fetch errors and extraction errors:
    ``extraction_failed``, ``extraction_timeout``, ``extraction_memory``).
    """
    from crawler.csv_import import DOCUMENT_COLUMNS

    by_id = {s.id: s for s in sources}
    listings = {u for s in sources for u in s.listings}
    version = extractor_version(cfg)
    docs, fails, todo = [], [], []
    for r in state.frame().itertuples(index=False):
        src = by_id.get(r.source_id)
        if r.error is not None:
            fails.append((r.url, r.source_id, r.error, r.detail or ""))
            continue
        if src is None or r.raw_sha256 is None or r.url in listings:
            continue
        known = state.extraction_failure(r.raw_sha256, version)
        if known is not None:
            fails.append((r.url, r.source_id, known[0], known[1]))
            continue
        todo.append((r, src))

    def finish(r, src, fut) -> None:
        try:
            d = pool.result(fut)
        except SandboxError as exc:
            state.put_extraction_failure(r.raw_sha256, version, exc.reason, str(exc))
            fails.append((r.url, r.source_id, exc.reason, str(exc)))
            return
        docs.append({"doc_id": r.raw_sha256[:16], "source_id": src.id, "source": src.name, "url": r.url,
                     "title": strip_controls(d.title, one_line=True), "pubtime": d.pubtime,
                     "issuer": strip_controls(d.issuer, one_line=True),
                     "doc_number": strip_controls(d.doc_number, one_line=True),
                     "written_date": d.written_date, "content_type": d.content_type, "fetched_at": pd.Timestamp(r.fetched_at),
                     "raw_sha256": r.raw_sha256, "citation": None, "text": strip_controls(d.text), "ocr": d.ocr})

    pending: deque = deque()  # a few documents in flight per worker, in order
    with ExtractionPool(cfg) if todo else contextlib.nullcontext() as pool:
        for r, src in todo:
            fut = pool.submit(archive.get(r.raw_sha256), r.final_url or r.url, r.content_type, src.extract)
            pending.append((r, src, fut))
            if len(pending) >= 2 * max(1, cfg.workers):
                finish(*pending.popleft())
        while pending:
            finish(*pending.popleft())
    documents = pd.DataFrame(docs, columns=[*DOCUMENT_COLUMNS, "ocr"])
    documents = documents.drop_duplicates("doc_id").reset_index(drop=True)
    failures = pd.DataFrame(fails, columns=["url", "source_id", "reason", "detail"])
    return documents, failures
