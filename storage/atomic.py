"""Atomic file and directory writes: write to a temporary sibling, then ``os.replace``.

A reader never sees a half-written file: it sees the old version or the new one.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

log = logging.getLogger(__name__)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` (bytes) to ``path`` atomically; parent folders are created.

    Raises:
        OSError: the folder is not writable or the disk is full (the target is left untouched).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode (0644 under umask 022)
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


_LEFTOVER = re.compile(r"^\.(?P<name>.+)\.(?P<uid>[0-9a-z_]{8})\.(?P<kind>tmp|old|d|lnk)$")


def _own_version(path: Path) -> Path | None:
    """The versioned sibling the link ``path`` names when this module made it (a bare name
    ``.name.<uid>.d`` beside it); ``None`` for a link that names anything else (an absolute path, a path
    with a folder part, a link into another disk): such a target is never deleted, the link is replaced."""
    target = os.readlink(path)
    m = _LEFTOVER.match(target)
    if "/" not in target and m and m["kind"] == "d" and m["name"] == path.name:
        return path.parent / target
    log.warning("%s is a link to %s, not a version this pipeline wrote: the link is replaced, its target "
                "is left untouched", path, target)
    return None


def _swap_folder(path: Path, built: Path) -> None:
    """Make ``path`` name the folder ``built`` with one rename: ``path`` is a relative symlink to a
    versioned sibling ``.name.<uid>.d``, replaced by ``os.replace`` of a new link. The previous version is
    deleted after the switch. A real folder left at ``path`` by an older layout is moved aside first.
    A link at ``path`` that this module did not make (to a folder outside the data dir, say) is replaced
    as a link: nothing it points to is followed or deleted."""
    uid = built.name.split(".")[-2]
    version = path.parent / f".{path.name}.{uid}.d"
    os.replace(built, version)
    link = path.parent / f".{path.name}.{uid}.lnk"
    os.symlink(version.name, link)
    previous = _own_version(path) if path.is_symlink() else None
    if path.is_dir() and not path.is_symlink():
        old = path.parent / f".{path.name}.{uid}.old"
        os.replace(path, old)
        previous = old
    os.replace(link, path)
    if previous is not None and not previous.is_symlink() and previous.resolve() != version.resolve():
        shutil.rmtree(previous, ignore_errors=True)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename.

    Works for files and for directories (a whole folder such as a checkpoint or a table is built
    under the temporary name). A file is renamed onto ``path``. A folder becomes a versioned sibling
    ``.name.<uid>.d`` and ``path`` a relative symlink to it, switched with one ``os.replace`` of the
    link: a reader (or a kill) sees the old folder or the new one, never none. Tools that open
    ``path`` follow the link. On an exception the temporary path is removed and ``path`` is left as
    it was; what a kill leaves behind is removed by :func:`clean_leftovers`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:8]}.tmp"
    try:
        yield tmp
        if tmp.is_dir():
            _swap_folder(path, tmp)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp.exists():
            tmp.unlink()


def clean_leftovers(root: str | os.PathLike, max_depth: int = 3) -> list[Path]:
    """Remove what killed swaps left under ``root``: temporary builds (``.name.<uid>.tmp``), moved-aside
    folders (``.old``), unlinked versions (``.d`` that ``name`` does not point to) and stray links.

    Call it while no other run writes to ``root`` (the run lock is held). Folders named ``.prefect``
    and ``crawl`` are not entered. Returns the removed paths.
    """
    root = Path(root)
    removed: list[Path] = []
    if not root.is_dir():
        return removed
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).relative_to(root).parts)
        for entry in [*dirnames, *filenames]:
            m = _LEFTOVER.match(entry)
            if not m:
                continue
            target = Path(dirpath) / entry
            link = Path(dirpath) / m["name"]
            if m["kind"] == "d" and link.is_symlink() and os.readlink(link) == entry:
                continue
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
            removed.append(target)
        dirnames[:] = [d for d in dirnames if d not in (".prefect", "crawl") and not _LEFTOVER.match(d)
                       and depth < max_depth and not (Path(dirpath) / d).is_symlink()]
    return removed


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
