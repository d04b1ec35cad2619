"""Process memory of a pipeline run, per stage (SPEC §1, runs on small machines): the resident set now and at
its peak, read from ``/proc/self/status``; the peak reset before a stage (``/proc/self/clear_refs``) so each
stage's own high-water mark is measured; and what a finished stage freed handed back to the system.

Why the hand-back matters: a stage frees its model and tensors when it returns, but glibc keeps freed heap
pages in its arenas (one per thread that allocated; Prefect runs stages in worker threads), so the next stage
starts on top of the last one's peak. ``gc.collect()`` then ``malloc_trim(0)`` returns those pages
(glibc ``malloc_trim(3)``). Off Linux / glibc every function degrades to a no-op or None.

Plain library: never imports prefect.
"""
from __future__ import annotations

import ctypes
import gc
from dataclasses import dataclass
from pathlib import Path

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass(frozen=True)
class Rss:
    """Resident set of this process, MiB: ``now`` (VmRSS) and ``peak`` (VmHWM, since start or the last
    :func:`reset_peak`)."""

    now: int
    peak: int


def rss() -> Rss | None:
    """This process's resident set now and at its peak (MiB); None where ``/proc/self/status`` is not readable."""
    try:
        fields = dict(line.split(":", 1) for line in STATUS.read_text().splitlines() if ":" in line)
        return Rss(int(fields["VmRSS"].split()[0]) // 1024, int(fields["VmHWM"].split()[0]) // 1024)
    except (OSError, KeyError, ValueError):
        return None


def reset_peak() -> bool:
    """Reset VmHWM to the current resident set (Linux >= 4.0: ``echo 5 > /proc/self/clear_refs``); False when
    the kernel or the sandbox does not allow it. With stages in several threads the peak is the process's,
    shared by the stages running at the time."""
    try:
        CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def release_memory() -> bool:
    """Collect garbage, then hand freed heap pages back to the system (:func:`trim_heap`). Returns True
    when the trim ran (glibc found), False otherwise (other libc: only the collection ran)."""
    gc.collect()
    return trim_heap()


def trim_heap() -> bool:
    """Hand the heap's freed pages back to the system (glibc ``malloc_trim(0)``: every arena, whole free pages
    inside the heap too), without a garbage collection. Returns False where glibc is not found (a no-op)."""
    try:  # the symbols already loaded into this process (libc among them): no library search, no subprocess
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    trim(0)
    return True
