"""Task runners: threads by default; Dask (prefect-dask) when asked for."""
from __future__ import annotations


def task_runner(kind: str = "threads", dask_address: str | None = None, workers: int = 2):
    """``threads`` -> ``ThreadPoolTaskRunner(workers)``; ``dask`` -> ``DaskTaskRunner`` on the cluster at
    ``dask_address`` (e.g. ``tcp://scheduler:8786``; its workers need this package installed and a Prefect
    server in ``PREFECT_API_URL``), or on a local in-process cluster of ``workers`` threads when no address.

    Raises:
        ValueError: unknown kind.
    """
    if kind == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if kind == "dask":
        from prefect_dask import DaskTaskRunner

        if dask_address:
            return DaskTaskRunner(address=dask_address)
        return DaskTaskRunner(cluster_kwargs={"n_workers": 1, "threads_per_worker": workers, "processes": False,
                                              "dashboard_address": None})
    raise ValueError(f"unknown task runner {kind!r} (threads, dask)")
