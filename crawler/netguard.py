"""A requests session whose every request has a total deadline and connects only to allowed addresses.

requests' ``timeout`` bounds each socket operation, not a request: a server that sends one byte
every few seconds (in the headers or the body) is never timed out. Here each request runs inside
:meth:`Guard.window`: a timer shuts the request's socket down when the deadline (connect + headers
+ body, seconds) passes, and :attr:`Window.expired` tells the caller why the read ended. The
connection classes also check the connected peer address against :func:`crawler.urlpolicy.
address_problem` before anything is sent (unless private addresses are allowed), which defeats a
host name that resolves to a public address at check time and a private one at connect time.
"""
from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field
from typing import Iterator

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import NewConnectionError

from crawler.urlpolicy import address_problem


@dataclass
class Window:
    """One request's deadline state: ``expired`` once the deadline passed; ``blocked`` the reason
    a connection was refused (peer address not allowed), else None."""

    expired: bool = False
    blocked: str | None = None
    sock: socket.socket | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def attach(self, sock: socket.socket | None) -> None:
        """Make ``sock`` the socket the deadline shuts down (shut at once if already expired)."""
        with self.lock:
            self.sock = sock
            expired = self.expired
        if expired and sock is not None:
            _shutdown(sock)

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            sock = self.sock
        if sock is not None:
            _shutdown(sock)


def _shutdown(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


class Guard:
    """Deadline windows by thread (requests is synchronous: a request runs in the calling thread)
    and the peer-address rule. Thread-safe."""

    def __init__(self, allow_private: bool):
        self.allow_private = allow_private
        self._windows: dict[int, Window] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def window(self, deadline: float) -> Iterator[Window]:
        """Run one request (connect, headers and body read) within ``deadline`` seconds."""
        w = Window()
        timer = threading.Timer(deadline, w.expire)
        timer.daemon = True
        with self._lock:
            self._windows[threading.get_ident()] = w
        timer.start()
        try:
            yield w
        finally:
            timer.cancel()
            with self._lock:
                self._windows.pop(threading.get_ident(), None)

    def current(self) -> Window | None:
        with self._lock:
            return self._windows.get(threading.get_ident())

    def on_connect(self, conn, sock: socket.socket) -> None:
        """Called with every new socket: refuse a disallowed peer, attach it to the deadline."""
        w = self.current()
        if not self.allow_private:
            peer = sock.getpeername()[0]
            why = address_problem(peer)
            if why:
                if w is not None:
                    w.blocked = f"connected to {why}"
                raise NewConnectionError(conn, f"refused: connected to {why}")
        if w is not None:
            w.attach(sock)

    def on_reuse(self, conn) -> None:
        """Called with every pooled connection taken for a request: attach its socket."""
        w = self.current()
        if w is not None and getattr(conn, "sock", None) is not None:
            w.attach(conn.sock)


def _pool_classes(guard: Guard) -> dict:
    def conn_cls(base):
        class Conn(base):
            def _new_conn(self):
                sock = super()._new_conn()
                try:
                    guard.on_connect(self, sock)
                except BaseException:
                    sock.close()
                    raise
                return sock
        return Conn

    def pool_cls(base, conn_base):
        class Pool(base):
            ConnectionCls = conn_cls(conn_base)

            def _get_conn(self, timeout=None):
                conn = super()._get_conn(timeout)
                guard.on_reuse(conn)
                return conn
        return Pool

    return {"http": pool_cls(HTTPConnectionPool, HTTPConnection),
            "https": pool_cls(HTTPSConnectionPool, HTTPSConnection)}


def guarded_session(guard: Guard, user_agent: str) -> requests.Session:
    """A requests session (environment proxies ignored) whose connections go through ``guard``."""
    s = requests.Session()
    s.trust_env = False  # a proxy would connect for us: the peer check would see the proxy
    s.headers["User-Agent"] = user_agent
    classes = _pool_classes(guard)
    for prefix in ("http://", "https://"):
        adapter = HTTPAdapter(max_retries=0)
        adapter.poolmanager.pool_classes_by_scheme = dict(classes)
        s.mount(prefix, adapter)
    return s
