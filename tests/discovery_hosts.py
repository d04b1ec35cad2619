"""Listing sites for discovery tests and benches, served by :mod:`tests.http_hosts` (real local servers).

A :class:`Catalog` holds a site's documents, newest first; :meth:`Catalog.publish` adds new ones on top,
so a listing rendered after it shows them first and pushes older items to later pages (what a CMS does).
Each ``*_routes`` function returns a route map (``{"*": dispatcher}``) that renders, on every request,
from the catalog's current state: robots.txt, the document pages, and the listing pages of one template:

- :func:`trs_routes`: TRS ``index.html``, ``index_1.html``… with ``createPageHTML(N, i, "index", "html")``;
- :func:`hanweb_routes`: a Hanweb column page, records as CDATA in ``<script type="text/xml"><datastore>``,
  paged as ``index.html?uid=<unit>&pageNum=N`` with ``totalRecord``/``perPage`` in the page script;
- :func:`paged_routes`: ``/list?page=N`` (a page past the end lists nothing);
- :func:`sitemap_routes`: robots.txt ``Sitemap:`` -> a sitemap index -> two sitemaps (the second gzipped);
- :func:`feed_routes`: an RSS 2.0 or Atom feed, optionally announced by an HTML page's ``<link rel=alternate>``.

Every listing also carries navigation links and one off-host link that matches the document pattern.
"""
from __future__ import annotations

import datetime as dt
import gzip
import math
import socket
from dataclasses import dataclass, field
from email.utils import format_datetime
from typing import Callable
from urllib.parse import parse_qs, urlsplit

from tests.builders import gov_page
from tests.http_hosts import send

OFF_HOST = "http://www.elsewhere.gov.cn"


@dataclass(frozen=True)
class Item:
    """One document: its path on the site, title and publication date."""

    path: str
    title: str
    date: dt.date


@dataclass
class Catalog:
    """A site's documents, newest first. ``path_of(n, date)`` gives document n's path."""

    path_of: Callable[[int, dt.date], str]
    items: list[Item] = field(default_factory=list)
    next_id: int = 100
    day: dt.date = dt.date(2024, 1, 1)

    @classmethod
    def of(cls, n: int, path_of: Callable[[int, dt.date], str], start: dt.date = dt.date(2024, 1, 1)) -> "Catalog":
        """A catalog of ``n`` documents dated one a day from ``start``."""
        cat = cls(path_of, day=start)
        cat.publish(n)
        return cat

    def publish(self, k: int) -> list[Item]:
        """Add ``k`` new documents (one a day after the newest) on top; returns them."""
        new = []
        for _ in range(k):
            self.day += dt.timedelta(days=1)
            new.append(Item(self.path_of(self.next_id, self.day), f"关于数据要素第{self.next_id}号的通知", self.day))
            self.next_id += 1
        self.items[:0] = new[::-1]
        return new

    def page(self, i: int, per_page: int) -> list[Item]:
        return self.items[i * per_page:(i + 1) * per_page]

    def pages(self, per_page: int) -> int:
        return max(1, math.ceil(len(self.items) / per_page))

    def doc(self, path: str) -> Item | None:
        return next((it for it in self.items if it.path == path), None)


def _nav() -> str:
    return (f'<div class="nav"><a href="/">首页</a><a href="/about.html">关于</a>'
            f'<a href="{OFF_HOST}/xxgk/202401/t20240101_1.html">外站</a></div>')


def _li(it: Item, href: str | None = None) -> str:
    return f'<li><a href="{href or it.path}" title="{it.title}">{it.title}</a><span class="date">{it.date}</span></li>'


def _dispatch(cat: Catalog, listing: Callable[[object, str], bytes | None], robots: str = "") -> Callable:
    """The route that serves robots.txt, documents of ``cat`` and ``listing(h, path)`` pages (else 404)."""
    def route(h) -> None:
        # headers and body go out as two writes: without TCP_NODELAY, Nagle + the client's delayed ACK
        # hold the body ~40 ms, a cost of this test server, not of the crawler
        h.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        path = h.path
        if path == "/robots.txt":
            return send(h, 200, f"User-agent: *\nAllow: /\n{robots}".encode(), "text/plain")
        it = cat.doc(urlsplit(path).path)
        if it is not None:
            return send(h, 200, gov_page(f"{it.title}。" + "为加快构建数据基础制度，现提出如下意见。" * 5).encode())
        body = listing(h, path)
        if body is None:
            return send(h, 404, b"not found", "text/plain")
        ctype = getattr(body, "ctype", "text/html; charset=utf-8")
        send(h, 200, body if isinstance(body, bytes) else body.encode(), ctype)
    return route


def trs_path(n: int, d: dt.date, column: str = "/xxgk/tz/") -> str:
    """A TRS document path: ``<column>YYYYMM/tYYYYMMDD_n.html``."""
    return f"{column}{d:%Y%m}/t{d:%Y%m%d}_{n}.html"


def trs_routes(cat: Catalog, per_page: int = 5, column: str = "/xxgk/tz/") -> dict:
    """A TRS column: ``<column>index.html``, ``index_1.html``…; items link relatively (``./YYYYMM/t….html``)."""
    def listing(h, path: str):
        name = path[len(column):] if path.startswith(column) else None
        if name == "index.html":
            i = 0
        elif name and name.startswith("index_") and name.endswith(".html") and name[6:-5].isdigit():
            i = int(name[6:-5])
        else:
            return None
        n = cat.pages(per_page)
        if i >= n:
            return None
        lis = "".join(_li(it, "./" + it.path[len(column):]) for it in cat.page(i, per_page))
        return (f"<html><head><title>通知</title></head><body>{_nav()}<ul class='list'>{lis}</ul>"
                f'<div class="page"><script>createPageHTML({n}, {i}, "index", "html");</script></div></body></html>')
    return {"*": _dispatch(cat, listing)}


def hanweb_path(n: int, d: dt.date, col: int = 1229019364) -> str:
    """A Hanweb article path: ``/art/YYYY/M/D/art_<col>_n.html``."""
    return f"/art/{d.year}/{d.month}/{d.day}/art_{col}_{n}.html"


def hanweb_routes(cat: Catalog, per_page: int = 5, col: int = 1229019364, unit: str = "4978845") -> dict:
    """A Hanweb column page ``/col/col<col>/index.html`` (``?uid=<unit>&pageNum=N`` for page N)."""
    base = f"/col/col{col}/index.html"

    def listing(h, path: str):
        p = urlsplit(path)
        if p.path != base:
            return None
        q = parse_qs(p.query)
        n = int((q.get("pageNum") or ["1"])[0]) if (q.get("uid") or [unit])[0] == unit else 1
        records = "".join(f"<record><![CDATA[{_li(it)}]]></record>\n" for it in cat.page(n - 1, per_page))
        nextgroup = (f'<a href="/module/web/jpage/dataproxy.jsp?page=1&amp;webid=3185&amp;path=/&amp;columnid={col}'
                     f'&amp;unitid={unit}&amp;webname=test&amp;permissiontype=0"></a>')
        return (f"<html><head><title>政策文件</title></head><body>{_nav()}"
                f'<div id="{unit}"><script type="text/xml"><datastore><nextgroup><![CDATA[{nextgroup}]]></nextgroup>'
                f"<recordset>{records}</recordset></datastore></script></div>"
                f'<script language="javascript" src="/module/jpage/resources/js/default_jpage.js"></script>'
                f'<script>$("#{unit}").jpage({{totalRecord: {len(cat.items)}, perPage: {per_page}, '
                f'dataStore: null}});</script></body></html>')
    return {"*": _dispatch(cat, listing)}


def paged_path(n: int, d: dt.date) -> str:
    return f"/docs/{n}.html"


def paged_routes(cat: Catalog, per_page: int = 5, param: str = "page") -> dict:
    """``/list?cat=7&<param>=N`` (N from 1); a page past the end is an empty list (200)."""
    def listing(h, path: str):
        p = urlsplit(path)
        if p.path != "/list":
            return None
        n = int((parse_qs(p.query).get(param) or ["1"])[0])
        lis = "".join(_li(it) for it in cat.page(n - 1, per_page))
        return f"<html><body>{_nav()}<ul>{lis}</ul><a href='/list?cat=7&{param}={n + 1}'>下一页</a></body></html>"
    return {"*": _dispatch(cat, listing)}


class _Typed(bytes):
    """Bytes with a content type for :func:`_dispatch`."""

    ctype = "text/html; charset=utf-8"

    def __new__(cls, body: bytes, ctype: str):
        obj = super().__new__(cls, body)
        obj.ctype = ctype
        return obj


def sitemap_path(n: int, d: dt.date) -> str:
    return f"/s/{d:%Y%m}/{n}.html"


def sitemap_routes(cat: Catalog) -> dict:
    """robots.txt -> ``/sitemap_index.xml`` -> ``/sitemap-new.xml`` (newer half) and ``/sitemap-old.xml.gz``
    (older half, gzipped), each URL with its ``<lastmod>``; absolute URLs from the request's Host header."""
    ns = 'xmlns="http://www.sitemaps.org/schemas/sitemap/0.9"'

    def urlset(h, items: list[Item]) -> bytes:
        host = f"http://{h.headers['Host']}"
        urls = "".join(f"<url><loc>{host}{it.path}</loc><lastmod>{it.date}</lastmod></url>" for it in items)
        return f'<?xml version="1.0" encoding="UTF-8"?><urlset {ns}>{urls}</urlset>'.encode()

    def listing(h, path: str):
        half = len(cat.items) // 2
        host = f"http://{h.headers['Host']}"
        if path == "/sitemap_index.xml":
            maps = "".join(f"<sitemap><loc>{host}{p}</loc><lastmod>{d}</lastmod></sitemap>"
                           for p, d in (("/sitemap-old.xml.gz", cat.items[half].date),
                                        ("/sitemap-new.xml", cat.items[0].date)))
            body = f'<?xml version="1.0" encoding="UTF-8"?><sitemapindex {ns}>{maps}</sitemapindex>'.encode()
            return _Typed(body, "application/xml")
        if path == "/sitemap-new.xml":
            return _Typed(urlset(h, cat.items[:half]), "application/xml")
        if path == "/sitemap-old.xml.gz":
            return _Typed(gzip.compress(urlset(h, cat.items[half:])), "application/x-gzip")
        return None

    def route(h) -> None:
        robots = f"Sitemap: http://{h.headers['Host']}/sitemap_index.xml\n"
        return _dispatch(cat, listing, robots)(h)
    return {"*": route}


def feed_path(n: int, d: dt.date) -> str:
    return f"/news/{d:%Y%m%d}/{n}.html"


def feed_routes(cat: Catalog, fmt: str = "rss", via_html: bool = False) -> dict:
    """``/feed.xml`` as RSS 2.0 (``fmt="rss"``, pubDate) or Atom (``"atom"``, published); with
    ``via_html`` also ``/index.html`` whose ``<link rel="alternate">`` names the feed."""
    def noon(d: dt.date) -> dt.datetime:
        return dt.datetime(d.year, d.month, d.day, 12, tzinfo=dt.timezone(dt.timedelta(hours=8)))

    def listing(h, path: str):
        host = f"http://{h.headers['Host']}"
        if path == "/index.html" and via_html:
            mime = "application/rss+xml" if fmt == "rss" else "application/atom+xml"
            return (f'<html><head><link rel="alternate" type="{mime}" title="订阅" href="/feed.xml"></head>'
                    f"<body>{_nav()}</body></html>")
        if path != "/feed.xml":
            return None
        if fmt == "rss":
            items = "".join(f"<item><title>{it.title}</title><link>{host}{it.path}</link>"
                            f"<pubDate>{format_datetime(noon(it.date))}</pubDate></item>" for it in cat.items)
            body = (f'<?xml version="1.0" encoding="UTF-8"?><rss version="2.0"><channel><title>政策</title>'
                    f"{items}</channel></rss>")
            return _Typed(body.encode(), "application/rss+xml")
        entries = "".join(f"<entry><title>{it.title}</title><link href='{it.path}'/><id>{host}{it.path}</id>"
                          f"<published>{noon(it.date).isoformat()}</published><updated>{noon(it.date).isoformat()}"
                          f"</updated></entry>" for it in cat.items)
        body = (f'<?xml version="1.0" encoding="UTF-8"?><feed xmlns="http://www.w3.org/2005/Atom" xml:base="{host}/">'
                f"<title>政策</title><id>{host}/</id><updated>2024-01-01T00:00:00Z</updated>{entries}</feed>")
        return _Typed(body.encode(), "application/atom+xml")
    return {"*": _dispatch(cat, listing)}
