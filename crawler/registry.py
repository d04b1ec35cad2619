"""The source registry (``crawler/sources.yaml``): data, validated on load.

Each entry: ``name`` (the channel), ``id``, ``hosts`` (the only hosts the crawler may fetch for it,
redirects included; may be empty only for an entry with no URLs yet), ``seeds`` (document URLs), optional ``listings`` (pages whose links matching
``link_pattern`` are new documents) and ``extract`` hints (``expect: pdf|html|mixed``, ``body``: a
CSS selector for the article body).

Discovery (SPEC §2): ``discovery`` is a list of entries, each
``{kind, url, link_pattern?, max_pages?, page_param?, first_page?, checked_live?, note?}`` with
``kind`` one of :data:`DISCOVERY_KINDS` (``trs``, ``hanweb``, ``paged``, ``sitemap``, ``feed``,
``links``); ``url`` is an http(s) URL on one of the source's hosts (``sitemap`` also takes
``robots``: the ``Sitemap:`` lines of the first host's robots.txt). ``since`` (ISO date) is the
source's date cut-off. The legacy ``listings`` (+ ``link_pattern``) mean ``kind: links`` entries.
How each kind is crawled: :mod:`crawler.discovery`.

Top level: ``allow_private_addresses`` (default false): let the crawler fetch hosts that resolve to
loopback, private or link-local addresses (local test servers); off, such hosts are refused (SSRF).
"""
from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from crawler.urlpolicy import UrlPolicy

DEFAULT_REGISTRY = Path(__file__).with_name("sources.yaml")


class _Loader(yaml.SafeLoader):
    """SafeLoader that keeps dates as strings: ``since`` is parsed per entry, so a bad date names its entry."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


class RegistryError(ValueError):
    """One or more registry entries are invalid; the message lists each problem on its own line."""


DISCOVERY_KINDS = ("trs", "hanweb", "paged", "sitemap", "feed", "links")
_ENTRY_KEYS = {"kind", "url", "link_pattern", "max_pages", "page_param", "first_page", "checked_live", "note"}
ROBOTS = "robots"  # a sitemap entry's url meaning "the Sitemap: lines of the first host's robots.txt"


@dataclass(frozen=True)
class DiscoveryEntry:
    """One discovery entry of a source (schema: module docstring; crawled by :mod:`crawler.discovery`).

    ``link_pattern``: regex searched in absolute URLs (None: the kind's default, see
    :func:`crawler.discovery.discover`); ``max_pages``: cap on pages fetched for this entry (None:
    ``DiscoveryConfig.max_pages``); ``page_param`` / ``first_page``: the query parameter and first
    number of ``paged`` listings; ``checked_live``: whether the entry was checked on the live site.
    """

    kind: str
    url: str
    link_pattern: str | None = None
    max_pages: int | None = None
    page_param: str = "page"
    first_page: int = 1
    checked_live: bool = False
    note: str | None = None


@dataclass(frozen=True)
class Source:
    """A crawl source (see module docstring). ``discovery`` always holds a ``links`` entry for each
    legacy ``listings`` URL (added on construction, with the source's ``link_pattern``)."""

    name: str
    id: str
    hosts: tuple[str, ...]
    seeds: tuple[str, ...] = ()
    listings: tuple[str, ...] = ()
    link_pattern: str | None = None
    extract: dict = field(default_factory=dict)
    note: str | None = None
    allow_private_addresses: bool = False
    discovery: tuple[DiscoveryEntry, ...] = ()
    since: dt.date | None = None

    def __post_init__(self):
        have = {e.url for e in self.discovery if e.kind == "links"}
        legacy = tuple(DiscoveryEntry("links", u, self.link_pattern) for u in self.listings if u not in have)
        if legacy:
            object.__setattr__(self, "discovery", tuple(self.discovery) + legacy)


def _url_problem(where: str, what: str, u: object, hosts: list) -> str | None:
    """Why ``u`` cannot be a URL of this source (None if it can): not http(s), not what the fetcher's URL
    policy accepts (whitespace, a control character, a backslash, userinfo, parsers that disagree: it would
    be refused on every fetch), or on a host not in ``hosts``."""
    try:
        parts = urlsplit(u) if isinstance(u, str) else None
        ok = parts is not None and parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        return f"{where}: {what} {u!r} is not an http(s) URL"
    try:
        UrlPolicy((), resolve=False).parse(u)
    except ValueError as exc:
        return f"{where}: {what} {u!r} would be refused by the fetcher ({exc})"
    if hosts and parts.hostname not in hosts and parts.netloc not in hosts:
        return f"{where}: {what} {u} is on host {parts.hostname}, not in hosts {hosts}"
    return None


def _regex_problem(where: str, what: str, pattern: object) -> str | None:
    try:
        re.compile(pattern)
    except (re.error, TypeError) as exc:
        return f"{where}: {what} does not compile: {exc}"
    return None


def _entry_problems(where: str, j: int, d: object, hosts: list, has_pattern: bool) -> list[str]:
    """Problems of discovery entry ``j`` (a mapping from YAML) of the source named in ``where``."""
    at = f"{where}: discovery entry {j}"
    if not isinstance(d, dict):
        return [f"{at}: not a mapping"]
    kind = d.get("kind")
    at = f"{at} ({kind})"
    out = [f"{at}: unknown key {k!r}" for k in sorted(set(d) - _ENTRY_KEYS, key=str)]
    if kind not in DISCOVERY_KINDS:
        out.append(f"{at}: kind must be one of {', '.join(DISCOVERY_KINDS)}")
    url = d.get("url")
    if not (kind == "sitemap" and url == ROBOTS):
        p = _url_problem(at, "url", url, hosts)
        out += [p] if p else []
    if d.get("link_pattern") is not None:
        p = _regex_problem(at, "link_pattern", d["link_pattern"])
        out += [p] if p else []
    elif kind in ("paged", "links") and not has_pattern:
        out.append(f"{at}: a {kind} entry needs a link_pattern (on the entry or the source)")
    for key, low in (("max_pages", 1), ("first_page", 0)):
        v = d.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < low):
            out.append(f"{at}: {key} must be an integer >= {low}, not {v!r}")
    if d.get("page_param") is not None and (kind != "paged" or not isinstance(d["page_param"], str)
                                            or not re.fullmatch(r"[A-Za-z0-9_.\-]+", d["page_param"])):
        out.append(f"{at}: page_param must be a query parameter name, on a paged entry only")
    if d.get("checked_live") is not None and not isinstance(d["checked_live"], bool):
        out.append(f"{at}: checked_live must be true or false")
    if d.get("note") is not None and not isinstance(d["note"], str):
        out.append(f"{at}: note must be a string")
    return out


def _since(value: object) -> dt.date | None:
    """The ``since`` cut-off as a date. Raises ValueError for anything but an ISO date."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        return dt.date.fromisoformat(value.strip())
    raise ValueError(f"{value!r} is not an ISO date")


def _discovery_problems(where: str, e: dict, hosts: list) -> list[str]:
    out = []
    entries = e.get("discovery")
    if entries is not None and not isinstance(entries, list):
        out.append(f"{where}: discovery must be a list of entries")
        entries = []
    has_pattern = e.get("link_pattern") is not None
    out += [p for j, d in enumerate(entries or []) for p in _entry_problems(where, j, d, hosts, has_pattern)]
    try:
        _since(e.get("since"))
    except ValueError as exc:
        out.append(f"{where}: since must be an ISO date (YYYY-MM-DD): {exc}")
    return out


def _entries(e: dict) -> tuple[DiscoveryEntry, ...]:
    return tuple(DiscoveryEntry(kind=d["kind"], url=d["url"], link_pattern=d.get("link_pattern"),
                                max_pages=d.get("max_pages"), page_param=d.get("page_param") or "page",
                                first_page=1 if d.get("first_page") is None else d["first_page"],
                                checked_live=bool(d.get("checked_live")), note=d.get("note"))
                 for d in e.get("discovery") or ())


def _problems(i: int, e: object) -> list[str]:
    where = f"entry {i}"
    if not isinstance(e, dict):
        return [f"{where}: not a mapping"]
    where = f"entry {i} ({e.get('name') or 'unnamed'})"
    out = []
    if not isinstance(e.get("name"), str) or not e["name"].strip():
        out.append(f"{where}: name missing")
    hosts = e.get("hosts") or []
    needs_hosts = bool(e.get("seeds") or e.get("listings") or e.get("discovery"))
    if not isinstance(hosts, list) or (needs_hosts and not hosts) or not all(isinstance(h, str) and h for h in hosts):
        out.append(f"{where}: hosts must be a non-empty list of host names")
        hosts = []
    for key in ("seeds", "listings"):
        for u in e.get(key) or []:
            p = _url_problem(where, f"{key} entry", u, hosts)
            out += [p] if p else []
    if e.get("link_pattern") is not None:
        p = _regex_problem(where, "link_pattern", e["link_pattern"])
        out += [p] if p else []
    out += _discovery_problems(where, e, hosts)
    if e.get("extract") is not None and not isinstance(e["extract"], dict):
        out.append(f"{where}: extract must be a mapping")
    return out


def load_registry(path: str | os.PathLike = DEFAULT_REGISTRY) -> list[Source]:
    """Load and validate a registry file; every source carries the file's ``allow_private_addresses``.

    Raises:
        RegistryError: the file is missing or not YAML, ``sources`` is absent, an entry is invalid
            (bad URL, URL off the source's hosts, regex that does not compile, unknown discovery kind
            or key, bad ``since`` date...), or two entries share a name (every problem listed, one per
            line, naming the entry).
    """
    path = Path(path)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_Loader)  # noqa: S506 - a SafeLoader
    except (OSError, yaml.YAMLError) as exc:
        raise RegistryError(f"registry {path}: {exc}") from exc
    entries = (doc or {}).get("sources") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise RegistryError(f"registry {path}: top-level 'sources' list missing")
    allow_private = doc.get("allow_private_addresses", False)
    if not isinstance(allow_private, bool):
        raise RegistryError(f"registry {path}: allow_private_addresses must be true or false")
    problems = [p for i, e in enumerate(entries) for p in _problems(i, e)]
    names = [e.get("name") for e in entries if isinstance(e, dict)]
    problems += [f"duplicate source name {n!r}" for n in sorted({n for n in names if names.count(n) > 1})]
    if problems:
        raise RegistryError(f"registry {path}: {len(problems)} problem(s)\n" + "\n".join(problems))
    from crawler.csv_import import source_id

    return [Source(name=e["name"], id=e.get("id") or source_id(e["name"]), hosts=tuple(e["hosts"]),
                   seeds=tuple(e.get("seeds") or ()), listings=tuple(e.get("listings") or ()),
                   link_pattern=e.get("link_pattern"), extract=dict(e.get("extract") or {}), note=e.get("note"),
                   allow_private_addresses=allow_private, discovery=_entries(e), since=_since(e.get("since")))
            for e in entries]
