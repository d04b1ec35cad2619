"""One run per data dir: an OS-level file lock held for the whole of a CLI run.

The lock is ``DATA_DIR/.run.lock``, taken with :class:`filelock.FileLock` (``flock``; never a soft
lock): the kernel releases it when the holding process ends, however it ends, so a SIGKILLed run
never blocks the next one. The holder describes itself in ``DATA_DIR/.run.lock.json`` (pid, process
start time, command line, host) so that a waiting or refused run can say who holds the data dir.

    python -m ops.runlock DATA_DIR      # prints the holder as JSON (exit 1), or "free" (exit 0)

No prefect import: the CLI takes the lock before anything else touches the data dir.
"""
from __future__ import annotations

import json
import math
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

import psutil
from filelock import FileLock, Timeout

LOCK_NAME = ".run.lock"
HOLDER_NAME = ".run.lock.json"
HOLDER_WAIT_S = 2.0  # how long a waiter waits for a fresh holder record (the holder writes it right after locking)


@dataclass(frozen=True)
class Holder:
    """Who holds a data dir's run lock: ``pid`` on ``host``, ``started`` (local ISO time, seconds),
    ``argv`` (the full command line) and ``create_time`` (the process start, seconds since the epoch,
    used to tell the holder from a later process that reuses its pid)."""

    pid: int
    started: str
    argv: list[str] = field(default_factory=list)
    host: str = ""
    create_time: float | None = None

    @property
    def command(self) -> str:
        """The holder's command line, shell-quoted, on one line."""
        return " ".join(shlex.quote(a) for a in self.argv).replace("\n", "\\n")

    def describe(self) -> str:
        """``pid N, started T: COMMAND`` for one-line messages."""
        return f"pid {self.pid}, started {self.started}" + (f": {self.command}" if self.argv else "")

    def is_alive(self) -> bool:
        """Whether the recorded process still runs (always True for a holder on another host)."""
        if self.host and self.host != socket.gethostname():
            return True
        try:
            proc = psutil.Process(self.pid)
            return self.create_time is None or abs(proc.create_time() - self.create_time) < 0.5
        except (psutil.Error, ValueError, TypeError, OverflowError):
            return False


class RunLockBusy(RuntimeError):
    """The data dir is locked by another run and the timeout expired.

    Attributes: ``data_dir`` (Path) and ``holder`` (:class:`Holder`, or None when the holder left no
    readable record)."""

    def __init__(self, data_dir: Path, holder: Holder | None):
        self.data_dir, self.holder = data_dir, holder
        who = holder.describe() if holder else "holder unknown"
        super().__init__(f"data dir {data_dir} is in use by another run ({who})")


def lock_path(data_dir: str | os.PathLike) -> Path:
    """``DATA_DIR/.run.lock``."""
    return Path(data_dir) / LOCK_NAME


def holder_path(data_dir: str | os.PathLike) -> Path:
    """``DATA_DIR/.run.lock.json``, the holder's record."""
    return Path(data_dir) / HOLDER_NAME


def this_process() -> Holder:
    """A :class:`Holder` describing the calling process."""
    proc = psutil.Process()
    created = proc.create_time()
    return Holder(pid=os.getpid(), started=datetime.fromtimestamp(created).isoformat(timespec="seconds"),
                  argv=list(getattr(sys, "orig_argv", sys.argv)), host=socket.gethostname(), create_time=created)


def read_holder(data_dir: str | os.PathLike) -> Holder | None:
    """The live holder recorded for ``data_dir``; None when there is no record, it is unreadable, or
    its process has ended (a record left by a killed run)."""
    try:
        holder = _parse_holder(json.loads(holder_path(data_dir).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError, RecursionError):
        return None
    return holder if holder is not None and holder.is_alive() else None


def _parse_holder(raw) -> Holder | None:
    """The :class:`Holder` of a parsed record when every field has the type and range this module writes
    (pid a positive integer below 2**31, strings, argv a list of strings, create_time a finite number or
    null), else None: a malformed or hostile record reads as no record."""
    if not isinstance(raw, dict) or not set(raw) <= {"pid", "started", "argv", "host", "create_time"}:
        return None
    pid, created = raw.get("pid"), raw.get("create_time")
    if type(pid) is not int or not 0 < pid < 2 ** 31 or not isinstance(raw.get("started"), str):
        return None
    argv = raw.get("argv", [])
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv) \
            or not isinstance(raw.get("host", ""), str):
        return None
    if created is not None and (type(created) not in (int, float) or not math.isfinite(created)):
        return None
    return Holder(**raw)


def wait_for_holder(data_dir: str | os.PathLike, seconds: float = HOLDER_WAIT_S) -> Holder | None:
    """:func:`read_holder`, retried for up to ``seconds`` (the lock is taken a moment before its
    record is written); None if no live record appears."""
    deadline = time.monotonic() + seconds
    while (holder := read_holder(data_dir)) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    return holder


def _file_lock(path: Path) -> FileLock:
    try:  # filelock >= 4 would otherwise fall back to a soft lock (not released by a crash) without flock
        return FileLock(path, fallback_to_soft=False)
    except TypeError:  # filelock 3.x: no fallback exists
        return FileLock(path)


def _write_holder(data_dir: Path, holder: Holder) -> None:
    path = holder_path(data_dir)
    tmp = path.with_name(f"{path.name}.tmp")  # only the lock holder writes it: one fixed name, never left over twice
    tmp.write_text(json.dumps(asdict(holder), ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, path)


def _acquire(lock: FileLock, data_dir: Path, timeout: float | None, on_wait: Callable[[str], None] | None) -> None:
    t0 = time.monotonic()
    try:
        lock.acquire(timeout=0)
        return
    except Timeout:
        pass
    holder = wait_for_holder(data_dir)
    if timeout == 0:
        raise RunLockBusy(data_dir, holder)
    if on_wait is not None:
        who = (f"held by pid {holder.pid} (started {holder.started}" + (f": {holder.command})" if holder.argv else ")")
               if holder else "held by another run")
        on_wait(f"waiting for the lock on {data_dir} {who}")
    try:
        lock.acquire(timeout=-1 if timeout is None else max(0.0, timeout - (time.monotonic() - t0)))
    except Timeout:
        raise RunLockBusy(data_dir, read_holder(data_dir)) from None


@contextmanager
def run_lock(data_dir: str | os.PathLike, timeout: float | None = None,
             on_wait: Callable[[str], None] | None = None) -> Iterator[Holder]:
    """Hold ``DATA_DIR/.run.lock`` for the ``with`` block; yields this process's :class:`Holder`.

    ``timeout``: seconds to wait for another run to finish; None waits forever, 0 fails at once.
    ``on_wait(message)`` is called once, with ``waiting for the lock on DATA_DIR held by pid N
    (started T: COMMAND)``, when the lock is busy and the call is going to wait.
    The data dir is created if missing; the lock is released (and the holder record removed) on exit.

    Raises:
        RunLockBusy: another run held the lock for longer than ``timeout`` seconds.
        ValueError: a negative ``timeout``.
        OSError: the data dir or the lock file cannot be created.
    """
    if timeout is not None and timeout < 0:
        raise ValueError(f"lock timeout must be >= 0 seconds or None, not {timeout}")
    data_dir = Path(data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _file_lock(lock_path(data_dir))
    _acquire(lock, data_dir, timeout, on_wait)
    try:
        me = this_process()
        _write_holder(data_dir, me)
        yield me
    finally:
        with suppress(OSError):
            holder_path(data_dir).unlink()
        lock.release()


def main(argv: list[str] | None = None) -> int:
    """``python -m ops.runlock DATA_DIR``: print the holder (exit 1) or ``free`` (exit 0)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m ops.runlock DATA_DIR", file=sys.stderr)
        return 2
    if not lock_path(args[0]).exists():
        print("free")
        return 0
    try:
        with run_lock(args[0], timeout=0):
            print("free")
            return 0
    except RunLockBusy as exc:
        print(json.dumps(asdict(exc.holder), ensure_ascii=False) if exc.holder else str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
