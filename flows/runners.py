"""Task runners: threads by default; Dask (prefect-dask) when asked for.

``--task-runner dask`` with no address starts a ``dask.distributed.LocalCluster`` of worker *processes*
(``--dask-workers`` of them, one thread each) for the flow run and closes it at the end;
``--dask-address`` sends the tasks to an existing scheduler instead. Tasks reach the workers as
cloudpickled Prefect tasks with the flow's serialized context (prefect-dask 0.3.7): the workers
report their task runs to the flow's Prefect API and write cache records and outputs under the data
dir, so every worker needs this package, the same data dir path (a shared filesystem), the same
``HANLP_HOME`` models and a reachable ``PREFECT_API_URL``.

Prefect 3.8 serializes only the settings that were *set* in the flow's process; the URL of the
temporary API server a CLI run starts is not one of them, so a worker process that is not told the
URL starts a temporary server of its own (and records its task runs there). The local cluster therefore
gets ``PREFECT_API_URL`` in its workers' environment (:func:`local_process_cluster`); an existing
cluster's workers take it from the serialized settings, so ``--dask-address`` needs ``PREFECT_API_URL``
set to a server they can reach (checked by :func:`flows.cli.validate`).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DaskConfig:
    """Where Dask tasks run. ``address``: an existing scheduler (``tcp://host:8786``), or None for a local
    cluster of ``n_workers`` worker processes with ``threads_per_worker`` threads each (1: the stage code
    is CPU-bound Python, so one thread per process; the GIL makes more threads useless).
    ``memory_limit``: per local worker (Dask's syntax, ``"auto"`` = system memory / workers)."""

    address: str | None = None
    n_workers: int = 2
    threads_per_worker: int = 1
    memory_limit: str = "auto"


def prefect_api_url() -> str:
    """The Prefect API this process reports to: ``PREFECT_API_URL`` when set, else the URL of the temporary
    local server that Prefect starts for it (started now if it is not running yet; the same server the
    flow engine uses, since Prefect keeps one per process).

    Raises:
        RuntimeError: the temporary server did not start within
            ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS``.
    """
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    if url:
        return url
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    return server.api_url


def local_process_cluster(n_workers: int = 2, threads_per_worker: int = 1, memory_limit: str = "auto"):
    """A ``dask.distributed.LocalCluster`` of ``n_workers`` worker processes (no dashboard) whose workers
    report to this process's Prefect API (:func:`prefect_api_url` in their ``PREFECT_API_URL``); they
    inherit the rest of the environment (``PREFECT_HOME``, result storage, ``HANLP_HOME``). Used as the
    ``cluster_class`` of the ``DaskTaskRunner``, so the cluster starts when the flow's first task is
    submitted, not when the runner is built.
    """
    from distributed import LocalCluster

    return LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker, processes=True,
                        memory_limit=memory_limit, dashboard_address=None,
                        env={"PREFECT_API_URL": prefect_api_url()})


def dask_runner(cfg: DaskConfig):
    """The ``DaskTaskRunner`` for ``cfg``: on the scheduler at ``cfg.address``, or on a
    :func:`local_process_cluster` made for the flow run (closed when the run ends)."""
    from prefect_dask import DaskTaskRunner

    if cfg.address:
        return DaskTaskRunner(address=cfg.address)
    return DaskTaskRunner(cluster_class=local_process_cluster,
                          cluster_kwargs={"n_workers": cfg.n_workers, "threads_per_worker": cfg.threads_per_worker,
                                          "memory_limit": cfg.memory_limit})


def task_runner(kind: str = "threads", dask_address: str | None = None, workers: int = 2,
                dask_workers: int | None = None):
    """``threads`` -> ``ThreadPoolTaskRunner(workers)``; ``dask`` -> :func:`dask_runner` on the scheduler at
    ``dask_address``, or on a local cluster of ``dask_workers`` worker processes (one thread each; None:
    ``DaskConfig.n_workers``, 2) when no address is given.

    Raises:
        ValueError: unknown kind, or ``dask_workers`` < 1.
    """
    if kind == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=workers)
    if kind == "dask":
        if dask_workers is None:
            return dask_runner(DaskConfig(address=dask_address))
        if dask_workers < 1:
            raise ValueError(f"dask_workers={dask_workers}: need at least 1 worker process")
        return dask_runner(DaskConfig(address=dask_address, n_workers=dask_workers))
    raise ValueError(f"unknown task runner {kind!r} (threads, dask)")
