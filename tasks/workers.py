"""Worker-local state for tasks that run many parts on one Dask worker: a model loaded once per worker
process and reused by every part that worker runs (the Dask idiom: state held on the ``Worker`` object, which
lives as long as the worker process). On threads, or outside Dask, the loader runs for every call."""
from __future__ import annotations

from typing import Any, Callable, Hashable

_ATTR = "_policybert_loaded"


def per_worker(key: Hashable, load: Callable[[], Any]) -> Any:
    """``load()``'s result, loaded once per Dask worker process for ``key`` (a content hash of what it
    loads belongs in it: a changed model is loaded again); on no Dask worker, ``load()`` every time."""
    try:
        from distributed import get_worker

        worker = get_worker()
    except (ImportError, ValueError):  # no distributed, or not in a worker
        return load()
    cache = worker.__dict__.setdefault(_ATTR, {})
    if key not in cache:
        cache.clear()  # one model at a time per worker: a refresh with a new encoder frees the old one
        cache[key] = load()
    return cache[key]
