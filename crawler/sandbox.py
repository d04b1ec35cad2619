"""Extraction in bounded worker processes (pebble's ProcessPool).

A hostile body must not take the crawl down: a FlateDecode bomb inflating to gigabytes, an OCR page
of gigapixels, an HTML tree that some parser path walks quadratically. Each document is extracted
in a worker process (``spawn`` start method, so no lock of the crawl's threads is inherited) whose
address space may grow by at most ``ExtractConfig.memory`` bytes (``RLIMIT_AS``, inherited by the
tesseract processes it starts) and which is killed and replaced when a document takes longer than
``ExtractConfig.timeout`` seconds. Failures come back as :class:`crawler.document.ExtractionError`
with a ``reason``: ``extraction_failed``, ``extraction_timeout`` or ``extraction_memory``.
"""
from __future__ import annotations

import concurrent.futures
import functools
import hashlib
import multiprocessing
import resource
from dataclasses import astuple
from pathlib import Path

from pebble import ProcessExpired, ProcessPool

from crawler.document import Document, ExtractConfig, ExtractionError
from crawler.extract import extract
from storage.contracts import module_closure

REASONS = ("extraction_failed", "extraction_timeout", "extraction_memory")


class SandboxError(ExtractionError):
    """Extraction failed in its worker; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason

    def __reduce__(self):  # crosses the process boundary
        return SandboxError, (self.reason, str(self))


def _limit_memory(extra: int) -> None:
    """Worker initializer: cap the address space at what the process has now plus ``extra`` bytes."""
    with open("/proc/self/statm") as fh:
        vms = int(fh.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (vms + extra, vms + extra))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _work(body: bytes, url: str, content_type: str | None, hints: dict | None, cfg: ExtractConfig) -> Document:
    try:
        return extract(body, url, content_type, hints, cfg)
    except MemoryError as exc:
        raise SandboxError("extraction_memory", f"over the memory limit of {cfg.memory} bytes") from exc


@functools.lru_cache(maxsize=1)
def extraction_files() -> tuple[Path, ...]:
    """The files extraction's output depends on: this module and every crawler module it imports,
    transitively (:func:`storage.contracts.module_closure`), and the chrome phrase list."""
    here = Path(__file__).resolve().parent
    code = [f for f in module_closure(["crawler.sandbox"]) if f.resolve().parent == here]
    return (*code, here / "chrome_phrases.txt")


def extractor_version(cfg: ExtractConfig) -> str:
    """A hash of the extraction code (:func:`extraction_files`) and limits: a recorded failure is retried,
    and a stored document extracted again, when it changes."""
    h = hashlib.sha256(repr(astuple(cfg)).encode())
    for f in extraction_files():
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


class ExtractionPool:
    """Bounded extraction workers; use as a context manager.

    Args:
        cfg: ``timeout`` (s per document), ``memory`` (bytes per worker), ``workers``, ``max_tasks``.
    """

    def __init__(self, cfg: ExtractConfig = ExtractConfig()):
        self.cfg = cfg
        self._pool: ProcessPool | None = None

    def __enter__(self) -> ExtractionPool:
        self._pool = ProcessPool(max_workers=max(1, self.cfg.workers), max_tasks=self.cfg.max_tasks,
                                 initializer=_limit_memory, initargs=(self.cfg.memory,),
                                 context=multiprocessing.get_context("spawn"))
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool.join(timeout=30)
            self._pool = None

    def submit(self, body: bytes, url: str, content_type: str | None, hints: dict | None = None):
        """Schedule one document; returns a future for :meth:`result`."""
        if self._pool is None:
            raise RuntimeError("ExtractionPool used outside its with-block")
        return self._pool.schedule(_work, (body, url, content_type, hints, self.cfg), timeout=self.cfg.timeout)

    def result(self, future) -> Document:
        """The document of a :meth:`submit` future.

        Raises:
            SandboxError: extraction failed (``extraction_failed``), took longer than ``cfg.timeout``
                (``extraction_timeout``) or ran out of memory / its worker died (``extraction_memory``).
        """
        try:
            return future.result()
        except SandboxError:
            raise
        except ExtractionError as exc:
            raise SandboxError("extraction_failed", str(exc)) from exc
        except concurrent.futures.TimeoutError as exc:
            raise SandboxError("extraction_timeout", f"not extracted within {self.cfg.timeout} s") from exc
        except MemoryError as exc:
            raise SandboxError("extraction_memory", f"over the memory limit of {self.cfg.memory} bytes") from exc
        except ProcessExpired as exc:
            raise SandboxError("extraction_memory", f"worker died (exit code {exc.exitcode}): "
                               f"killed for memory or crashed") from exc
        except Exception as exc:  # an extractor bug must not stop the crawl: recorded like any failure
            raise SandboxError("extraction_failed", f"{type(exc).__name__}: {exc}"[:300]) from exc

    def extract(self, body: bytes, url: str, content_type: str | None, hints: dict | None = None) -> Document:
        """Extract one document in a worker (see :meth:`result`)."""
        return self.result(self.submit(body, url, content_type, hints))
