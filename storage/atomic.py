"""Atomic file and directory writes: write to a temporary sibling, then ``os.replace``.

A reader never sees a half-written file: it sees the old version or the new one.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` (bytes) to ``path`` atomically; parent folders are created.

    Raises:
        OSError: the folder is not writable or the disk is full (the target is left untouched).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically (see :func:`atomic_write_bytes`)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``.

    Works for files and for directories (a whole folder such as a checkpoint or a table is
    built under the temporary name, then swapped in). An existing directory at ``path`` is
    replaced: it is moved aside first and deleted after the swap. On an exception the
    temporary path is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        yield tmp
        if path.is_dir() and tmp.is_dir():
            old = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.old"
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def check_writable_dir(path: str | os.PathLike) -> Path:
    """Create ``path`` if needed and check that files can be written in it.

    Raises:
        PermissionError: with a one-line message naming the folder, when it cannot be
            created or written.
    """
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write-probe-{uuid.uuid4().hex[:8]}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PermissionError(f"data dir {path} is not writable: {exc.strerror or exc}") from exc
    return path
