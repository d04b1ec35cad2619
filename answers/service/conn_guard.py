"""A deadline on a request's head and a bound on connections apart from requests (SPEC §9, serving bounds).

uvicorn's ``limit_concurrency`` counts open connections and requests in flight together and gives a
connection that sends nothing (or trickles header lines, each byte re-arming nothing) no deadline, so a few
dozen idle sockets make every other request 503 (a slowloris: R. Hansen, 2009). :class:`GuardedH11Protocol`
is uvicorn's h11 protocol with three changes:

- a connection must complete its request line and headers within ``header_timeout_s`` seconds of connecting,
  or of its last response on keep-alive; else it is closed (no response: the client sent no request);
- at most ``max_connections`` connections are open; one more closes the oldest idle connection (no request
  in progress) or, when every open connection is busy, the new one;
- at most ``max_requests`` requests run at once (more are answered 503), counted apart from connections.

Pass it to uvicorn as ``uvicorn.Config(http=guarded_protocol(ConnectionBounds(...)))`` with
``limit_concurrency=None`` (the bounds here replace it).
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import h11
from uvicorn.protocols.http.flow_control import service_unavailable
from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionBounds:
    """``header_timeout_s`` (seconds) to complete a request head, ``max_connections`` open at once,
    ``max_requests`` in flight at once (more: 503)."""

    header_timeout_s: float = 10.0
    max_connections: int = 1024
    max_requests: int = 64

    def __post_init__(self):
        if not (self.header_timeout_s > 0 and self.max_connections >= 1 and self.max_requests >= 1):
            raise ValueError(f"connection bounds must be positive, got {self}")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's :class:`~uvicorn.protocols.http.h11_impl.H11Protocol` under :class:`ConnectionBounds`
    (see the module's docstring); built by uvicorn with the ``bounds`` bound by :func:`guarded_protocol`."""

    def __init__(self, *args, bounds: ConnectionBounds = ConnectionBounds(), **kwargs):
        super().__init__(*args, **kwargs)
        self.bounds = bounds
        self.inner_app, self.app = self.app, self._bounded_app
        self.head_timer = None

    async def _bounded_app(self, scope, receive, send):
        # this request's task is already in self.tasks when it starts
        if len(self.tasks) > self.bounds.max_requests:
            log.warning("over %d requests in flight: 503", self.bounds.max_requests)
            return await service_unavailable(scope, receive, send)
        return await self.inner_app(scope, receive, send)

    def _arm(self) -> None:
        self._disarm()
        self.head_timer = self.loop.call_later(self.bounds.header_timeout_s, self._head_late)

    def _disarm(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None

    def _head_late(self) -> None:
        self.head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()

    def idle(self) -> bool:
        """True when no request is in progress on this connection (waiting for, or reading, a head)."""
        return self.conn.their_state is h11.IDLE and (self.cycle is None or self.cycle.response_complete)

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()
        if len(self.connections) > self.bounds.max_connections:
            idle = [c for c in self.connections if c is not self and isinstance(c, GuardedH11Protocol) and c.idle()]
            victim = min(idle, key=lambda c: c.since) if idle else self
            victim.transport.close()
        self.since = self.loop.time()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE:  # the request line and headers are in
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self.since = self.loop.time()
            self._arm()


def guarded_protocol(bounds: ConnectionBounds):
    """What ``uvicorn.Config(http=...)`` takes: :class:`GuardedH11Protocol` bound to ``bounds`` (picklable,
    so ``--workers`` processes get it)."""
    return functools.partial(GuardedH11Protocol, bounds=bounds)
