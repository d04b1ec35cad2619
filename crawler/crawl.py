"""The crawl: registry sources -> fetched, archived responses -> ``documents`` (SPEC §2).

Each host gets one worker thread (so requests to one host are sequential and spaced by the
fetcher's delay) and hosts run in parallel. A URL already fetched successfully is not fetched
again unless ``refresh`` is set, and then with a conditional GET. Each source's discovery entries
(:mod:`crawler.discovery`: paged listings, sitemaps, feeds) add document URLs; listing fetches are
recorded with ``kind="listing"`` in the crawl state, documents with ``kind="document"``.
Extraction runs from the archive, with no network, in bounded worker processes
(:mod:`crawler.sandbox`); a body that failed is recorded by its sha256 and not extracted again
until it changes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections import defaultdict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import pandas as pd

from crawler.archive import CrawlState, RawArchive
from crawler.discovery import DiscoveryConfig, ListingTimeout, Page, discover
from crawler.document import Document, ExtractConfig
from crawler.fetch import FetchConfig, Fetcher
from crawler.registry import ROBOTS, DiscoveryEntry, Source
from crawler.sandbox import ExtractionPool, SandboxError, extractor_version
from crawler.textsafe import strip_controls

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CrawlConfig:
    """fetch: politeness and fetch bounds; extract: extraction bounds; discovery: bounds of discovery
    (pages per entry, links per page, see :class:`~crawler.discovery.DiscoveryConfig`); max_hosts:
    hosts crawled in parallel; refresh: re-check documents already fetched (conditional GET)."""

    fetch: FetchConfig = field(default_factory=FetchConfig)
    extract: ExtractConfig = field(default_factory=ExtractConfig)
    discovery: DiscoveryConfig = field(default_factory=DiscoveryConfig)
    max_hosts: int = 32
    refresh: bool = False


@dataclass(frozen=True)
class _Job:
    """A document URL to fetch, or (``entry`` set) a discovery entry to walk."""

    url: str
    source: Source
    entry: DiscoveryEntry | None = None


def entry_netloc(entry: DiscoveryEntry, source: Source) -> str:
    """The host (netloc) whose worker walks ``entry``: its URL's, the source's first host for ``robots``."""
    return source.hosts[0] if entry.url == ROBOTS else urlsplit(entry.url).netloc


def _record(url: str, src: Source, res, archive: RawArchive, kind: str) -> dict:
    """The crawl-state record of one fetch result (body archived when it succeeded)."""
    rec = {"url": url, "source_id": src.id, "status": res.status, "final_url": res.final_url, "kind": kind,
           "fetched_at": res.fetched_at, "error": res.error, "detail": res.detail, "attempts": res.attempts}
    if res.ok:
        rec.update(raw_sha256=archive.put(res.body), content_type=res.headers.get("Content-Type"),
                   etag=res.headers.get("ETag"), last_modified=res.headers.get("Last-Modified"), bytes=len(res.body))
    return rec


def _unasked_304(res):
    """A 304 to a request that sent no validators is a failure (``http_304``), not a page."""
    return dataclasses.replace(res, error="http_304", detail="304 to an unconditional request") \
        if res.not_modified else res


_PER_SOURCE = ("fetched", "not_modified", "skipped", "failed", "discovered", "discovered_new", "listing_pages")


class _Counts:
    """The crawl's counts (see :func:`crawl`); thread-safe."""

    def __init__(self):
        self.lock = threading.Lock()
        self.c: dict = {"fetched": 0, "not_modified": 0, "skipped": 0, "failed": defaultdict(int), "discovered": 0,
                        "done": 0, "discovered_by_kind": defaultdict(int), "discovered_new": 0, "listing_pages": 0,
                        "known_stop": 0, "since_stop": 0, "since_skipped": 0, "off_host": 0,
                        "by_source": defaultdict(lambda: dict.fromkeys(_PER_SOURCE, 0))}

    def add(self, key: str, n: int = 1, src: Source | None = None, sub: str | None = None) -> int:
        """Add ``n`` to ``key`` (to ``key[sub]`` for a dict-valued key) and to the source's row; the new total."""
        with self.lock:
            if sub is None:
                self.c[key] += n
            else:
                self.c[key][sub] += n
            if src is not None and key in _PER_SOURCE:
                self.c["by_source"][src.id][key] += n
            return self.c[key] if sub is None else self.c[key][sub]

    def result(self, hosts: int) -> dict:
        out = dict(self.c)
        for k in ("failed", "discovered_by_kind"):
            out[k] = dict(out[k])
        out["by_source"] = {k: dict(v) for k, v in out["by_source"].items()}
        out["hosts"] = hosts
        return out


class _Crawl:
    """One crawl run (see :func:`crawl`): per-host job queues, fetch of listings and documents."""

    def __init__(self, sources, state, archive, cfg, on_progress, fetcher):
        self.state, self.archive, self.cfg, self.on_progress, self.fetcher = state, archive, cfg, on_progress, fetcher
        self.counts = _Counts()
        self.lock = threading.Lock()
        self.claimed: set[str] = set()               # document URLs taken by a worker in this run
        self.found: dict[str, set[str]] = defaultdict(set)  # source id -> document URLs discovered
        self.queues: dict[str, deque] = defaultdict(deque)
        for s in sources:
            for e in s.discovery:
                self.queues[entry_netloc(e, s)].append(_Job(e.url, s, e))
            for u in s.seeds:
                self.queues[urlsplit(u).netloc].append(_Job(u, s))
        self.total = sum(len(q) for q in self.queues.values())

    def known(self, url: str) -> bool:
        """True if ``url`` was fetched successfully before as a document."""
        r = self.state.get(url)
        return r is not None and r["error"] is None and r.get("kind") != "listing"

    def _progress(self) -> None:
        done = self.counts.add("done")
        if self.on_progress is not None:
            self.on_progress(done, self.total)

    def fetch_listing(self, url: str, src: Source) -> Page | None:
        """Fetch a listing/sitemap/feed/robots page (always, conditionally when it was fetched before);
        recorded in the state as ``kind="listing"``. None if it failed (reason counted and recorded)."""
        old = self.state.get(url)
        usable = bool(old and old["error"] is None and old["raw_sha256"] and old.get("kind") == "listing")
        res = self.fetcher.fetch(url, {"etag": old["etag"], "last_modified": old["last_modified"]} if usable else None)
        if res.not_modified and usable:
            with contextlib.suppress(FileNotFoundError):
                body = self.archive.get(old["raw_sha256"])
                self.state.put({**old, "fetched_at": res.fetched_at, "status": 304})
                self.counts.add("not_modified", src=src)
                self.counts.add("listing_pages", src=src)
                return Page(old["final_url"] or url, body, old["content_type"])
            res = self.fetcher.fetch(url)
        res = _unasked_304(res)
        self.state.put(_record(url, src, res, self.archive, "listing"))
        if not res.ok:
            self.counts.add("failed", src=src, sub=res.error)
            return None
        self.counts.add("fetched", src=src)
        self.counts.add("listing_pages", src=src)
        return Page(res.final_url or url, res.body, res.headers.get("Content-Type"))

    def fetch_document(self, url: str, src: Source) -> None:
        """Fetch one document URL unless it was fetched before (then only on ``refresh``, conditionally)."""
        old = self.state.get(url)
        was_ok = bool(old and old["error"] is None and old.get("kind") != "listing")
        if was_ok and not self.cfg.refresh:
            self.counts.add("skipped", src=src)
            return
        res = self.fetcher.fetch(url, {"etag": old["etag"], "last_modified": old["last_modified"]} if was_ok else None)
        if res.not_modified and was_ok:
            self.counts.add("not_modified", src=src)
            self.state.put({**old, "fetched_at": res.fetched_at, "status": 304, "kind": "document"})
            return
        res = _unasked_304(res)
        self.counts.add("fetched" if res.ok else "failed", src=src, sub=None if res.ok else res.error)
        self.state.put(_record(url, src, res, self.archive, "document"))

    def discover(self, job: _Job) -> list[str]:
        """Walk one discovery entry; the document URLs it found (known ones included: they count as skipped)."""
        src, entry = job.source, job.entry
        try:
            d = discover(entry, src, lambda u: self.fetch_listing(u, src), self.known, self.cfg.discovery)
        except Exception as exc:  # noqa: BLE001 - a parser bug on one hostile page must not stop the other sources
            reason = "listing_timeout" if isinstance(exc, ListingTimeout) else "discovery_error"
            if reason == "listing_timeout":
                log.warning("discovery of %s (%s): %s", entry.url, src.id, exc)
            else:
                log.exception("discovery of %s (%s) failed", entry.url, src.id)
            self.counts.add("failed", src=src, sub=reason)
            self.state.put({"url": entry.url, "source_id": src.id, "kind": "listing", "error": reason,
                            "detail": f"{type(exc).__name__}: {exc}"[:500], "attempts": 0})
            return []
        with self.lock:
            fresh = [f for f in d.found if f.url not in self.found[src.id]]
            self.found[src.id].update(f.url for f in fresh)
        self.counts.add("discovered", len(fresh), src=src)
        self.counts.add("discovered_new", sum(1 for f in fresh if not f.known), src=src)
        self.counts.add("discovered_by_kind", len(d.found), sub=entry.kind)
        for key, n in (("known_stop", d.stop == "known"), ("since_stop", d.stop == "since"),
                       ("since_skipped", d.since_skipped), ("off_host", d.off_host)):
            self.counts.add(key, int(n))
        log.info("discovery %s %s: %d pages, %d found (%d new), stop=%s", entry.kind, entry.url, d.pages,
                 len(d.found), sum(1 for f in d.found if not f.known), d.stop)
        return [f.url for f in fresh]

    def work(self, queue: deque) -> None:
        """One host's worker: walk its discovery entries, fetch its documents and the ones they found."""
        while queue:
            job = queue.popleft()
            self._progress()
            if job.entry is not None:
                urls = self.discover(job)
                with self.lock:
                    self.total += len(urls)
                queue.extend(_Job(u, job.source) for u in urls)
                continue
            with self.lock:
                if job.url in self.claimed:
                    continue
                self.claimed.add(job.url)
            self.fetch_document(job.url, job.source)

    def run(self) -> dict:
        with ThreadPoolExecutor(max_workers=max(1, min(self.cfg.max_hosts, len(self.queues)))) as pool:
            list(pool.map(self.work, self.queues.values()))
        return self.counts.result(len(self.queues))


def crawl(sources: list[Source], state: CrawlState, archive: RawArchive, cfg: CrawlConfig = CrawlConfig(),
          on_progress=None, before_request=None, *, fetcher: Fetcher | None = None) -> dict:
    """Discover and fetch the documents of ``sources`` into ``archive`` and ``state``.

    Each host's worker walks the discovery entries on that host (:func:`crawler.discovery.discover`:
    listing pages, sitemaps, feeds; each fetch recorded in ``state`` with ``kind="listing"``), then
    fetches the source's seeds and the discovered document URLs (``kind="document"``; a URL fetched
    successfully before is skipped unless ``cfg.refresh``, then re-checked with a conditional GET).
    ``on_progress(done, total)`` is called after every job (URL or discovery entry); ``before_request(netloc)``
    before every request (see :class:`~crawler.fetch.Fetcher`). ``fetcher``: a Fetcher to share
    between calls (its per-host politeness then spans them); by default one on the sources' hosts.

    Returns counts: ``fetched`` (documents and listing pages), ``not_modified``, ``skipped`` (fetched
    before), ``failed`` (reason -> n, ``discovery_error`` for an entry whose walk raised, ``listing_timeout`` for one
    whose page took longer than ``max_parse_seconds`` to read), ``discovered``
    (distinct document URLs discovery found, per source, summed), ``discovered_new`` (of them, not
    fetched before), ``discovered_by_kind`` (kind -> URLs found), ``listing_pages`` (listing fetches that
    gave a page), ``known_stop`` / ``since_stop`` (entries whose paging stopped at a page of known items
    / items older than ``since``), ``since_skipped`` (items older than ``since``), ``off_host`` (links off
    the source's hosts, dropped), ``by_source`` (source id -> fetched, not_modified, skipped, failed,
    discovered, discovered_new, listing_pages), ``done`` (jobs), ``hosts``. Never raises for network
    problems or bad pages.
    """
    if fetcher is None:
        fetcher = Fetcher({h for s in sources for h in s.hosts}, cfg.fetch, before_request,
                          allow_private=any(s.allow_private_addresses for s in sources))
    return _Crawl(sources, state, archive, cfg, on_progress, fetcher).run()


def _is_listing(r) -> bool:
    """A crawl-state row of a listing page, sitemap, feed or robots.txt (not a document); state files written
    before the ``kind`` column read it as missing."""
    kind = getattr(r, "kind", None)
    return isinstance(kind, str) and kind == "listing"


def _document_row(r, src: Source, d: Document) -> dict:
    """The ``documents`` row of crawl-state row ``r`` of source ``src`` extracted as ``d``: ``doc_id`` from the
    raw body's sha256, text fields without control characters."""
    return {"doc_id": r.raw_sha256[:16], "source_id": src.id, "source": src.name, "url": r.url,
            "title": strip_controls(d.title, one_line=True), "pubtime": d.pubtime,
            "issuer": strip_controls(d.issuer, one_line=True),
            "doc_number": strip_controls(d.doc_number, one_line=True),
            "written_date": d.written_date, "content_type": d.content_type, "fetched_at": pd.Timestamp(r.fetched_at),
            "raw_sha256": r.raw_sha256, "citation": None, "text": strip_controls(d.text), "ocr": d.ocr}


def _extract_pages(todo: list, archive: RawArchive, state: CrawlState, version: str, cfg: ExtractConfig,
                   docs: list, fails: list) -> None:
    """Extract the ``(crawl-state row, source)`` pages of ``todo`` in bounded workers, a few in flight per
    worker, results taken in order: rows appended to ``docs``; failures appended to ``fails`` and recorded in
    ``state`` under the extractor ``version``."""

    def finish(r, src, fut) -> None:
        try:
            d = pool.result(fut)
        except SandboxError as exc:
            state.put_extraction_failure(r.raw_sha256, version, exc.reason, str(exc))
            fails.append((r.url, r.source_id, exc.reason, str(exc)))
            return
        docs.append(_document_row(r, src, d))

    pending: deque = deque()
    with ExtractionPool(cfg) as pool:
        for r, src in todo:
            fut = pool.submit(archive.get(r.raw_sha256), r.final_url or r.url, r.content_type, src.extract)
            pending.append((r, src, fut))
            if len(pending) >= 2 * max(1, cfg.workers):
                finish(*pending.popleft())
        while pending:
            finish(*pending.popleft())


def documents_from_archive(sources: list[Source], state: CrawlState, archive: RawArchive,
                           cfg: ExtractConfig = ExtractConfig(), reuse: dict[str, dict] | None = None
                           ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Extract every successfully fetched page (offline, from the archive, in bounded workers).

    A body that failed extraction before (same sha256, same extractor version) is not extracted
    again: its recorded failure is reported. ``reuse`` maps raw body sha256 -> a ``documents`` row
    extracted from that body by the same extractor version: such a page is not extracted again, the
    row is taken with this page's url and fetched_at (``documents.attrs["reused"]`` counts them).

    Returns ``(documents, failures)``: documents in the SPEC §1 schema (plus ``citation`` None and
    ``ocr``), failures with url, source_id, reason, detail (fetch errors and extraction errors:
    ``extraction_failed``, ``extraction_timeout``, ``extraction_memory``).
    """
    from crawler.csv_import import DOCUMENT_COLUMNS

    by_id = {s.id: s for s in sources}
    listings = {u for s in sources for u in s.listings}
    version = extractor_version(cfg)
    docs, fails, todo, reused = [], [], [], 0
    for r in state.frame().itertuples(index=False):
        src = by_id.get(r.source_id)
        if pd.notna(r.error) and _is_listing(r):
            fails.append((r.url, r.source_id, "listing_" + str(r.error), r.detail if pd.notna(r.detail) else ""))
            continue
        if pd.notna(r.error):  # pandas 3 reads a missing string as NaN, not None
            fails.append((r.url, r.source_id, r.error, r.detail if pd.notna(r.detail) else ""))
            continue
        if src is None or pd.isna(r.raw_sha256) or _is_listing(r) or r.url in listings:
            continue
        if reuse and r.raw_sha256 in reuse:
            docs.append({**{c: reuse[r.raw_sha256].get(c) for c in DOCUMENT_COLUMNS}, "source_id": src.id,
                         "source": src.name, "url": r.url, "fetched_at": pd.Timestamp(r.fetched_at),
                         "ocr": reuse[r.raw_sha256].get("ocr") is True})
            reused += 1
            continue
        known = state.extraction_failure(r.raw_sha256, version)
        if known is not None:
            fails.append((r.url, r.source_id, known[0], known[1]))
            continue
        todo.append((r, src))
    if todo:
        _extract_pages(todo, archive, state, version, cfg, docs, fails)
    documents = pd.DataFrame(docs, columns=[*DOCUMENT_COLUMNS, "ocr"])
    documents = documents.drop_duplicates("doc_id").reset_index(drop=True)
    documents.attrs["reused"] = reused
    failures = pd.DataFrame(fails, columns=["url", "source_id", "reason", "detail"])
    return documents, failures
