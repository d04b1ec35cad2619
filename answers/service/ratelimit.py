"""Rate limits of the answer service (SPEC §9) with the ``limits`` package: a moving window per API key and
per client address, in memory (each worker process counts its own: with ``--workers N`` a client gets up to
N times the rate when its requests spread over the workers).

A request over either limit is answered 429 with ``Retry-After`` (whole seconds until the window frees a
hit) and a JSON ``{"error": ...}`` naming the limit.
"""
from __future__ import annotations

import math
import time

from limits import parse_many
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter


class RateLimits:
    """``per_key`` and ``per_address`` rates as ``limits`` strings (``"60/minute"``, ``"5/second;100/hour"``;
    None: no limit).

    Raises:
        ValueError: a rate string ``limits`` cannot parse.
    """

    def __init__(self, per_key: str | None = "60/minute", per_address: str | None = "60/minute"):
        self.limiter = MovingWindowRateLimiter(MemoryStorage())
        self.per_key = self._parse(per_key)
        self.per_address = self._parse(per_address)

    @staticmethod
    def _parse(text):
        if not text:
            return []
        try:
            return parse_many(text)
        except ValueError as exc:
            raise ValueError(f"rate {text!r} is not a rate like '60/minute' ({exc})") from None

    def hit(self, key_name: str | None, address: str | None) -> tuple[str, int] | None:
        """Count one request of ``key_name`` (when a key was given) and ``address``; None when within every
        limit, else (the limit passed, in words; seconds until a hit frees)."""
        checks = [(item, "key", key_name) for item in self.per_key if key_name]
        checks += [(item, "address", address) for item in self.per_address if address]
        for item, kind, who in checks:
            if not self.limiter.hit(item, kind, who):
                reset = self.limiter.get_window_stats(item, kind, who).reset_time
                return f"{item} per {kind}", max(1, math.ceil(reset - time.time()))
        return None

