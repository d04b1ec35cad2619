"""A polite HTTP fetcher on requests (SPEC §2; Scrapy-like politeness).

Per host: one ``requests.Session``, robots.txt obeyed (protego), at most one request at a time and
at least ``delay`` seconds (or the robots Crawl-delay, if larger) between requests. Hosts run in
parallel (the crawler gives each host its own worker). Retries with exponential backoff on 429,
5xx, timeouts, connection errors and truncated bodies, honouring ``Retry-After``. Redirects are
followed by hand (at most ``max_redirects``) and only to registered hosts. Bodies are streamed and
cut off at ``max_bytes``. Conditional GET with ETag / Last-Modified on refresh.
"""
from __future__ import annotations

import email.utils
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urljoin, urlsplit

import requests
from protego import Protego

RETRY_STATUS = {429, 500, 502, 503, 504}


@dataclass(frozen=True)
class FetchConfig:
    """Politeness and safety settings. Times in seconds, sizes in bytes."""

    user_agent: str = "PolicyBERT-corpus-crawler/0.1 (policy-text research; obeys robots.txt)"
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    delay: float = 1.0
    retries: int = 3
    backoff: float = 1.0
    max_backoff: float = 60.0
    max_retry_after: float = 120.0
    max_redirects: int = 5
    max_bytes: int = 50 * 1024 * 1024
    obey_robots: bool = True


@dataclass
class FetchResult:
    """Outcome of one fetch. ``error`` is None on success (``status`` 200 or 304), else a reason
    such as ``robots_disallowed``, ``unregistered_host``, ``redirect_loop``, ``too_large``,
    ``http_404``, ``timeout``, ``connection_error``, ``truncated``."""

    url: str
    final_url: str | None = None
    status: int | None = None
    headers: dict = field(default_factory=dict)
    body: bytes | None = None
    fetched_at: str = ""
    error: str | None = None
    detail: str = ""
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def not_modified(self) -> bool:
        return self.status == 304


class _Host:
    """Per-host state: session, lock (concurrency 1), next allowed request time, robots rules."""

    def __init__(self, user_agent: str):
        self.session = requests.Session()
        self.session.headers["User-Agent"] = user_agent
        self.lock = threading.Lock()
        self.next_time = 0.0
        self.robots: Protego | None = None
        self.robots_loaded = False


class _Fail(Exception):
    def __init__(self, reason: str, detail: str = "", retry_after: float | None = None, status: int | None = None):
        super().__init__(reason)
        self.reason, self.detail, self.retry_after, self.status = reason, detail, retry_after, status


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value)
        return max(0.0, (parsed - datetime.now(timezone.utc)).total_seconds()) if parsed else None


class Fetcher:
    """Fetch URLs of the registered ``hosts`` politely (see module docstring). Thread-safe.

    Args:
        hosts: host names (or ``host:port``) that may be fetched, redirects included.
        before_request: optional ``f(netloc)`` called before every request (e.g. an orchestrator's
            rate limit for that host); it may block.
    """

    def __init__(self, hosts, cfg: FetchConfig = FetchConfig(), before_request=None):
        self.allowed = set(hosts)
        self.cfg = cfg
        self.before_request = before_request
        self._hosts: dict[str, _Host] = {}
        self._hosts_lock = threading.Lock()

    def _host(self, netloc: str) -> _Host:
        with self._hosts_lock:
            if netloc not in self._hosts:
                self._hosts[netloc] = _Host(self.cfg.user_agent)
            return self._hosts[netloc]

    def is_allowed_host(self, url: str) -> bool:
        p = urlsplit(url)
        return p.scheme in ("http", "https") and (p.hostname in self.allowed or p.netloc in self.allowed)

    def _request(self, host: _Host, url: str, headers: dict) -> requests.Response:
        """One polite request (holding the host lock, waiting for the host's delay)."""
        with host.lock:
            if self.before_request is not None:
                self.before_request(urlsplit(url).netloc)
            wait = host.next_time - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                return host.session.get(url, headers=headers, allow_redirects=False, stream=True,
                                        timeout=(self.cfg.connect_timeout, self.cfg.read_timeout))
            finally:
                delay = self.cfg.delay
                if host.robots is not None:
                    delay = max(delay, host.robots.crawl_delay(self.cfg.user_agent) or 0.0)
                host.next_time = time.monotonic() + delay

    def _robots(self, host: _Host, url: str) -> Protego | None:
        if not self.cfg.obey_robots:
            return None
        if not host.robots_loaded:
            p = urlsplit(url)
            try:
                r = self._request(host, f"{p.scheme}://{p.netloc}/robots.txt", {})
                text = r.content[: 512 * 1024].decode("utf-8", "replace") if r.status_code == 200 else ""
                r.close()
            except requests.RequestException:
                text = ""  # unreachable robots.txt: allow, as Scrapy does
            host.robots = Protego.parse(text)
            host.robots_loaded = True
        return host.robots

    def _read(self, resp: requests.Response) -> bytes:
        length = resp.headers.get("Content-Length")
        if length and length.isdigit() and int(length) > self.cfg.max_bytes:
            resp.close()
            raise _Fail("too_large", f"Content-Length {length} > {self.cfg.max_bytes}")
        chunks, size = [], 0
        try:
            for chunk in resp.iter_content(64 * 1024):
                size += len(chunk)
                if size > self.cfg.max_bytes:
                    raise _Fail("too_large", f"body over {self.cfg.max_bytes} bytes")
                chunks.append(chunk)
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError,
                requests.exceptions.ConnectionError) as exc:
            raise _Fail("truncated", str(exc)[:200]) from exc
        finally:
            resp.close()
        return b"".join(chunks)

    def _once(self, url: str, validators: dict | None) -> FetchResult:
        seen = [url]
        current = url
        for _ in range(self.cfg.max_redirects + 1):
            if not self.is_allowed_host(current):
                raise _Fail("unregistered_host", f"{current} is not on a registered host")
            host = self._host(urlsplit(current).netloc)
            robots = self._robots(host, current)
            if robots is not None and not robots.can_fetch(current, self.cfg.user_agent):
                raise _Fail("robots_disallowed", current)
            headers = {}
            if validators and current == url:
                if validators.get("etag"):
                    headers["If-None-Match"] = validators["etag"]
                if validators.get("last_modified"):
                    headers["If-Modified-Since"] = validators["last_modified"]
            try:
                resp = self._request(host, current, headers)
            except requests.exceptions.Timeout as exc:
                raise _Fail("timeout", str(exc)[:200]) from exc
            except requests.exceptions.ConnectionError as exc:
                raise _Fail("connection_error", str(exc)[:200]) from exc
            if resp.is_redirect or resp.status_code in (301, 302, 303, 307, 308):
                nxt = urljoin(current, resp.headers.get("Location", ""))
                resp.close()
                if nxt in seen:
                    raise _Fail("redirect_loop", " -> ".join(seen + [nxt]))
                seen.append(nxt)
                current = nxt
                continue
            status = resp.status_code
            if status in RETRY_STATUS:
                ra = _retry_after(resp.headers.get("Retry-After"))
                resp.close()
                raise _Fail(f"http_{status}", "", retry_after=ra, status=status)
            if status == 304:
                resp.close()
                return FetchResult(url, current, 304, dict(resp.headers))
            if status >= 400:
                resp.close()
                raise _Fail(f"http_{status}", status=status)
            return FetchResult(url, current, status, dict(resp.headers), self._read(resp))
        raise _Fail("too_many_redirects", " -> ".join(seen))

    def fetch(self, url: str, validators: dict | None = None) -> FetchResult:
        """Fetch ``url`` with retries; never raises for network or HTTP problems.

        Args:
            validators: ``{"etag": ..., "last_modified": ...}`` from an earlier fetch (conditional GET).
        """
        attempts = 0
        while True:
            attempts += 1
            try:
                res = self._once(url, validators)
                res.attempts = attempts
                res.fetched_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
                return res
            except _Fail as f:
                retryable = f.reason in ("timeout", "connection_error", "truncated") or (f.status in RETRY_STATUS)
                if not retryable or attempts > self.cfg.retries:
                    return FetchResult(url, None, f.status, error=f.reason, detail=f.detail, attempts=attempts,
                                       fetched_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
                wait = self.cfg.backoff * 2 ** (attempts - 1)
                if f.retry_after is not None:
                    wait = max(wait, min(f.retry_after, self.cfg.max_retry_after))
                time.sleep(min(wait, self.cfg.max_backoff if f.retry_after is None else self.cfg.max_retry_after))
