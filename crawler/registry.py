"""The source registry (``crawler/sources.yaml``): data, validated on load.

Each entry: ``name`` (the channel), ``id``, ``hosts`` (the only hosts the crawler may fetch for it,
redirects included; may be empty only for an entry with no URLs yet), ``seeds`` (document URLs), optional ``listings`` (pages whose links matching
``link_pattern`` are new documents) and ``extract`` hints (``expect: pdf|html|mixed``, ``body``: a
CSS selector for the article body).

Top level: ``allow_private_addresses`` (default false): let the crawler fetch hosts that resolve to
loopback, private or link-local addresses (local test servers); off, such hosts are refused (SSRF).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml

DEFAULT_REGISTRY = Path(__file__).with_name("sources.yaml")


class RegistryError(ValueError):
    """One or more registry entries are invalid; the message lists each problem on its own line."""


@dataclass(frozen=True)
class Source:
    """A crawl source (see module docstring)."""

    name: str
    id: str
    hosts: tuple[str, ...]
    seeds: tuple[str, ...] = ()
    listings: tuple[str, ...] = ()
    link_pattern: str | None = None
    extract: dict = field(default_factory=dict)
    note: str | None = None
    allow_private_addresses: bool = False


def _problems(i: int, e: object) -> list[str]:
    where = f"entry {i}"
    if not isinstance(e, dict):
        return [f"{where}: not a mapping"]
    where = f"entry {i} ({e.get('name') or 'unnamed'})"
    out = []
    if not isinstance(e.get("name"), str) or not e["name"].strip():
        out.append(f"{where}: name missing")
    hosts = e.get("hosts") or []
    needs_hosts = bool(e.get("seeds") or e.get("listings"))
    if not isinstance(hosts, list) or (needs_hosts and not hosts) or not all(isinstance(h, str) and h for h in hosts):
        out.append(f"{where}: hosts must be a non-empty list of host names")
        hosts = []
    for key in ("seeds", "listings"):
        for u in e.get(key) or []:
            parts = urlsplit(u) if isinstance(u, str) else None
            if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
                out.append(f"{where}: {key} entry {u!r} is not an http(s) URL")
            elif hosts and parts.hostname not in hosts and parts.netloc not in hosts:
                out.append(f"{where}: {key} entry {u} is on host {parts.hostname}, not in hosts {hosts}")
    if e.get("link_pattern") is not None:
        try:
            re.compile(e["link_pattern"])
        except (re.error, TypeError) as exc:
            out.append(f"{where}: link_pattern does not compile: {exc}")
    if e.get("extract") is not None and not isinstance(e["extract"], dict):
        out.append(f"{where}: extract must be a mapping")
    return out


def load_registry(path: str | os.PathLike = DEFAULT_REGISTRY) -> list[Source]:
    """Load and validate a registry file; every source carries the file's ``allow_private_addresses``.

    Raises:
        RegistryError: the file is missing or not YAML, ``sources`` is absent, an entry is invalid,
            or two entries share a name (every problem listed).
    """
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
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
                   allow_private_addresses=allow_private)
            for e in entries]
