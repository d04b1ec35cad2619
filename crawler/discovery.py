"""Discovery of new document URLs per source (SPEC §2; registry schema in :mod:`crawler.registry`).

One :class:`~crawler.registry.DiscoveryEntry` is walked by :func:`discover`:

- ``trs``: TRS/WCM listings: ``index.html``, ``index_1.html``, … ``index_{N-1}.html``, N read from the
  first page's ``createPageHTML(N, current, "index", "html")`` call (also the newer
  ``createPageHTML("page_div", N, current, "index", "html", total)``); default link pattern
  :data:`TRS_DOC` (``…/t20240301_123456.html``).
- ``hanweb``: Hanweb (大汉) column pages: the records sit as CDATA HTML in
  ``<script type="text/xml"><datastore><recordset><record>``; the datastore is parsed with lxml, then
  each record's HTML. Further pages are the column page's static paging ``index.html?uid=<unit>&pageNum=N``
  (``unit``: the id of the element holding the datastore, or ``unitid=`` of its ``<nextgroup>``);
  the page count is ``<totalpage>`` or ``totalRecord``/``perPage`` when the page gives them. Every
  link of a record is an item (no default pattern needed).
- ``paged``: ``?page=N`` (``page_param``, from ``first_page``) until a page holds no new matching link.
- ``sitemap``: XML sitemap or sitemap index (lxml, entities and network off; ``.gz`` inflated within
  :attr:`DiscoveryConfig.max_gzip_bytes`); ``url: robots`` reads the ``Sitemap:`` lines (protego) of the
  first host's robots.txt. Index children are fetched newest ``<lastmod>`` first; from each sitemap
  file the unknown, newest URLs are kept first (cap :attr:`DiscoveryConfig.max_sitemap_urls`).
- ``feed``: RSS/Atom with feedparser; an HTML page is followed to its
  ``<link rel="alternate" type="application/rss+xml|application/atom+xml">``.
- ``links``: one listing page, the links matching ``link_pattern`` (the legacy ``listings``).

Dates: a listing item's date is the first date (``2024-03-01``, ``2024/3/1``, ``2024年3月1日``) in the
text around its link (the link's own text excluded; the nearest enclosing element that holds no
other matching link), else a date in its URL (TRS ``t20240301_``, Hanweb ``/art/2024/3/1/``); a
sitemap URL's ``<lastmod>``; a feed entry's published (or updated) time. With ``since`` (the
source's cut-off) items dated before it are skipped.

Paging stops (``Discovery.stop``) at the end of the listing (``end``), at the page cap
(``max_pages``), at a page with no matching link (``empty``), a page whose links were all seen on
earlier pages or that redirects to an earlier page (``repeat``), a page whose dated items are all
older than ``since`` (``since``), a page whose items are all known already (``known``: fetched
before, by the caller's ``is_known``), or a failed fetch (``failed``). Only URLs on the source's
hosts are returned. Every fetch goes through the caller's ``fetch_page`` (the crawl passes one on
:class:`crawler.fetch.Fetcher`: robots.txt, politeness, host allow-list and size limits hold).
"""
from __future__ import annotations

import datetime as dt
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable
from urllib.parse import parse_qsl, urldefrag, urlencode, urljoin, urlsplit, urlunsplit

import lxml.html
from lxml import etree

from crawler.registry import ROBOTS, DiscoveryEntry, Source
from storage.bounds import check_bounds

TRS_DOC = r"/t\d{8}_\d+\.s?html?$"
_DATE = re.compile(r"(?<!\d)((?:19|20)\d{2})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})(?!\d)")
_URL_DATES = (re.compile(r"/t((?:19|20)\d{2})(\d{2})(\d{2})_\d+"), re.compile(r"/art/(\d{4})/(\d{1,2})/(\d{1,2})/"),
              re.compile(r"/((?:19|20)\d{2})-(\d{2})/(\d{2})/content_"))
_CREATE_PAGE = re.compile(r"createPageHTML\s*\(([^()]{0,300})\)")
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
_FEED_TYPES = ("application/rss+xml", "application/atom+xml")


@dataclass(frozen=True)
class DiscoveryConfig:
    """Bounds of discovery. ``max_pages``: pages (listing pages, sitemap files, feed + its HTML page)
    fetched per entry, the first included (an entry's own ``max_pages`` overrides it);
    ``max_links_per_page``: links taken from one listing page or feed; ``max_sitemap_urls``: URLs
    taken from one sitemap file; ``max_gzip_bytes``: inflated size cap of a gzipped sitemap (bytes);
    ``max_parse_seconds``: time to read the links of one listing page (past it: :class:`ListingTimeout`);
    ``stop_on_known``: stop paging at a page whose items are all known."""

    max_pages: int = 10
    max_links_per_page: int = 200
    max_sitemap_urls: int = 2000
    max_gzip_bytes: int = 50 * 1024 * 1024
    max_parse_seconds: float = 30.0
    stop_on_known: bool = True

    def __post_init__(self):
        check_bounds(self, max_pages=(1, 100_000), max_links_per_page=(1, 1_000_000),
                     max_sitemap_urls=(1, 10_000_000), max_gzip_bytes=(1, 1 << 40), max_parse_seconds=(">", 0, 86400))


@dataclass(frozen=True)
class Page:
    """A fetched listing page: ``url`` the final URL (after redirects), ``body`` the bytes."""

    url: str
    body: bytes
    content_type: str | None = None


FetchPage = Callable[[str], "Page | None"]  # None: the fetch failed (the caller records why)
IsKnown = Callable[[str], bool]


@dataclass(frozen=True)
class Found:
    """A discovered document URL, its listing date (None if the listing shows none), and whether
    it was known (``is_known``) when found."""

    url: str
    date: dt.date | None
    known: bool


@dataclass
class Discovery:
    """What one entry found: ``found`` in listing order, ``pages`` fetched, why paging ``stop``-ped
    (see module docstring), items skipped as older than ``since``, links dropped as off the source's
    hosts."""

    kind: str
    url: str
    found: list[Found] = field(default_factory=list)
    pages: int = 0
    stop: str = "end"
    since_skipped: int = 0
    off_host: int = 0


# ---------------------------------------------------------------- dates and HTML items

def parse_date(text: str | None) -> dt.date | None:
    """The first valid date in ``text`` (``2024-03-01``, ``2024/3/1``, ``2024.03.01``, ``2024年3月1日``)."""
    for m in _DATE.finditer(text or ""):
        try:
            return dt.date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            continue
    return None


def url_date(url: str) -> dt.date | None:
    """The publication date a CMS writes into a document URL (TRS ``t20240301_``, Hanweb
    ``/art/2024/3/1/``, gov.cn ``/2024-03/01/content_``), or None."""
    for rx in _URL_DATES:
        m = rx.search(url)
        if m:
            try:
                return dt.date(int(m[1]), int(m[2]), int(m[3]))
            except ValueError:
                return None
    return None


def _html(page: Page):
    """The page parsed with lxml.html (decoded as the extractor decodes), or None if empty."""
    from crawler.charsets import decode_html

    text, _ = decode_html(page.body, page.content_type)
    text = re.sub(r"^\s*<\?xml[^>]*>", "", text)  # lxml refuses str input with an encoding declaration
    try:
        return lxml.html.document_fromstring(text) if text.strip() else None
    except (etree.ParserError, ValueError):
        return None


class ListingTimeout(ValueError):
    """Reading the links of one listing page took longer than ``DiscoveryConfig.max_parse_seconds``."""


def _matched_counts(matched: list) -> dict:
    """Element -> number of links of ``matched`` in its subtree (itself included), capped at 2. Linear in
    elements + links: a walk up from a link stops at the first ancestor already at 2 (every ancestor above
    it is at 2 too), so each element is raised at most twice."""
    counts: dict = {}
    for el in matched:
        while el is not None:
            c = counts.get(el, 0)
            if c >= 2:
                break
            counts[el] = c + 1
            el = el.getparent()
    return counts


def _item_date(a, counts: dict, url: str) -> dt.date | None:
    """The date shown beside link ``a``: text of the nearest enclosing element (up to 4 levels) that
    holds no other matching link (``counts``: see :func:`_matched_counts`), the link's own text left
    out; else the URL's date. The elements read hold ``a`` alone, so the text read over all links is at
    most 4 times the page."""
    own = a.text_content()
    el = a
    for _ in range(4):
        el = el.getparent()
        if el is None or counts.get(el, 0) > 1:
            break
        d = parse_date(el.text_content().replace(own, " ", 1))
        if d is not None:
            return d
    return url_date(url)


def html_items(root, base: str, pattern: re.Pattern | None, limit: int,
               deadline: float | None = None) -> list[tuple[str, dt.date | None]]:
    """``(absolute URL, date)`` of the ``<a href>`` under ``root`` whose URL matches ``pattern`` (None:
    every link), fragments dropped, first ``limit`` distinct URLs in document order. Time linear in the
    page's elements and links.

    Raises:
        ListingTimeout: past ``deadline`` (``time.monotonic()`` seconds) while reading the links.
    """
    items, pairs = {}, []
    for n, a in enumerate(root.iter("a")):
        if deadline is not None and n % 1024 == 0 and time.monotonic() > deadline:
            raise ListingTimeout(f"links not read in time ({n} links read)")
        href = (a.get("href") or "").strip()
        if not href or href.startswith(("javascript:", "mailto:", "#")):
            continue
        try:
            u = urldefrag(urljoin(base, href))[0]
        except ValueError:
            continue
        if urlsplit(u).scheme in ("http", "https") and (pattern is None or pattern.search(u)):
            pairs.append((a, u))
    counts = _matched_counts([a for a, _ in pairs])
    for a, u in pairs:
        if len(items) >= limit:
            break
        if u not in items:
            items[u] = _item_date(a, counts, u)
    return list(items.items())


def _base_href(root, url: str) -> str:
    b = root.find(".//base[@href]") if root is not None else None
    return urljoin(url, b.get("href")) if b is not None else url


# ---------------------------------------------------------------- collecting items

class _Collector:
    """Filters a page's items (pattern applied by the parser; here: hosts, dedup, since, known)
    into a :class:`Discovery` and says whether paging should stop."""

    def __init__(self, entry: DiscoveryEntry, source: Source, is_known: IsKnown, cfg: DiscoveryConfig):
        self.hosts = {h.lower() for h in source.hosts}
        self.since = source.since
        self.is_known = is_known
        self.cfg = cfg
        self.result = Discovery(entry.kind, entry.url)
        self.seen: set[str] = set()

    def on_host(self, url: str) -> bool:
        try:
            p = urlsplit(url)
            host_ok = (p.hostname or "") in self.hosts or p.netloc.lower() in self.hosts
            return p.scheme in ("http", "https") and host_ok
        except ValueError:
            return False

    def take(self, items: Iterable[tuple[str, dt.date | None]], rank_limit: int | None = None) -> str | None:
        """Add a page's items; return a stop reason (``empty``, ``repeat``, ``since``, ``known``) or None.
        ``rank_limit``: keep at most this many, unknown and newest first (sitemaps)."""
        res, fresh, page_urls = self.result, [], set()
        off_before = res.off_host
        for url, date in items:
            if url in page_urls:
                continue
            page_urls.add(url)
            if not self.on_host(url):
                res.off_host += 1
            elif url not in self.seen:
                fresh.append((url, date))
        if len(page_urls) == res.off_host - off_before:
            return "empty"
        if not fresh:
            return "repeat"
        old = [(u, d) for u, d in fresh if self.since and d and d < self.since]
        keep = [(u, d, self.is_known(u)) for u, d in fresh if not (self.since and d and d < self.since)]
        if rank_limit is not None:
            keep = sorted(keep, key=lambda t: (t[2], -(t[1] or dt.date.min).toordinal()))[:rank_limit]
        res.since_skipped += len(old)
        self.seen.update(u for u, _ in fresh)
        res.found.extend(Found(u, d, k) for u, d, k in keep)
        dated = [d for _, d in fresh if d]
        if self.since and dated and all(d < self.since for d in dated):
            return "since"
        if self.cfg.stop_on_known and keep and all(k for _, _, k in keep):
            return "known"
        return None


# ---------------------------------------------------------------- paged listings (trs, hanweb, paged, links)

def _trs_next(first: Page, entry: DiscoveryEntry):
    """Page URL for index i >= 1 from the first page's ``createPageHTML`` call (None past the end)."""
    m = _CREATE_PAGE.search(first.body.decode("utf-8", "replace"))
    if not m:
        return lambda i: None
    args = [a.strip().strip("'\"") for a in m[1].split(",")]
    nums = [int(a) for a in args if a.isdigit()]
    names = [a for a in args if a and not a.isdigit()]
    count = nums[0] if nums else 1
    prefix, suffix = (names[-2], names[-1]) if len(names) >= 2 else ("index", "html")
    if not (_SAFE_NAME.fullmatch(prefix) and _SAFE_NAME.fullmatch(suffix)):
        prefix, suffix = "index", "html"
    folder = urljoin(entry.url, "./")
    return lambda i: f"{folder}{prefix}_{i}.{suffix}" if i < count else None


def _datastores(root) -> list:
    """``(datastore element, element holding its script)`` of every ``<script type="text/xml">``."""
    out = []
    for s in root.iter("script"):
        if (s.get("type") or "").lower() != "text/xml" or not (s.text or "").strip():
            continue
        try:
            x = etree.fromstring(s.text.strip().encode("utf-8"), _xml_parser())
        except etree.XMLSyntaxError:
            continue
        if etree.QName(x).localname == "datastore":
            out.append((x, s.getparent()))
    return out


def _hanweb_records(root) -> list[str]:
    return [r.text for x, _ in _datastores(root) for r in x.iter("record") if (r.text or "").strip()]


def _hanweb_next(first: Page, entry: DiscoveryEntry):
    """Page URL for index i >= 1: ``<url>?uid=<unit>&pageNum=<i+1>`` within the page count if known."""
    root = _html(first)
    stores = _datastores(root) if root is not None else []
    if not stores:
        return lambda i: None
    x, holder = stores[0]
    unit = holder.get("id") if holder is not None and (holder.get("id") or "").isdigit() else None
    if unit is None:
        m = re.search(r"unitid=(\d+)", x.findtext("nextgroup") or "")
        unit = m[1] if m else None
    if unit is None:
        return lambda i: None
    count = _hanweb_count(x, first)
    base = urlunsplit(urlsplit(entry.url)._replace(query="", fragment=""))
    return lambda i: f"{base}?uid={unit}&pageNum={i + 1}" if count is None or i < count else None


def _hanweb_count(x, first: Page) -> int | None:
    total = (x.findtext("totalpage") or "").strip()
    if total.isdigit():
        return int(total)
    text = first.body.decode("utf-8", "replace")
    rec = re.search(r"totalRecord\W{1,4}(\d+)", text, re.I)
    per = re.search(r"perPage\W{1,4}(\d+)", text, re.I)
    if rec and per and int(per[1]) > 0:
        return -(-int(rec[1]) // int(per[1]))
    return None


def _paged_next(first: Page, entry: DiscoveryEntry):
    p = urlsplit(entry.url)
    q = [(k, v) for k, v in parse_qsl(p.query, keep_blank_values=True) if k != entry.page_param]

    def url(i: int) -> str:
        return urlunsplit(p._replace(query=urlencode(q + [(entry.page_param, str(entry.first_page + i))]),
                                     fragment=""))
    return url


def _listing_items(kind: str, pattern: re.Pattern | None, limit: int, seconds: float | None = None):
    def items(page: Page) -> list[tuple[str, dt.date | None]]:
        deadline = None if seconds is None else time.monotonic() + seconds
        root = _html(page)
        if root is None:
            return []
        base = _base_href(root, page.url)
        if kind != "hanweb":
            return html_items(root, base, pattern, limit, deadline)
        out: dict = {}
        for rec in _hanweb_records(root):
            if deadline is not None and time.monotonic() > deadline:
                raise ListingTimeout(f"records not read in time ({len(out)} links read)")
            try:
                frag = lxml.html.fragment_fromstring(rec, create_parent="div")
            except (etree.ParserError, ValueError):
                continue
            for u, d in html_items(frag, base, pattern, limit, deadline):
                out.setdefault(u, d)
        return list(out.items())[:limit]
    return items


def _walk_pages(col: _Collector, entry: DiscoveryEntry, fetch_page: FetchPage, max_pages: int,
                next_url, items) -> Discovery:
    """Fetch page 0 (``entry.url``) then ``next_url(first)(i)`` for i = 1, 2… until a stop reason."""
    res, visited, url, nxt = col.result, set(), entry.url, None
    for i in range(max_pages):
        if i > 0:
            url = nxt(i)
            if url is None:
                res.stop = "end"
                return res
        if url in visited:
            res.stop = "repeat"
            return res
        page = fetch_page(url)
        res.pages += 1
        if page is None:
            res.stop = "failed"
            return res
        if page.url != url and page.url in visited:
            res.stop = "repeat"
            return res
        visited.update((url, page.url))
        if i == 0:
            nxt = next_url(page, entry)
        stop = col.take(items(page))
        if stop is not None:
            res.stop = stop
            return res
    res.stop = "max_pages" if nxt is not None and nxt(max_pages) is not None else "end"
    return res


# ---------------------------------------------------------------- sitemaps

def _xml_parser() -> etree.XMLParser:
    return etree.XMLParser(resolve_entities=False, no_network=True, huge_tree=False, load_dtd=False)


def _inflate(body: bytes, cap: int) -> bytes | None:
    """``body`` itself, or gunzipped if it is gzip; None if it inflates beyond ``cap`` bytes or is corrupt."""
    if body[:2] != b"\x1f\x8b":
        return body
    z = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = z.decompress(body, cap)
    except zlib.error:
        return None
    return None if z.unconsumed_tail else out


def _sitemap(body: bytes) -> tuple[str, list[tuple[str, dt.date | None]]]:
    """``("index"|"urlset"|"", [(loc, lastmod)])`` of a sitemap document (namespace-agnostic)."""
    try:
        root = etree.fromstring(body, _xml_parser())
    except (etree.XMLSyntaxError, ValueError):
        return "", []
    kind = {"sitemapindex": "index", "urlset": "urlset"}.get(etree.QName(root).localname, "")
    out = []
    for el in root:
        if not isinstance(el.tag, str):
            continue
        vals = {etree.QName(c).localname: (c.text or "").strip() for c in el if isinstance(c.tag, str)}
        if vals.get("loc"):
            out.append((vals["loc"], parse_date(vals.get("lastmod", "")[:10])))
    return kind, out


def _robots_url(source: Source) -> str:
    host = source.hosts[0]
    urls = [*source.seeds, *(e.url for e in source.discovery if e.url != ROBOTS)]
    schemes = [urlsplit(u).scheme for u in urls if urlsplit(u).netloc == host or urlsplit(u).hostname == host]
    return f"{schemes[0] if schemes else 'https'}://{host}/robots.txt"


def _sitemap_roots(col: _Collector, entry: DiscoveryEntry, source: Source, fetch_page: FetchPage) -> list[str]:
    """The sitemap URLs to start from: the entry's, or the robots.txt ``Sitemap:`` lines on the hosts."""
    if entry.url != ROBOTS and not urlsplit(entry.url).path.endswith("/robots.txt"):
        return [entry.url]
    from protego import Protego

    page = fetch_page(_robots_url(source) if entry.url == ROBOTS else entry.url)
    col.result.pages += 1
    if page is None:
        col.result.stop = "failed"
        return []
    maps = list(Protego.parse(page.body.decode("utf-8", "replace")).sitemaps)
    col.result.off_host += sum(1 for u in maps if not col.on_host(u))
    return [u for u in dict.fromkeys(maps) if col.on_host(u)]


def _walk_sitemaps(col: _Collector, entry: DiscoveryEntry, source: Source, fetch_page: FetchPage,
                   cfg: DiscoveryConfig, max_pages: int, pattern: re.Pattern | None) -> Discovery:
    res = col.result
    queue = _sitemap_roots(col, entry, source, fetch_page)
    if res.stop == "failed":
        return res
    visited: set[str] = set()
    failed = False  # a sitemap file that could not be fetched: the walk ends "failed", not "end"
    while queue:
        if res.pages >= max_pages:
            res.stop = "max_pages"
            return res
        url = queue.pop(0)
        if url in visited:
            continue
        visited.add(url)
        page = fetch_page(url)
        res.pages += 1
        body = _inflate(page.body, cfg.max_gzip_bytes) if page is not None else None
        kind, items = _sitemap(body) if body else ("", [])
        if page is None:
            failed = True
        if kind == "index":
            kids = [(u, d) for u, d in items if col.on_host(u) and u not in visited]
            res.off_host += sum(1 for u, _ in items if not col.on_host(u))
            res.since_skipped += sum(1 for _, d in kids if col.since and d and d < col.since)
            kids = [(u, d) for u, d in kids if not (col.since and d and d < col.since)]
            kids.sort(key=lambda t: -(t[1] or dt.date.min).toordinal())
            queue.extend(u for u, _ in kids)
        elif kind == "urlset":
            col.take([(u, d) for u, d in items if pattern is None or pattern.search(u)],
                     rank_limit=cfg.max_sitemap_urls)
    res.stop = "failed" if failed else "end"
    return res


# ---------------------------------------------------------------- feeds

def _struct_date(t) -> dt.date | None:
    try:
        return dt.date(t.tm_year, t.tm_mon, t.tm_mday) if t else None
    except (AttributeError, ValueError):
        return None


def _looks_html(page: Page) -> bool:
    head = page.body[:512].lstrip().lower()
    return "html" in (page.content_type or "").lower() or head.startswith((b"<!doctype html", b"<html"))


def _alternate_feed(page: Page) -> str | None:
    root = _html(page)
    if root is None:
        return None
    for link in root.iter("link"):
        rel = (link.get("rel") or "").lower().split()
        if "alternate" in rel and (link.get("type") or "").lower().split(";")[0].strip() in _FEED_TYPES \
                and link.get("href"):
            return urljoin(_base_href(root, page.url), link.get("href").strip())
    return None


def _walk_feed(col: _Collector, entry: DiscoveryEntry, fetch_page: FetchPage, cfg: DiscoveryConfig,
               max_pages: int, pattern: re.Pattern | None) -> Discovery:
    import feedparser

    res = col.result
    page = fetch_page(entry.url)
    res.pages += 1
    if page is not None and _looks_html(page):
        alt = _alternate_feed(page)
        if alt is None or not col.on_host(alt) or max_pages < 2:
            res.off_host += int(alt is not None and not col.on_host(alt))
            res.stop = "empty"
            return res
        page = fetch_page(alt)
        res.pages += 1
    if page is None:
        res.stop = "failed"
        return res
    parsed = feedparser.parse(page.body, response_headers={"content-location": page.url,
                                                           "content-type": page.content_type or "application/xml"})
    items = []
    for e in parsed.entries[: cfg.max_links_per_page]:
        link = (e.get("link") or "").strip()
        if link:
            u = urldefrag(urljoin(page.url, link))[0]
            if pattern is None or pattern.search(u):
                items.append((u, _struct_date(e.get("published_parsed") or e.get("updated_parsed"))))
    res.stop = col.take(items) or "end"
    return res


# ---------------------------------------------------------------- entry point

def link_pattern(entry: DiscoveryEntry, source: Source) -> re.Pattern | None:
    """The regex an entry's links must match: the entry's, else the source's ``link_pattern``, else
    the kind's default (``trs``: :data:`TRS_DOC`; ``hanweb``, ``sitemap``, ``feed``: None, every
    link). A ``paged``/``links`` entry with no pattern matches nothing (the registry requires one)."""
    p = entry.link_pattern or source.link_pattern or {"trs": TRS_DOC}.get(entry.kind)
    if p is None and entry.kind in ("paged", "links"):
        return re.compile(r"(?!)")
    return re.compile(p) if p else None


def discover(entry: DiscoveryEntry, source: Source, fetch_page: FetchPage, is_known: IsKnown,
             cfg: DiscoveryConfig = DiscoveryConfig()) -> Discovery:
    """Walk one discovery entry of ``source`` (see module docstring) and return what it found.

    Args:
        fetch_page: ``f(url) -> Page | None``; every listing, sitemap, feed and robots.txt request
            goes through it (None: the fetch failed; the caller records the failure).
        is_known: ``f(url) -> bool``, True for a document URL already fetched (crawl state).

    Never raises for bad pages (unparseable HTML/XML/feeds yield no items); raises ValueError for
    an entry of unknown kind.
    """
    col = _Collector(entry, source, is_known, cfg)
    max_pages = max(1, entry.max_pages or cfg.max_pages)
    pattern = link_pattern(entry, source)
    if entry.kind == "sitemap":
        return _walk_sitemaps(col, entry, source, fetch_page, cfg, max_pages, pattern)
    if entry.kind == "feed":
        return _walk_feed(col, entry, fetch_page, cfg, max_pages, pattern)
    nexts = {"trs": _trs_next, "hanweb": _hanweb_next, "paged": _paged_next, "links": lambda first, e: (lambda i: None)}
    if entry.kind not in nexts:
        raise ValueError(f"unknown discovery kind {entry.kind!r}")
    items = _listing_items(entry.kind, pattern, cfg.max_links_per_page, cfg.max_parse_seconds)
    return _walk_pages(col, entry, fetch_page, max_pages, nexts[entry.kind], items)
