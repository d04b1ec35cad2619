"""One run per data dir (ops.runlock) and the CLI's temporary Prefect server (ops.prefect_server), on
real processes: lock holders are subprocesses, servers are the ones prefect starts for a CLI run.
Every wait is bounded; every process a test starts is killed in its ``finally``."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ops.prefect_server import orphaned_servers, own_servers, stop_orphaned_servers
from ops.runlock import RunLockBusy, read_holder, run_lock

REPO = Path(__file__).resolve().parent.parent
HOLD = """
import sys, time
from ops.runlock import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _hold(data: Path, seconds: float) -> subprocess.Popen:
    """A subprocess holding ``data``'s run lock for ``seconds`` (returns once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(data), str(seconds)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held", "the holder did not take the lock"
    return proc


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


def _until(check, seconds: float, what: str, step: float = 0.2):
    deadline = time.monotonic() + seconds
    while not (value := check()):
        assert time.monotonic() < deadline, f"no {what} within {seconds} s"
        time.sleep(step)
    return value


def _cli(real_slice: Path, data: Path, log: Path, *extra: str) -> subprocess.Popen:
    """Start ``python -m flows.pipeline`` (tiny profile) in its own session, output to ``log``."""
    cmd = [sys.executable, "-m", "flows.pipeline", "--input", str(real_slice), "--data-dir", str(data),
           "--profile", "tiny", *extra]
    with open(log, "w") as fh:
        return subprocess.Popen(cmd, cwd=REPO, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _kill_run(proc: subprocess.Popen, data: Path) -> None:
    """SIGKILL a CLI run's process group and any server of its data dir left behind."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    stop_orphaned_servers(data, timeout=2)


def test_busy_lock_fails_at_once_naming_the_holder(tmp_path):
    data = tmp_path / "data"
    holder = _hold(data, 60)
    try:
        t0 = time.monotonic()
        with pytest.raises(RunLockBusy) as busy:
            with run_lock(data, timeout=0):
                pass
        assert time.monotonic() - t0 < 3
        assert busy.value.holder.pid == holder.pid and "-c" in busy.value.holder.argv
        assert str(busy.value).startswith(f"data dir {data.resolve()} is in use by another run "
                                          f"(pid {holder.pid}, started ")
        assert "\n" not in str(busy.value)
    finally:
        _kill(holder)


def test_waiting_run_says_once_who_holds_it_then_times_out(tmp_path):
    data = tmp_path / "data"
    holder = _hold(data, 60)
    said: list[str] = []
    try:
        t0 = time.monotonic()
        with pytest.raises(RunLockBusy):
            with run_lock(data, timeout=1.5, on_wait=said.append):
                pass
        assert 1.5 <= time.monotonic() - t0 < 6
        assert len(said) == 1
        assert said[0].startswith(f"waiting for the lock on {data.resolve()} held by pid {holder.pid} (started ")
    finally:
        _kill(holder)


def test_waiting_run_gets_the_lock_when_the_holder_ends(tmp_path):
    data = tmp_path / "data"
    holder = _hold(data, 2)
    said: list[str] = []
    try:
        t0 = time.monotonic()
        with run_lock(data, timeout=30, on_wait=said.append) as me:
            assert time.monotonic() - t0 > 1.5  # only once the holder let go (it holds for 2 s)
            assert read_holder(data).pid == me.pid == os.getpid()
        assert len(said) == 1 and read_holder(data) is None
        assert holder.wait(timeout=30) == 0
    finally:
        _kill(holder)


def test_sigkilled_holder_does_not_block_the_next_run(tmp_path):
    data = tmp_path / "data"
    holder = _hold(data, 600)
    try:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        assert read_holder(data) is None  # its record is left behind, but names a dead process
        t0 = time.monotonic()
        with run_lock(data, timeout=0):
            assert time.monotonic() - t0 < 3
    finally:
        _kill(holder)


def test_cli_lock_timeout_waits_then_exits_2_with_one_error_line(tmp_path, real_slice):
    data = tmp_path / "data"
    holder = _hold(data, 120)
    try:
        res = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(real_slice), "--data-dir",
                              str(data), "--profile", "tiny", "--lock-timeout", "1"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
        lines = [x for x in res.stderr.splitlines() if x.strip()]
        assert res.returncode == 2 and len(lines) == 2, res.stderr[-2000:]
        assert lines[0].startswith(f"waiting for the lock on {data.resolve()} held by pid {holder.pid} (started ")
        assert lines[1].startswith(f"error: data dir {data.resolve()} is in use by another run (pid {holder.pid}, "
                                   "started ")
        assert not (data / ".prefect" / "prefect.db").exists()  # the refused run started no server
    finally:
        _kill(holder)


def test_cli_rejects_a_negative_lock_timeout(tmp_path, real_slice):
    res = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(real_slice), "--data-dir",
                          str(tmp_path / "data"), "--lock-timeout", "-1"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and res.stderr.strip() == "error: --lock-timeout -1.0: must be >= 0 seconds"


@pytest.mark.slow
def test_second_cli_run_on_a_busy_data_dir_exits_2_and_the_first_finishes(tmp_path, real_slice):
    """Two CLI runs on one data dir: the second, with --lock-timeout 0, exits 2 at once naming the
    first, which still finishes with 0."""
    data = tmp_path / "data"
    first = _cli(real_slice, data, tmp_path / "first.log", "--lock-timeout", "0")
    try:
        _until(lambda: (h := read_holder(data)) is not None and h.pid == first.pid, 120, "lock held by the first run")
        second = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(real_slice), "--data-dir",
                                 str(data), "--profile", "tiny", "--lock-timeout", "0"],
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        err = [x for x in second.stderr.splitlines() if x.strip()]
        assert second.returncode == 2 and len(err) == 1, second.stderr[-2000:]
        assert err[0].startswith(f"error: data dir {data.resolve()} is in use by another run "
                                 f"(pid {first.pid}, started ")
        assert "flows.pipeline" in err[0]
        assert first.poll() is None, "the first run ended before the second was refused"
        assert first.wait(timeout=400) == 0, (tmp_path / "first.log").read_text()[-3000:]
        assert (data / "summary.json").is_file() and read_holder(data) is None
    finally:
        _kill_run(first, data)


@pytest.mark.slow
def test_sigterm_of_a_cli_run_stops_its_prefect_server(tmp_path, real_slice):
    data = tmp_path / "data"
    run = _cli(real_slice, data, tmp_path / "run.log")
    try:
        servers = _until(lambda: own_servers(run.pid), 180, "Prefect server under the CLI run")
        time.sleep(3)  # let it get into the flow
        run.send_signal(signal.SIGTERM)
        _, alive = psutil.wait_procs(servers, timeout=15)
        assert not alive, f"server(s) {alive} still running 15 s after SIGTERM"
        assert run.wait(timeout=30) == 128 + signal.SIGTERM
        assert not orphaned_servers(data.resolve() / ".prefect")
    finally:
        _kill_run(run, data)


@pytest.mark.slow
def test_server_orphaned_by_sigkill_is_stopped_by_the_next_run(tmp_path, real_slice):
    """SIGKILL of a CLI run (the process only, as the OOM killer would) orphans its server; the next
    run on the data dir stops it as soon as it holds the lock."""
    data = tmp_path / "data"
    home = data.resolve() / ".prefect"
    first = _cli(real_slice, data, tmp_path / "first.log")
    second = None
    try:
        servers = _until(lambda: own_servers(first.pid), 180, "Prefect server under the first run")
        assert orphaned_servers(home) == []  # a live run's server is not an orphan
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        time.sleep(1)
        assert all(s.is_running() for s in servers), "the server should outlive a SIGKILLed run"
        assert {s.pid for s in orphaned_servers(home)} == {s.pid for s in servers}
        second = _cli(real_slice, data, tmp_path / "second.log")
        log = tmp_path / "second.log"
        _until(lambda: "stopped an orphaned Prefect server" in log.read_text(), 120, "orphan cleanup by the next run")
        _, alive = psutil.wait_procs(servers, timeout=5)
        assert not alive and orphaned_servers(home) == []
        for s in servers:
            assert f"(pid {s.pid})" in log.read_text()
    finally:
        _kill_run(first, data)
        if second is not None:
            _kill_run(second, data)
