"""The temporary ("ephemeral") Prefect API server of a CLI run, seen from outside prefect.

A CLI run without ``PREFECT_API_URL`` makes prefect start ``python -m uvicorn … --factory
prefect.server.api.server:create_app`` as a child process, with the run's environment (so
``PREFECT_HOME=DATA_DIR/.prefect``) plus ``PREFECT__SERVER_EPHEMERAL=1``. Prefect stops it from an
``atexit`` hook, which does not run when the run dies from a signal: SIGKILL, or SIGTERM under the
default handler, leave the server running as an orphan on the data dir's SQLite database.

- :func:`stop_on_signals` makes SIGTERM/SIGINT end a run through ``SystemExit``/``KeyboardInterrupt``
  (so prefect's own cleanup stops the server) and stops the server itself if that cleanup stalls.
- :func:`stop_orphaned_servers` finds servers of a data dir whose run is gone and stops them; the CLI
  calls it once it holds the data dir's run lock (:mod:`ops.runlock`).

No prefect import: processes are found with psutil by command line and environment.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from storage.layout import PREFECT_HOME

SERVER_APP = "prefect.server.api.server:create_app"  # the uvicorn factory prefect's SubprocessASGIServer runs
EPHEMERAL_FLAG = "PREFECT__SERVER_EPHEMERAL"  # set to "1" in that server's environment
STOP_TIMEOUT_S = 5.0  # SIGTERM → wait → SIGKILL
CLEANUP_GRACE_S = 5.0  # after a signal, time left to prefect's own cleanup before the server is stopped here
EXIT_AFTER_S = 20.0  # after a signal, the process exits at the latest this long after it


def is_ephemeral_server(proc: psutil.Process) -> bool:
    """Whether ``proc`` is a Prefect ephemeral API server (uvicorn running prefect's app factory)."""
    try:
        return SERVER_APP in proc.cmdline()
    except psutil.Error:
        return False


def _prefect_home(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get("PREFECT_HOME")
    except psutil.Error:
        return None


def _same_path(a: str | None, b: str | os.PathLike) -> bool:
    return a is not None and os.path.realpath(a) == os.path.realpath(b)


def own_servers(pid: int | None = None) -> list[psutil.Process]:
    """Ephemeral servers among the descendants of process ``pid`` (default: this process)."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in children if is_ephemeral_server(p)]


def _is_orphan(server: psutil.Process, prefect_home: str | os.PathLike) -> bool:
    # A run's server is its child; it is an orphan once no process of that data dir is its parent
    # (the run died and the server was re-parented to init or a subreaper).
    try:
        parent = server.parent()
    except psutil.Error:
        return False
    return parent is None or not _same_path(_prefect_home(parent), prefect_home)


def orphaned_servers(prefect_home: str | os.PathLike) -> list[psutil.Process]:
    """Ephemeral servers whose ``PREFECT_HOME`` is ``prefect_home`` and whose run has ended.

    A server still parented by a live run of the same data dir (for instance one that released the
    run lock and is stopping its server at exit) is not an orphan. Processes of other users, whose
    environment cannot be read, are never returned."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if SERVER_APP not in cmdline or proc.pid == os.getpid():
            continue
        try:
            env = proc.environ()
        except psutil.Error:
            continue
        if env.get(EPHEMERAL_FLAG) == "1" and _same_path(env.get("PREFECT_HOME"), prefect_home) \
                and _is_orphan(proc, prefect_home):
            found.append(proc)
    return found


def stop_processes(procs: Iterable[psutil.Process], timeout: float = STOP_TIMEOUT_S) -> list[int]:
    """SIGTERM ``procs``, wait up to ``timeout`` seconds, SIGKILL those left; returns the pids
    that were running. Processes that are already gone, or not ours to signal, are skipped."""
    procs = list(procs)
    signalled = []
    for p in procs:
        try:
            p.terminate()
            signalled.append(p)
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(signalled, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=timeout)
    return [p.pid for p in signalled]


def stop_orphaned_servers(data_dir: str | os.PathLike, timeout: float = STOP_TIMEOUT_S) -> list[int]:
    """Stop the ephemeral servers left behind by killed runs on ``data_dir`` (whose Prefect home is
    ``DATA_DIR/.prefect``); returns their pids. Call it while holding the data dir's run lock, so
    that no live run of the data dir is starting a server of its own.

    ``timeout``: seconds each server gets between SIGTERM and SIGKILL."""
    home = Path(data_dir).resolve() / PREFECT_HOME
    return stop_processes(orphaned_servers(home), timeout=timeout)


def _exit_code(signum: int) -> int:
    return 128 + signum


def _reap_then_exit(signum: int, grace: float, exit_after: float) -> None:
    time.sleep(grace)
    stop_processes(own_servers())
    time.sleep(max(0.0, exit_after - grace - STOP_TIMEOUT_S))
    os._exit(_exit_code(signum))


def _handler(grace: float, exit_after: float):
    fired = threading.Event()

    def handle(signum: int, frame) -> None:
        if fired.is_set():  # a second signal: stop the server now and leave
            stop_processes(own_servers())
            os._exit(_exit_code(signum))
        fired.set()
        threading.Thread(target=_reap_then_exit, args=(signum, grace, exit_after), daemon=True,
                         name="stop-ephemeral-server").start()
        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise SystemExit(_exit_code(signum))

    return handle


@contextmanager
def stop_on_signals(grace: float = CLEANUP_GRACE_S, exit_after: float = EXIT_AFTER_S,
                    signums: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[None]:
    """Within the block, SIGTERM raises ``SystemExit(143)`` and SIGINT ``KeyboardInterrupt`` in the
    main thread, so the run unwinds: the flow run is marked crashed, locks are released and
    prefect's exit hook stops its ephemeral server. As a backstop, ``grace`` seconds after the
    signal any ephemeral server still under this process is stopped, and ``exit_after`` seconds
    after it the process exits with ``128 + signal`` (worker threads may otherwise keep it alive
    until their task ends). A second signal stops the server and exits at once.

    (Prefect's flow engine installs its own SIGTERM handler during a flow run; it marks the run
    crashed, then restores the handler found here and re-sends the signal to it.)

    Raises:
        ValueError: called outside the main thread (signal handlers can only be set there).
    """
    handle = _handler(grace, exit_after)
    previous = {s: signal.signal(s, handle) for s in signums}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
