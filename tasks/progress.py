"""Prefect progress artifacts and per-host crawl rate limits, handed to the libraries as plain callbacks."""
from __future__ import annotations

import re
from typing import Callable


def progress_artifact(key: str, description: str, every: float = 2.0) -> Callable[[int, int], None]:
    """A ``callback(done, total)`` that keeps a progress artifact (0-100 %) up to date, at most one update
    per ``every`` percent."""
    from prefect.artifacts import create_progress_artifact, update_progress_artifact

    art = create_progress_artifact(progress=0.0, key=key, description=description)
    last = [0.0]

    def update(done: int, total: int) -> None:
        pct = 100.0 * done / total if total else 100.0
        if pct - last[0] >= every or done >= total:
            update_progress_artifact(art, min(pct, 100.0))
            last[0] = pct

    return update


def host_limit_name(netloc: str) -> str:
    """Name of the global concurrency limit of one crawled host (``crawl-`` + host, dots kept)."""
    return "crawl-" + re.sub(r"[^A-Za-z0-9.-]", "-", netloc)


def crawl_rate_limit(netloc: str) -> None:
    """Take a slot of the host's Prefect rate limit (created by the deploy script); a no-op where the
    limit does not exist (e.g. CLI runs on the ephemeral API)."""
    from prefect.concurrency.sync import rate_limit

    rate_limit(host_limit_name(netloc), strict=False)
