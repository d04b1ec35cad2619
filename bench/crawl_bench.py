"""Crawl benchmarks against real local servers (61 hosts: 127.0.0.2 … 127.0.0.62).

Seeds (SPEC §2 politeness): 20 seed pages per host at the default politeness (1 request/s/host), wall time
against the per-host bound (20 pages + robots.txt -> ~20 s), then extraction throughput (pages/s) on
the archived pages, offline.

Discovery (``--discovery``): each host is a TRS column of ``--listing-pages`` listing pages
(``index.html``, ``index_1.html``…, ``createPageHTML``) of ``--docs-per-page`` documents each; the crawl
discovers and fetches them all. Per-host politeness bound: (robots.txt + listing pages + documents) x
delay; the ratio wall / bound is printed (target <= 1.2).

    python bench/crawl_bench.py [--hosts 61] [--pages 20] [--delay 1.0]
    python bench/crawl_bench.py --discovery [--hosts 61] [--listing-pages 5] [--docs-per-page 20] [--delay 1.0]
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crawler.archive import CrawlState, RawArchive  # noqa: E402
from crawler.crawl import CrawlConfig, crawl, documents_from_archive  # noqa: E402
from crawler.fetch import FetchConfig  # noqa: E402
from crawler.registry import DiscoveryEntry, Source  # noqa: E402
from tests.builders import gov_page  # noqa: E402
from tests.discovery_hosts import Catalog, trs_path, trs_routes  # noqa: E402
from tests.http_hosts import hosts, send  # noqa: E402


def discovery_bench(args) -> None:
    """Discovery over TRS listings on ``args.hosts`` hosts; prints wall time against the politeness bound."""
    per_page, n_pages = args.docs_per_page, args.listing_pages
    cats = [Catalog.of(per_page * n_pages, trs_path) for _ in range(args.hosts)]
    d = Path(tempfile.mkdtemp(prefix="bench-discovery-"))
    try:
        with hosts(*(trs_routes(c, per_page=per_page) for c in cats)) as hs:
            sources = [Source(name=f"host{i}", id=f"h{i}", hosts=(h.netloc,), allow_private_addresses=True,
                              discovery=(DiscoveryEntry("trs", h.url("/xxgk/tz/index.html")),))
                       for i, h in enumerate(hs)]
            state, archive = CrawlState(d / "state.sqlite"), RawArchive(d)
            cfg = CrawlConfig(fetch=FetchConfig(delay=args.delay), max_hosts=args.hosts)
            t = time.perf_counter()
            counts = crawl(sources, state, archive, cfg)
            wall = time.perf_counter() - t
            requests = sum(sum(h.hits.values()) for h in hs)
        state.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)
    per_host = 1 + n_pages + per_page * n_pages
    bound = per_host * args.delay
    print(f"discovery: {args.hosts} hosts x {n_pages} TRS listing pages x {per_page} documents "
          f"at delay {args.delay} s: discovered {counts['discovered']}, listing pages {counts['listing_pages']}, "
          f"fetched {counts['fetched']}, "
          f"failed {counts['failed']}; {requests} requests served")
    print(f"discovery wall {wall:.1f} s; per-host politeness bound ({per_host} requests x {args.delay} s) "
          f"{bound:.1f} s; ratio {wall / bound:.2f} (target <= 1.2); sequential would take {bound * args.hosts:.0f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=61)
    ap.add_argument("--pages", type=int, default=20)
    ap.add_argument("--delay", type=float, default=1.0, help="politeness delay between requests to a host (s)")
    ap.add_argument("--discovery", action="store_true", help="run the discovery bench instead of the seeds bench")
    ap.add_argument("--listing-pages", type=int, default=5)
    ap.add_argument("--docs-per-page", type=int, default=20)
    args = ap.parse_args()
    if args.discovery:
        discovery_bench(args)
        return
    route_maps = []
    for k in range(args.hosts):
        routes = {"/robots.txt": lambda h: send(h, 200, b"User-agent: *\nAllow: /\n", "text/plain")}
        for i in range(args.pages):
            body = gov_page(f"第{k}站第{i}号文件。" + "数据要素市场化配置改革的若干措施，" * 40 + "。").encode()
            routes[f"/doc/{i}.html"] = lambda h, b=body: send(h, 200, b)
        route_maps.append(routes)
    d = Path(tempfile.mkdtemp(prefix="bench-crawl-"))
    try:
        with hosts(*route_maps) as hs:
            sources = [Source(name=f"host{i}", id=f"h{i}", hosts=(h.netloc,), allow_private_addresses=True,
                              seeds=tuple(h.url(f"/doc/{j}.html") for j in range(args.pages))) for i, h in enumerate(hs)]
            state, archive = CrawlState(d / "state.sqlite"), RawArchive(d)
            cfg = CrawlConfig(fetch=FetchConfig(delay=args.delay), max_hosts=args.hosts)
            t = time.perf_counter()
            counts = crawl(sources, state, archive, cfg)
            wall = time.perf_counter() - t
        bound = args.pages * cfg.fetch.delay
        print(f"{args.hosts} hosts x {args.pages} pages at {1 / cfg.fetch.delay:.0f} request/s/host: "
              f"fetched {counts['fetched']}, failed {counts['failed']}")
        print(f"crawl wall {wall:.1f} s; per-host bound {bound:.0f} s (+ robots.txt); ratio {wall / bound:.2f} "
              f"(target <= 1.5); sequential would take {bound * args.hosts:.0f} s")
        t = time.perf_counter()
        docs, fails = documents_from_archive(sources, state, archive)
        secs = time.perf_counter() - t
        print(f"extraction from the archive: {len(docs)} documents in {secs:.1f} s = {len(docs) / secs:.0f} pages/s "
              f"({len(fails)} failures)")
        state.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
