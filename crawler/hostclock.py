"""Per-host request spacing shared by parallel crawls (threads, processes, or machines on one filesystem).

Each source is crawled by its own task with its own fetcher; two sources on one host (www.gov.cn holds
several) would otherwise hit it at the same time. :class:`HostClock` keeps, per host, the time of the last
request in a small file guarded by a file lock (``filelock``), and :meth:`HostClock.wait` sleeps until
``delay`` seconds after it: the Scrapy ``DOWNLOAD_DELAY`` rule applied across every crawler of a run.
"""
from __future__ import annotations

import os
import re
import time
from pathlib import Path

from filelock import FileLock


class HostClock:
    """``wait(netloc)`` before each request: at most one request per ``delay`` seconds per host.

    Args:
        root: folder for the per-host files (``<root>/<host>.last`` and ``.lock``); created if missing.
        delay: seconds between two requests to one host (>= 0).

    Raises:
        ValueError: ``delay`` < 0.
    """

    def __init__(self, root: str | os.PathLike, delay: float):
        if delay < 0:
            raise ValueError(f"delay must be >= 0 s, got {delay}")
        self.root, self.delay = Path(root), float(delay)
        self.root.mkdir(parents=True, exist_ok=True)

    def _file(self, netloc: str) -> Path:
        return self.root / re.sub(r"[^A-Za-z0-9.-]", "_", netloc)

    def wait(self, netloc: str) -> float:
        """Block until ``delay`` seconds have passed since the last request to ``netloc`` by any crawler
        using this folder, and record now as its last request. Returns the seconds slept."""
        f = self._file(netloc)
        stamp = Path(str(f) + ".last")
        with FileLock(str(f) + ".lock"):
            try:
                last = float(stamp.read_text() or 0)
            except (OSError, ValueError):
                last = 0.0
            slept = max(0.0, last + self.delay - time.time())
            if slept:
                time.sleep(slept)
            stamp.write_text(repr(time.time()))
        return slept
