"""Per-stage memory (storage.memory): the resident set read from /proc, its peak reset before a stage, freed
heap handed back after it, and the line the stage task logs."""
from __future__ import annotations

import logging
import sys

import numpy as np
import pytest

from storage.memory import release_memory, reset_peak, rss

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")


@linux
def test_peak_is_reset_to_the_current_resident_set():
    before = rss()
    big = np.ones(300 * 2**20 // 8)  # 300 MiB touched
    during = rss()
    del big
    after = rss()
    assert during.now >= before.now + 250 and after.peak >= during.now
    assert after.now < during.now - 250  # a large array is unmapped when freed
    if not reset_peak():
        pytest.skip("this kernel refuses /proc/self/clear_refs")
    reset = rss()
    assert reset.peak < during.now - 250 and abs(reset.peak - reset.now) < 50


@linux
def test_release_hands_freed_small_blocks_back():
    """Many small C allocations (numpy arrays under glibc's mmap threshold) freed at once stay in the heap until
    trimmed; release_memory gives most of them back."""
    if not release_memory():
        pytest.skip("not glibc")
    base = rss().now
    blocks = [np.ones(2000) for _ in range(40_000)]  # ~16 KB each: ~600 MiB from malloc's heap
    held = rss().now
    del blocks
    assert held - base > 400
    release_memory()
    assert rss().now < base + (held - base) * 0.5


def test_run_stage_logs_the_stage_peak(tmp_path, caplog, capfd):
    from storage.contracts import Stage
    from tasks.stages import run_stage

    def grow(out_dir):
        np.ones(100 * 2**20 // 8)
        return {"ok": True}

    stage = Stage("grow", "tests.test_memory:grow", args={"out_dir": "*writes"})
    with caplog.at_level(logging.INFO, logger="tasks.stages"):
        out = run_stage(stage, grow, str(tmp_path), {})
    assert out == {"ok": True}
    logged = [r.getMessage() for r in caplog.records] + capfd.readouterr().err.splitlines()
    line = [x for x in logged if "memory: grow peak RSS" in x]
    if sys.platform.startswith("linux"):
        assert len(line) == 1 and "peak RSS" in line[0] and "MiB after release" in line[0]
