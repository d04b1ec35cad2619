"""A polite, bounded HTTP fetcher on requests (SPEC §2; Scrapy-like politeness).

Per host: robots.txt obeyed (protego), at most one request at a time and at least ``delay`` seconds
(or the robots Crawl-delay, capped at ``max_crawl_delay``) between requests. Hosts run in parallel
(the crawler gives each host its own worker). Retries with exponential backoff on 429, 5xx,
timeouts, connection errors and truncated bodies, honouring ``Retry-After`` (capped at
``max_retry_after``). Redirects are followed by hand (at most ``max_redirects``); every URL, the
first and each redirect target, passes one predicate (:class:`crawler.urlpolicy.UrlPolicy`).
Every request has a total deadline (connect + headers + body, :mod:`crawler.netguard`) besides the
per-read timeout; bodies, robots.txt included, are streamed and their decoded size capped
(``max_bytes``, ``max_robots_bytes``). Conditional GET with ETag / Last-Modified on refresh.

robots.txt follows RFC 9309 §2.3.1: redirects followed (at most ``max_robots_redirects``, each target
through the URL policy), 2xx parsed, other 4xx "unavailable" (everything allowed); 429, 5xx, a timeout
or a connection failure "unreachable": the whole site is disallowed (``robots_unreachable``) and
robots.txt is asked again after ``robots_retry`` seconds. A hostile response (a malformed redirect, a
broken chunked body) is that URL's failure with its reason (``bad_redirect``, ``bad_response``): the
fetcher never raises for what a server sends.
"""
from __future__ import annotations

import email.utils
import logging
import math
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from urllib.parse import urljoin, urlsplit

import requests
from protego import Protego

from crawler.netguard import Guard, Window, guarded_session
from crawler.urlpolicy import UrlPolicy
from storage.bounds import check_bounds

RETRY_STATUS = {429, 500, 502, 503, 504}
# content codings urllib3 decodes without optional packages (RFC 9110 §8.4.1); only these are advertised in
# Accept-Encoding, and a body in any other (br, zstd, ...) is the failure ``unsupported_encoding``, never kept raw
DECODED_CODINGS = ("gzip", "x-gzip", "deflate", "identity")
ACCEPT_ENCODING = "gzip, deflate"
REDIRECT_STATUS = {301, 302, 303, 307, 308}
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FetchConfig:
    """Politeness and safety settings. Times in seconds, sizes in bytes (decoded).

    ``deadline`` bounds one request in total (connect + headers + body), ``read_timeout`` one read;
    ``max_crawl_delay`` caps a robots Crawl-delay and ``max_retry_after`` a Retry-After (both logged
    when they cap); ``max_robots_bytes``: robots.txt beyond it is ignored (the first part is obeyed).
    """

    user_agent: str = "PolicyBERT-corpus-crawler/0.1 (policy-text research; obeys robots.txt)"
    connect_timeout: float = 10.0
    read_timeout: float = 30.0
    deadline: float = 300.0
    delay: float = 1.0
    retries: int = 3
    backoff: float = 1.0
    max_backoff: float = 60.0
    max_retry_after: float = 120.0
    max_crawl_delay: float = 30.0
    max_redirects: int = 5
    max_bytes: int = 50 * 1024 * 1024
    max_robots_bytes: int = 512 * 1024
    max_robots_redirects: int = 5
    robots_retry: float = 600.0
    obey_robots: bool = True

    def __post_init__(self):
        check_bounds(self, connect_timeout=(">", 0, 3600), read_timeout=(">", 0, 3600), deadline=(">", 0, 86400),
                     delay=(0, 3600), retries=(0, 100), backoff=(0, 3600), max_backoff=(0, 86400),
                     max_retry_after=(0, 86400), max_crawl_delay=(0, 86400), max_redirects=(0, 100),
                     max_bytes=(1, 1 << 40), max_robots_bytes=(1, 1 << 30), max_robots_redirects=(0, 100),
                     robots_retry=(0, 30 * 86400))


@dataclass
class FetchResult:
    """Outcome of one fetch. ``error`` is None on success (``status`` 200 or 304), else a reason
    such as ``robots_disallowed``, ``unregistered_host``, ``unsafe_url``, ``private_address``,
    ``redirect_loop``, ``too_large``, ``http_404``, ``timeout``, ``deadline``, ``connection_error``,
    ``truncated``, ``robots_unreachable``, ``bad_redirect``, ``bad_response``, ``unsupported_encoding``."""

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


@dataclass
class _Response:
    status: int
    headers: dict
    body: bytes | None


class _Host:
    """Per-host state: session, lock (concurrency 1), next allowed request time, robots rules."""

    def __init__(self, session: requests.Session):
        self.session = session
        self.lock = threading.Lock()
        self.next_time = 0.0
        self.robots: Protego | None = None
        self.robots_loaded = False
        self.robots_problem = ""      # why robots.txt is unreachable ("" when it was read or unavailable)
        self.robots_retry_at = 0.0    # monotonic time after which an unreachable robots.txt is asked again
        self.crawl_delay = 0.0


class _Fail(Exception):
    def __init__(self, reason: str, detail: str = "", retry_after: float | None = None, status: int | None = None):
        super().__init__(reason)
        self.reason, self.detail, self.retry_after, self.status = reason, detail, retry_after, status


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta seconds or an HTTP date); None if absent or invalid."""
    if not value:
        return None
    try:
        secs = float(value)
    except ValueError:
        try:
            parsed = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=timezone.utc)
        secs = (parsed - datetime.now(timezone.utc)).total_seconds()
    return max(0.0, secs) if math.isfinite(secs) else None


class Fetcher:
    """Fetch URLs of the registered ``hosts`` politely and within bounds (see module docstring).
    Thread-safe.

    Args:
        hosts: host names (or ``host:port``) that may be fetched, redirects included.
        before_request: optional ``f(netloc)`` called before every request (e.g. an orchestrator's
            rate limit for that host); it may block.
        allow_private: admit hosts on loopback/private/link-local addresses (the registry's
            ``allow_private_addresses``; local test servers).
    """

    def __init__(self, hosts, cfg: FetchConfig = FetchConfig(), before_request=None, allow_private: bool = False):
        self.policy = UrlPolicy(hosts, allow_private=allow_private)
        self.guard = Guard(allow_private)
        self.cfg = cfg
        self.before_request = before_request
        self._hosts: dict[str, _Host] = {}
        self._hosts_lock = threading.Lock()

    def _host(self, netloc: str) -> _Host:
        with self._hosts_lock:
            if netloc not in self._hosts:
                self._hosts[netloc] = _Host(guarded_session(self.guard, self.cfg.user_agent))
            return self._hosts[netloc]

    def is_allowed_host(self, url: str) -> bool:
        """True if ``url`` passes the URL policy (registered scheme/host/port, no userinfo, not ambiguous,
        not on a private address unless allowed)."""
        return self.policy.problem(url) is None

    def _read(self, resp: requests.Response, cap: int, w: Window, truncate: bool = False) -> bytes:
        """The decoded body, at most ``cap`` bytes: over it, ``too_large`` (or the first ``cap`` bytes
        if ``truncate``). Raises _Fail on a deadline, a cut connection or a decoding error."""
        codings = [c.strip().lower() for c in resp.headers.get("Content-Encoding", "").split(",") if c.strip()]
        unknown = [c for c in codings if c not in DECODED_CODINGS]
        if unknown:
            raise _Fail("unsupported_encoding", f"Content-Encoding {', '.join(unknown)[:80]} is not decoded "
                        f"(accepted: {ACCEPT_ENCODING})")
        length = resp.headers.get("Content-Length")
        if not truncate and length and length.isdigit() and int(length) > cap:
            raise _Fail("too_large", f"Content-Length {length} > {cap}")
        chunks, size = [], 0
        try:
            for chunk in resp.iter_content(64 * 1024):  # urllib3 decodes at most 64 KiB per read
                size += len(chunk)
                if size > cap:
                    if truncate:
                        chunks.append(chunk[: cap - (size - len(chunk))])
                        log.warning("%s: body over %d bytes, first %d bytes kept", resp.url, cap, cap)
                        break
                    raise _Fail("too_large", f"body over {cap} bytes (decoded)")
                chunks.append(chunk)
        except (requests.exceptions.ChunkedEncodingError, requests.exceptions.ContentDecodingError,
                requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            if w.expired:
                raise _Fail("deadline", f"body not read within {self.cfg.deadline} s") from exc
            if isinstance(exc, requests.exceptions.Timeout):
                raise _Fail("timeout", str(exc)[:200]) from exc
            raise _Fail("truncated", str(exc)[:200]) from exc
        except (ValueError, OSError, requests.exceptions.RequestException) as exc:  # e.g. a negative chunk size
            raise _Fail("bad_response", f"{type(exc).__name__}: {exc}"[:200]) from exc
        if w.expired:  # the socket was shut: the body may look complete but is not
            raise _Fail("deadline", f"response not read within {self.cfg.deadline} s")
        return b"".join(chunks)

    def _request(self, host: _Host, url: str, headers: dict, cap: int, truncate: bool = False) -> _Response:
        """One polite, bounded request (holding the host lock, after the host's delay). The body is
        read for 2xx responses other than 304 only. Raises _Fail."""
        with host.lock:
            if self.before_request is not None:
                self.before_request(urlsplit(url).netloc)
            wait = host.next_time - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                with self.guard.window(self.cfg.deadline) as w:
                    try:
                        resp = host.session.get(url, headers={"Accept-Encoding": ACCEPT_ENCODING, **headers},
                                                allow_redirects=False, stream=True,
                                                timeout=(self.cfg.connect_timeout, self.cfg.read_timeout))
                    except (requests.exceptions.RequestException, ValueError, OSError) as exc:
                        if w.blocked:
                            raise _Fail("private_address", f"{url}: {w.blocked}") from exc
                        if w.expired:
                            raise _Fail("deadline", f"no response within {self.cfg.deadline} s") from exc
                        if isinstance(exc, requests.exceptions.Timeout):
                            raise _Fail("timeout", str(exc)[:200]) from exc
                        if not isinstance(exc, (requests.exceptions.ConnectionError, OSError)):
                            raise _Fail("bad_response", f"{type(exc).__name__}: {exc}"[:200]) from exc
                        raise _Fail("connection_error", str(exc)[:200]) from exc
                    try:
                        status = resp.status_code
                        body = None
                        if 200 <= status < 300 and status != 304:
                            body = self._read(resp, cap, w, truncate)
                        elif w.expired:
                            raise _Fail("deadline", f"headers not read within {self.cfg.deadline} s")
                        return _Response(status, dict(resp.headers), body)
                    finally:
                        resp.close()
            finally:
                host.next_time = time.monotonic() + max(self.cfg.delay, host.crawl_delay)

    def _read_robots(self, url: str) -> tuple[Protego | None, str]:
        """robots.txt of ``url``'s site per RFC 9309 §2.3.1: ``(rules, "")`` when read or unavailable (4xx:
        everything allowed), ``(None, why)`` when unreachable (429, 5xx, network failure, a redirect the URL
        policy refuses or that cannot be parsed)."""
        p = urlsplit(url)
        current = f"{p.scheme}://{p.netloc}/robots.txt"
        for _ in range(self.cfg.max_robots_redirects + 1):
            problem = self.policy.problem(current)
            if problem is not None:
                return None, f"robots.txt at {current} refused ({problem[0]})"
            try:
                r = self._request(self._host(urlsplit(current).netloc), current, {}, self.cfg.max_robots_bytes,
                                  truncate=True)
            except _Fail as f:
                return None, f"robots.txt {f.reason}: {f.detail}"[:300]
            if r.status in REDIRECT_STATUS:
                try:
                    current = urljoin(current, r.headers.get("Location", ""))
                except ValueError as exc:
                    return None, f"robots.txt redirect unparseable: {exc}"
                continue
            if r.status == 429 or r.status >= 500:
                return None, f"robots.txt http_{r.status}"
            text = r.body.decode("utf-8", "replace") if 200 <= r.status < 300 and r.body else ""
            return Protego.parse(text), ""
        log.info("%s: robots.txt redirected more than %d times, read as unavailable", p.netloc,
                 self.cfg.max_robots_redirects)
        return Protego.parse(""), ""

    def _robots(self, host: _Host, url: str) -> Protego | None:
        """The robots rules of ``url``'s host (read once; asked again ``robots_retry`` s after it was
        unreachable). None when robots are not obeyed; ``host.robots_problem`` set while unreachable."""
        if not self.cfg.obey_robots:
            return None
        if not host.robots_loaded or (host.robots_problem and time.monotonic() >= host.robots_retry_at):
            netloc = urlsplit(url).netloc
            rules, problem = self._read_robots(url)
            host.robots_problem, host.robots_loaded = problem, True
            if rules is None:
                log.warning("%s: %s: the site is disallowed, robots.txt asked again in %s s", netloc, problem,
                            self.cfg.robots_retry)
                host.robots_retry_at = time.monotonic() + self.cfg.robots_retry
                host.robots = Protego.parse("User-agent: *\nDisallow: /\n")
                return host.robots
            host.robots = rules
            delay = rules.crawl_delay(self.cfg.user_agent) or 0.0
            if delay > self.cfg.max_crawl_delay:
                log.warning("%s: robots Crawl-delay %s s capped at %s s", netloc, delay, self.cfg.max_crawl_delay)
                delay = self.cfg.max_crawl_delay
            host.crawl_delay = delay
        return host.robots

    def _once(self, url: str, validators: dict | None) -> FetchResult:
        seen = [url]
        current = url
        for _ in range(self.cfg.max_redirects + 1):
            problem = self.policy.problem(current)
            if problem is not None:
                raise _Fail(*problem)
            host = self._host(urlsplit(current).netloc)
            robots = self._robots(host, current)
            if host.robots_problem and robots is not None:
                raise _Fail("robots_unreachable", f"{current}: {host.robots_problem}")
            if robots is not None and not robots.can_fetch(current, self.cfg.user_agent):
                raise _Fail("robots_disallowed", current)
            headers = {}
            if validators and current == url:
                if validators.get("etag"):
                    headers["If-None-Match"] = validators["etag"]
                if validators.get("last_modified"):
                    headers["If-Modified-Since"] = validators["last_modified"]
            resp = self._request(host, current, headers, self.cfg.max_bytes)
            status = resp.status
            if status in REDIRECT_STATUS:
                try:
                    nxt = urljoin(current, resp.headers.get("Location", ""))
                except ValueError as exc:  # e.g. "http://[::1/x": Invalid IPv6 URL
                    raise _Fail("bad_redirect", f"Location {resp.headers.get('Location', '')[:200]!r}: {exc}",
                                status=status) from exc
                if nxt in seen:
                    raise _Fail("redirect_loop", " -> ".join(seen + [nxt]))
                seen.append(nxt)
                current = nxt
                continue
            if status in RETRY_STATUS:
                raise _Fail(f"http_{status}", "", retry_after=_retry_after(resp.headers.get("Retry-After")),
                            status=status)
            if status == 304:
                return FetchResult(url, current, 304, resp.headers)
            if status >= 300:
                raise _Fail(f"http_{status}", status=status)
            return FetchResult(url, current, status, resp.headers, resp.body)
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
                try:
                    res = self._once(url, validators)
                except _Fail:
                    raise
                except Exception as exc:  # noqa: BLE001 - what a hostile server sends is this URL's failure only
                    raise _Fail("bad_response", f"{type(exc).__name__}: {exc}"[:300]) from exc
                res.attempts = attempts
                res.fetched_at = datetime.now(timezone.utc).isoformat(timespec="seconds")
                return res
            except _Fail as f:
                retryable = f.reason in ("timeout", "connection_error", "truncated") or (f.status in RETRY_STATUS)
                if not retryable or attempts > self.cfg.retries:
                    return FetchResult(url, None, f.status, error=f.reason, detail=f.detail, attempts=attempts,
                                       fetched_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
                wait = min(self.cfg.backoff * 2 ** (attempts - 1), self.cfg.max_backoff)
                if f.retry_after is not None:
                    if f.retry_after > self.cfg.max_retry_after:
                        log.warning("%s: Retry-After %.0f s capped at %s s", url, f.retry_after,
                                    self.cfg.max_retry_after)
                    wait = max(wait, min(f.retry_after, self.cfg.max_retry_after))
                time.sleep(wait)
