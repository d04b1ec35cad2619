"""Which URLs the crawler may request: one predicate for every request and every redirect.

A URL passes :meth:`UrlPolicy.problem` only if

- it parses the same way with urllib3's ``parse_url`` (the parser requests connects with) and with
  ``urllib.parse.urlsplit`` (a URL the two parsers read differently, e.g. ``http://a:1\\@b/``, is
  refused), and holds no whitespace, control characters or backslash;
- its scheme is ``http`` or ``https`` and it carries no userinfo (``user:pass@``);
- its host is registered, on a registered port: a host registered by bare name admits only the
  default ports (80, 443); ``host:port`` admits that port only;
- every address its host resolves to is public, unless the registry allows private addresses
  (``allow_private_addresses: true``, for local test servers): loopback, private, link-local,
  shared, multicast, reserved and unspecified addresses are refused.

The address check is repeated on the connected socket (:mod:`crawler.netguard`), so a host that
resolves differently between the check and the connect (DNS rebinding) is still refused.
"""
from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from urllib3.exceptions import LocationParseError
from urllib3.util import parse_url

DEFAULT_PORTS = {"http": 80, "https": 443}
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


def _norm_host(host: str | None) -> str:
    return (host or "").strip("[]").rstrip(".").lower()


def address_problem(ip: str) -> str | None:
    """Why ``ip`` (a literal address) is not a public unicast address, or None if it is."""
    addr = ipaddress.ip_address(ip.split("%")[0])
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    for name in ("loopback", "private", "link_local", "multicast", "reserved", "unspecified"):
        if getattr(addr, f"is_{name}"):
            return f"{ip} is a {name.replace('_', '-')} address"
    if not addr.is_global:
        return f"{ip} is not a global address"
    return None


class UrlPolicy:
    """The allow-list of registered hosts (see module docstring).

    Args:
        hosts: registered host names, each ``host`` or ``host:port``.
        allow_private: admit hosts that resolve to loopback/private/link-local addresses.
        resolve: resolve host names (``socket.getaddrinfo``) to check their addresses; False only
            checks literal IP hosts (the connect-time check in :mod:`crawler.netguard` still runs).
    """

    def __init__(self, hosts, allow_private: bool = False, resolve: bool = True):
        self.allow_private = allow_private
        self.resolve = resolve
        self._ports: dict[str, set[int] | None] = {}  # host -> registered ports (None: default ports)
        for entry in hosts:
            try:
                p = urlsplit(f"//{entry.strip()}")
                host, port = _norm_host(p.hostname), p.port
            except ValueError:  # not host[:port]: matches nothing a URL can name
                continue
            if port is None:
                self._ports.setdefault(host, None)
            else:
                ports = self._ports.get(host) or set()
                ports.add(port)
                self._ports[host] = ports

    def parse(self, url: str) -> tuple[str, str, int]:
        """``(scheme, host, port)`` of ``url`` as requests will connect to it.

        Raises:
            ValueError: the URL does not parse, or the two parsers disagree (message says how).
        """
        if _BAD_CHARS.search(url):
            raise ValueError("URL holds whitespace, a control character or a backslash")
        try:
            u = parse_url(url)
            s = urlsplit(url)
            s_port = s.port
        except (LocationParseError, ValueError) as exc:
            raise ValueError(f"unparseable URL: {exc}") from exc
        scheme = (u.scheme or "").lower()
        if scheme not in DEFAULT_PORTS or (s.scheme or "").lower() != scheme:
            raise ValueError(f"scheme {u.scheme!r} is not http(s)")
        if u.auth is not None or s.username is not None or "@" in (s.netloc or ""):
            raise ValueError("URL carries userinfo (user@host)")
        host = _norm_host(u.host)
        if not host or host != _norm_host(s.hostname):
            raise ValueError(f"parsers disagree on the host ({u.host!r} vs {s.hostname!r})")
        if u.port != s_port:
            raise ValueError(f"parsers disagree on the port ({u.port} vs {s_port})")
        return scheme, host, u.port or DEFAULT_PORTS[scheme]

    def problem(self, url: str) -> tuple[str, str] | None:
        """None if ``url`` may be requested, else ``(reason, detail)`` with reason one of
        ``unsafe_url`` (unparseable, ambiguous, userinfo, not http(s)), ``unregistered_host``
        (host or port not registered) or ``private_address``. Resolves the host name (blocking)."""
        try:
            scheme, host, port = self.parse(url)
        except ValueError as exc:
            return "unsafe_url", f"{url!r}: {exc}"
        if host not in self._ports:
            return "unregistered_host", f"{url} is not on a registered host"
        ports = self._ports[host]
        if (ports is None and port != DEFAULT_PORTS[scheme]) or (ports is not None and port not in ports):
            return "unregistered_host", f"{url}: port {port} is not registered for {host}"
        if self.allow_private:
            return None
        try:
            ips = [host] if _is_ip(host) else (
                [ai[4][0] for ai in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)] if self.resolve else [])
        except OSError as exc:
            return "connection_error", f"{host}: cannot resolve ({exc})"
        for ip in ips:
            why = address_problem(ip)
            if why:
                return "private_address", f"{url}: {host} resolves to {why}"
        return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False
