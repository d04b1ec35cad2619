"""Discovery (SPEC §2): TRS / Hanweb / ?page=N listings, sitemap index via robots.txt, RSS and Atom feeds,
the since cut-off, the known-only stop on a second crawl, failing sources, registry validation. Real local
servers on 127.0.0.x (tests/discovery_hosts.py)."""
from __future__ import annotations

import datetime as dt
import gzip
import socket

import pytest

from crawler.archive import CrawlState, RawArchive
from crawler.crawl import CrawlConfig, crawl
from crawler.discovery import DiscoveryConfig, Page, discover, parse_date
from crawler.fetch import FetchConfig
from crawler.registry import DiscoveryEntry, RegistryError, Source, load_registry
from tests.discovery_hosts import (Catalog, feed_path, feed_routes, hanweb_path, hanweb_routes, paged_path,
                                   paged_routes, sitemap_path, sitemap_routes, trs_path, trs_routes)
from tests.http_hosts import hosts, send

FAST = FetchConfig(delay=0.02, retries=1, backoff=0.02, connect_timeout=1, read_timeout=2)
CFG = CrawlConfig(fetch=FAST, max_hosts=8)


def src(name: str, host, *entries: DiscoveryEntry, **kw) -> Source:
    return Source(name=name, id=f"src-{name}", hosts=(host.netloc,), allow_private_addresses=True,
                  discovery=entries, **kw)


def doc_hits(host, cat: Catalog) -> dict[str, int]:
    return {it.path: host.hits.get(it.path, 0) for it in cat.items}


def kinds(state: CrawlState) -> dict[str, str]:
    f = state.frame()
    return dict(zip(f["url"], f["kind"]))


# ---------------------------------------------------------------- paged CMS listings, twice

def test_trs_hanweb_paged_listings_then_a_second_crawl_finds_exactly_the_new_items(tmp_path):
    trs, han, pag = (Catalog.of(15, trs_path), Catalog.of(15, hanweb_path), Catalog.of(15, paged_path))
    with hosts(trs_routes(trs), hanweb_routes(han), paged_routes(pag)) as (a, b, c):
        sources = [src("trs", a, DiscoveryEntry("trs", a.url("/xxgk/tz/index.html"))),
                   src("hanweb", b, DiscoveryEntry("hanweb", b.url("/col/col1229019364/index.html"))),
                   src("paged", c, DiscoveryEntry("paged", c.url("/list?cat=7&page=1"),
                                                  link_pattern=r"/docs/\d+\.html$"))]
        state, archive = CrawlState(tmp_path / "s.sqlite"), RawArchive(tmp_path)
        c1 = crawl(sources, state, archive, CFG)
        assert c1["discovered_by_kind"] == {"trs": 15, "hanweb": 15, "paged": 15}
        assert c1["discovered"] == c1["discovered_new"] == 45 and not c1["failed"]
        for host, cat in ((a, trs), (b, han), (c, pag)):
            assert set(doc_hits(host, cat).values()) == {1}  # every document fetched once
        # 3 pages, as createPageHTML says
        assert a.hits["/xxgk/tz/index_2.html"] == 1 and "/xxgk/tz/index_3.html" not in a.hits
        assert b.hits["/col/col1229019364/index.html?uid=4978845&pageNum=3"] == 1
        assert "/col/col1229019364/index.html?uid=4978845&pageNum=4" not in b.hits
        assert c.hits["/list?cat=7&page=4"] == 1  # paging ends at the first empty page
        # nothing off the source's hosts; listing pages recorded as listings, documents as documents
        assert c1["off_host"] >= 3 and c1["by_source"]["src-trs"]["discovered"] == 15
        k = kinds(state)
        assert k[a.url("/xxgk/tz/index_1.html")] == "listing" and k[a.url(trs.items[0].path)] == "document"
        assert sum(v == "document" for v in k.values()) == 45

        new = {name: cat.publish(3) for name, cat in (("trs", trs), ("hanweb", han), ("paged", pag))}
        before = {h.netloc: dict(h.hits) for h in (a, b, c)}
        c2 = crawl(sources, state, archive, CFG)
        assert c2["discovered_new"] == 9 and c2["known_stop"] == 3 and not c2["failed"]
        for host, cat, name in ((a, trs, "trs"), (b, han, "hanweb"), (c, pag, "paged")):
            fetched = {p for p, n in doc_hits(host, cat).items() if n > before[host.netloc].get(p, 0)}
            assert fetched == {it.path for it in new[name]}, name  # exactly the new documents
        # page 0 holds 3 new + 2 known, page 1 only known: paging stops there, page 2 is not requested
        assert a.hits["/xxgk/tz/index_1.html"] == 2 and a.hits["/xxgk/tz/index_2.html"] == 1
        assert b.hits["/col/col1229019364/index.html?uid=4978845&pageNum=3"] == 1
        assert c.hits["/list?cat=7&page=3"] == 1
        assert c2["fetched"] == 9 + 6 and c2["skipped"] == 21  # new docs + 2 listing pages each; 7 known each
    state.close()


# ---------------------------------------------------------------- sitemaps and feeds

def test_sitemap_index_via_robots_rss_and_atom_via_link_alternate(tmp_path):
    sm, rss, atom = Catalog.of(12, sitemap_path), Catalog.of(6, feed_path), Catalog.of(5, feed_path)
    with hosts(sitemap_routes(sm), feed_routes(rss, "rss"), feed_routes(atom, "atom", via_html=True)) as (a, b, c):
        sources = [src("sitemap", a, DiscoveryEntry("sitemap", "robots"), seeds=(a.url("/about.html"),)),
                   src("rss", b, DiscoveryEntry("feed", b.url("/feed.xml"))),
                   src("atom", c, DiscoveryEntry("feed", c.url("/index.html")))]
        state, archive = CrawlState(tmp_path / "s.sqlite"), RawArchive(tmp_path)
        counts = crawl(sources, state, archive, CFG)
        assert counts["discovered_by_kind"] == {"sitemap": 12, "feed": 11}
        assert counts["failed"] == {"http_404": 1}  # the /about.html seed; nothing else
        for host, cat in ((a, sm), (b, rss), (c, atom)):
            assert set(doc_hits(host, cat).values()) == {1}
        assert a.hits["/sitemap_index.xml"] == a.hits["/sitemap-new.xml"] == a.hits["/sitemap-old.xml.gz"] == 1
        assert c.hits["/feed.xml"] == 1  # found through <link rel="alternate" type="application/atom+xml">
        k = kinds(state)
        assert k[a.url("/robots.txt")] == k[a.url("/sitemap-old.xml.gz")] == k[c.url("/index.html")] == "listing"
    state.close()


def test_since_cut_off_on_listing_dates_lastmod_and_feed_dates(tmp_path):
    trs, sm, rss = Catalog.of(15, trs_path), Catalog.of(12, sitemap_path), Catalog.of(10, feed_path)
    since = dt.date(2024, 1, 9)  # items are dated from 2024-01-02, one a day
    with hosts(trs_routes(trs, per_page=5), sitemap_routes(sm), feed_routes(rss, "rss")) as (a, b, c):
        sources = [src("trs", a, DiscoveryEntry("trs", a.url("/xxgk/tz/index.html")), since=since),
                   src("sm", b, DiscoveryEntry("sitemap", b.url("/sitemap_index.xml")), since=since),
                   src("rss", c, DiscoveryEntry("feed", c.url("/feed.xml")), since=since)]
        counts = crawl(sources, CrawlState(tmp_path / "s.sqlite"), RawArchive(tmp_path), CFG)
        expect = {name: {it.path for it in cat.items if it.date >= since} for name, cat in
                  (("trs", trs), ("sm", sm), ("rss", rss))}
        for host, cat, name in ((a, trs, "trs"), (b, sm, "sm"), (c, rss, "rss")):
            assert {p for p, n in doc_hits(host, cat).items() if n} == expect[name], name
        assert [len(v) for v in expect.values()] == [8, 5, 3]
        # TRS pages: 16..12 | 11..7 (mixed) | 6..2 (all older): page 2 is read and stops paging
        assert a.hits["/xxgk/tz/index_2.html"] == 1 and counts["since_stop"] == 1
        assert b.hits.get("/sitemap-old.xml.gz") is None  # the older sitemap's lastmod is before since
        assert counts["since_skipped"] == (2 + 5) + (1 + 1) + 7  # trs pages 1, 2; old sitemap + 1 URL; feed


# ---------------------------------------------------------------- failures, bounds

def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_failing_listing_hosts_do_not_stop_the_other_sources(tmp_path):
    cat = Catalog.of(6, trs_path)
    down = {"*": lambda h: send(h, 500, b"oops", "text/plain")}
    with hosts(down, trs_routes(cat)) as (bad, good):
        refused = f"127.0.0.1:{_closed_port()}"
        sources = [src("500", bad, DiscoveryEntry("trs", bad.url("/xxgk/tz/index.html"))),
                   Source(name="refused", id="src-refused", hosts=(refused,), allow_private_addresses=True,
                          discovery=(DiscoveryEntry("hanweb", f"http://{refused}/col/col1/index.html"),)),
                   src("good", good, DiscoveryEntry("trs", good.url("/xxgk/tz/index.html")))]
        state = CrawlState(tmp_path / "s.sqlite")
        counts = crawl(sources, state, RawArchive(tmp_path), CFG)
        assert set(doc_hits(good, cat).values()) == {1} and counts["by_source"]["src-good"]["fetched"] == 2 + 6
        # robots.txt answering 500 or refusing the connection closes the site (RFC 9309 §2.3.1.4)
        assert counts["failed"] == {"robots_unreachable": 2}
        assert counts["by_source"]["src-500"]["failed"] == counts["by_source"]["src-refused"]["failed"] == 1
        rec = state.get(bad.url("/xxgk/tz/index.html"))
        assert rec["kind"] == "listing" and rec["error"] == "robots_unreachable" and "http_500" in rec["detail"]
    state.close()


def test_paging_is_bounded_against_endless_and_lying_listings(tmp_path):
    def same_page(h):  # every ?page=N answers the same list: stops as a repeat
        send(h, 200, b"<ul><li><a href='/docs/1.html'>1</a></li><li><a href='/docs/2.html'>2</a></li></ul>")

    def liar(h):  # claims a million pages, each with one new link
        n = h.path.rsplit("_", 1)[-1].split(".")[0] if "_" in h.path else "0"
        send(h, 200, f'<a href="/x/202401/t20240101_{n}.html">d</a><script>createPageHTML(1000000, 0, "index", '
                     f'"html")</script>'.encode())

    with hosts({"/robots.txt": lambda h: send(h, 200, b"", "text/plain"), "*": same_page},
               {"*": liar}) as (a, b):
        s_a = src("same", a)
        s_b = src("liar", b)
        fetch = _direct_fetcher((a, b))
        cfg = DiscoveryConfig(max_pages=4)
        d1 = discover(DiscoveryEntry("paged", a.url("/list?page=1"), link_pattern=r"/docs/"), s_a, fetch,
                      lambda u: False, cfg)
        assert d1.stop == "repeat" and d1.pages == 2 and len(d1.found) == 2
        d2 = discover(DiscoveryEntry("trs", b.url("/x/index.html")), s_b, fetch, lambda u: False, cfg)
        assert d2.stop == "max_pages" and d2.pages == 4 and len(d2.found) == 4
        d3 = discover(DiscoveryEntry("trs", b.url("/x/index.html"), max_pages=2), s_b, fetch, lambda u: False, cfg)
        assert d3.pages == 2


def _direct_fetcher(hs):
    from crawler.fetch import Fetcher

    f = Fetcher({h.netloc for h in hs}, FAST, allow_private=True)

    def fetch(url: str):
        r = f.fetch(url)
        return Page(r.final_url, r.body, r.headers.get("Content-Type")) if r.ok else None
    return fetch


def test_gzip_bomb_sitemap_and_off_host_sitemaps_are_refused(tmp_path):
    bomb = gzip.compress(b"<urlset>" + b" " * (4 << 20) + b"</urlset>")
    routes = {"/robots.txt": lambda h: send(h, 200, b"Sitemap: http://evil.example/sm.xml\n"
                                                   b"Sitemap: /relative-is-ignored.xml\n", "text/plain"),
              "/sm.xml.gz": lambda h: send(h, 200, bomb, "application/x-gzip")}
    with hosts(routes) as (a,):
        s = src("bomb", a)
        fetch = _direct_fetcher((a,))
        d = discover(DiscoveryEntry("sitemap", a.url("/sm.xml.gz")), s, fetch, lambda u: False,
                     DiscoveryConfig(max_gzip_bytes=1 << 20))
        assert d.found == [] and d.pages == 1
        d = discover(DiscoveryEntry("sitemap", a.url("/robots.txt")), s, fetch, lambda u: False)
        assert d.found == [] and d.pages == 1 and d.off_host == 2  # only robots.txt was fetched


def test_listing_dates_and_newer_trs_call():
    assert parse_date("发布时间：2024年3月1日") == dt.date(2024, 3, 1)
    assert parse_date("[2024/03/01]") == dt.date(2024, 3, 1)
    assert parse_date("2024-13-01 2023-02-03") == dt.date(2023, 2, 3)  # an invalid date is passed over
    page = Page("http://h.cn/c/index.html", (
        '<ul><li><a href="./202401/t20240105_9.html">关于2023年1月1日起施行的通知</a><span>2024-01-05</span></li>'
        '<li><a href="./202312/t20231230_8.html">无日期</a></li></ul>'
        '<script>createPageHTML("page_div", 3, 1, "index", "htm", 60);</script>').encode("utf-8"))
    asked = []

    def fetch(url):
        asked.append(url)
        return page if url.endswith("index.html") else None
    s = Source(name="h", id="h", hosts=("h.cn",))
    d = discover(DiscoveryEntry("trs", "http://h.cn/c/index.html"), s, fetch, lambda u: False)
    assert [(f.url, f.date) for f in d.found] == [("http://h.cn/c/202401/t20240105_9.html", dt.date(2024, 1, 5)),
                                                  ("http://h.cn/c/202312/t20231230_8.html", dt.date(2023, 12, 30))]
    assert asked == ["http://h.cn/c/index.html", "http://h.cn/c/index_1.htm"] and d.stop == "failed"


# ---------------------------------------------------------------- registry

def test_registry_discovery_entries_and_their_errors(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("""sources:
- name: A
  hosts: [www.a.gov.cn]
  since: 2024-01-01
  listings: [https://www.a.gov.cn/list.html]
  link_pattern: '/art/\\d+\\.html$'
  discovery:
  - {kind: trs, url: 'https://www.a.gov.cn/xxgk/index.html', link_pattern: '/t\\d{8}_\\d+\\.html$', max_pages: 3,
     checked_live: true, note: checked}
  - {kind: sitemap, url: robots}
  - {kind: paged, url: 'https://www.a.gov.cn/l?p=0', page_param: p, first_page: 0}
""", encoding="utf-8")
    (s,) = load_registry(good)
    assert s.since == dt.date(2024, 1, 1)
    assert [(e.kind, e.max_pages, e.checked_live) for e in s.discovery] == [
        ("trs", 3, True), ("sitemap", None, False), ("paged", None, False), ("links", None, False)]
    assert s.discovery[2].page_param == "p" and s.discovery[2].first_page == 0
    assert s.discovery[3].url == "https://www.a.gov.cn/list.html" and s.discovery[3].link_pattern == r"/art/\d+\.html$"

    bad = tmp_path / "bad.yaml"
    bad.write_text("""sources:
- name: B
  hosts: [b.gov.cn]
  since: 2024-02-30
  discovery:
  - {kind: rss, url: 'https://b.gov.cn/rss.xml'}
  - {kind: trs, url: 'https://other.gov.cn/index.html'}
  - {kind: hanweb, url: 'ftp://b.gov.cn/col/index.html'}
  - {kind: feed, url: 'https://b.gov.cn/f.xml', link_pattern: '(['}
  - {kind: paged, url: 'https://b.gov.cn/l?page=1'}
  - {kind: trs, url: robots, max_pages: 0, linkpattern: x}
- name: C
  hosts: [c.gov.cn]
  since: yesterday
  discovery: {kind: trs}
""", encoding="utf-8")
    with pytest.raises(RegistryError) as e:
        load_registry(bad)
    lines = str(e.value).splitlines()[1:]
    expect = ["entry 0 (B): since must be an ISO date", "discovery entry 0 (rss): kind must be one of",
              "discovery entry 1 (trs): url https://other.gov.cn/index.html is on host other.gov.cn, not in hosts",
              "discovery entry 2 (hanweb): url 'ftp://b.gov.cn/col/index.html' is not an http(s) URL",
              "discovery entry 3 (feed): link_pattern does not compile",
              "discovery entry 4 (paged): a paged entry needs a link_pattern",
              "discovery entry 5 (trs): unknown key 'linkpattern'", "discovery entry 5 (trs): url 'robots' is not",
              "discovery entry 5 (trs): max_pages must be an integer >= 1",
              "entry 1 (C): discovery must be a list", "entry 1 (C): since must be an ISO date"]
    for want in expect:
        assert any(want in ln for ln in lines), (want, lines)
    assert len(lines) == len(expect)


def test_state_files_from_before_the_kind_column_stay_readable(tmp_path):
    import sqlite3

    old_cols = ("url", "source_id", "status", "final_url", "raw_sha256", "content_type", "etag", "last_modified",
                "fetched_at", "error", "detail", "attempts", "bytes")
    db = sqlite3.connect(tmp_path / "s.sqlite")
    db.execute(f"CREATE TABLE pages ({', '.join(c + (' TEXT PRIMARY KEY' if c == 'url' else '') for c in old_cols)})")
    db.execute("INSERT INTO pages (url, source_id, status) VALUES ('http://a.cn/1.html', 's', 200)")
    db.commit()
    db.close()
    state = CrawlState(tmp_path / "s.sqlite")
    assert state.get("http://a.cn/1.html")["kind"] is None and "kind" in state.frame().columns
    state.put({"url": "http://a.cn/list.html", "source_id": "s", "status": 200, "kind": "listing"})
    assert dict(zip(state.frame()["url"], state.frame()["kind"]))["http://a.cn/list.html"] == "listing"
    state.close()
