"""The version store of an index (SPEC §7): ``index/vN/{index.faiss, chunks.parquet, embeddings.npy,
manifest.json, sparse/, fusion/}``, an atomically switched ``index/CURRENT`` pointer, pinned encoders under
``index/models/<model_id>/`` (:mod:`retrieval.pinning`) and a retention rule that bounds the disk.

Retention (:func:`retire_versions`, run after every publish): the newest ``keep`` versions stay, and so do
the serving version and every version named in ``index/PINNED`` (versions an operator keeps for a rollback,
:func:`pin_version`); the others are removed, then every pinned encoder no kept version names. A rollback is
:func:`rollback`: ``CURRENT`` switched to a kept version, whose manifest names its own encoder.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Callable

import faiss
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval.pinning import MODELS
from storage.atomic import atomic_path, atomic_write_text

CURRENT = "CURRENT"
PINNED = "PINNED"


_VERSION = re.compile(r"v[0-9]{1,9}")
log = logging.getLogger(__name__)


class IndexLoadError(ValueError):
    """An index version that cannot be loaded: ``CURRENT`` naming something other than a version ``vN``
    (a path such as ``../..``), or a ``manifest.json``, ``index.faiss`` or ``chunks.parquet`` that does
    not read (truncated, overwritten, not what :func:`publish_version` writes)."""


def check_version(name: str, where: str) -> str:
    """``name`` when it is a version name ``vN`` (what :func:`publish_version` writes), never a path.

    Raises:
        IndexLoadError: naming ``where`` (the file or argument it came from).
    """
    if not _VERSION.fullmatch(name):
        raise IndexLoadError(f"{where} names {name[:80]!r}, not an index version vN")
    return name


def current_version(index_root: str | os.PathLike) -> str | None:
    """Name of the serving version (``vN``) or None when no index was published.

    Raises:
        IndexLoadError: ``CURRENT`` holds anything but a version name (``../..``, binary, a long text).
    """
    p = Path(index_root) / CURRENT
    if not p.is_file():
        return None
    with open(p, "rb") as fh:
        raw = fh.read(256)
    return check_version(raw.decode("utf-8", "replace").strip(), str(p))


def list_versions(index_root: str | os.PathLike) -> list[str]:
    """Published version folders (``vN``), oldest first (by N)."""
    root = Path(index_root)
    if not root.is_dir():
        return []
    nums = sorted(int(p.name[1:]) for p in root.glob("v*") if p.is_dir() and p.name[1:].isdigit())
    return [f"v{n}" for n in nums]


def read_manifest(index_root: str | os.PathLike, version: str) -> dict:
    """``manifest.json`` of ``version``.

    Raises:
        FileNotFoundError: no such version.
        IndexLoadError: ``version`` is not a version name, or its manifest does not read as this version's.
    """
    path = Path(index_root) / check_version(version, "the requested version") / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:
        raise IndexLoadError(f"{path}: not a readable manifest ({str(exc)[:120]})") from exc
    if not isinstance(manifest, dict) or manifest.get("version") != version:
        raise IndexLoadError(f"{path}: not the manifest of version {version}")
    return manifest


def publish_version(index_root: str | os.PathLike, index: faiss.Index, chunks: pd.DataFrame, manifest: dict,
                    vectors: np.ndarray | None = None, write_extra: Callable[[Path], None] | None = None) -> str:
    """Write version ``vN`` (N = last + 1) and switch ``CURRENT`` to it atomically. Returns ``vN``.

    ``vectors`` (rows aligned with ``chunks``) are kept as ``embeddings.npy`` for later refreshes and the
    evaluation; ``write_extra(folder)`` writes more files (the sparse side) into the version before it is
    renamed into place, so they are published and switched together with the dense index. Retention is the
    caller's (:func:`retire_versions`).
    """
    root = Path(index_root)
    root.mkdir(parents=True, exist_ok=True)
    nums = [int(v[1:]) for v in list_versions(root)]
    version = f"v{max(nums, default=0) + 1}"
    with atomic_path(root / version) as tmp:
        tmp.mkdir()
        faiss.write_index(index, str(tmp / "index.faiss"))
        pq.write_table(pa.Table.from_pandas(chunks, preserve_index=False), tmp / "chunks.parquet", compression="zstd")
        if vectors is not None:
            np.save(tmp / "embeddings.npy", np.ascontiguousarray(vectors, dtype=np.float32))
        if write_extra is not None:
            write_extra(tmp)
        live = int(index.ntotal) - int((manifest.get("ann") or {}).get("tombstones", 0))
        (tmp / "manifest.json").write_text(json.dumps({**manifest, "version": version, "size": live,
                                                      "chunks": int(len(chunks))},
                                                      ensure_ascii=False, indent=1, default=str))
    atomic_write_text(root / CURRENT, version)
    return version


def load_version(index_root: str | os.PathLike, version: str | None = None
                 ) -> tuple[faiss.Index, pd.DataFrame, dict]:
    """(index, chunks, manifest) of ``version`` (default: the serving one).

    Raises:
        FileNotFoundError: no index has been published under ``index_root``, or a file of it is missing.
        IndexLoadError: ``CURRENT`` or ``version`` is not a version name; a file of the version is corrupt.
    """
    version = version or current_version(index_root)
    if version is None:
        raise FileNotFoundError(f"no index published under {index_root} (run the pipeline first)")
    d = Path(index_root) / check_version(version, "the requested version")
    if not d.is_dir():
        raise FileNotFoundError(f"index version {version} not found under {index_root}")
    manifest = read_manifest(index_root, version)
    try:
        index = faiss.read_index(str(d / "index.faiss"))
    except RuntimeError as exc:  # faiss reports a truncated or foreign file this way
        raise IndexLoadError(f"{d / 'index.faiss'}: not a readable FAISS index "
                             f"({str(exc).strip().splitlines()[-1][:160]})") from exc
    try:
        chunks = pd.read_parquet(d / "chunks.parquet")
    except (OSError, ValueError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise IndexLoadError(f"{d / 'chunks.parquet'}: not a readable chunks table ({str(exc)[:120]})") from exc
    return index, chunks, manifest


def pinned_versions(index_root: str | os.PathLike) -> list[str]:
    """Versions named in ``index/PINNED`` (kept by retention), in the order pinned."""
    p = Path(index_root) / PINNED
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else []


def pin_version(index_root: str | os.PathLike, version: str, pinned: bool = True) -> list[str]:
    """Add ``version`` to (``pinned=False``: remove it from) ``index/PINNED``; returns the pinned list.

    Raises:
        FileNotFoundError: pinning a version that is not on disk.
    """
    if pinned and not (Path(index_root) / version / "manifest.json").is_file():
        raise FileNotFoundError(f"no index version {version} under {index_root} to pin")
    pins = [v for v in pinned_versions(index_root) if v != version] + ([version] if pinned else [])
    atomic_write_text(Path(index_root) / PINNED, json.dumps(pins))
    return pins


def rollback(index_root: str | os.PathLike, version: str) -> None:
    """Serve ``version`` again: ``CURRENT`` switched to it atomically.

    Raises:
        FileNotFoundError: the version is not on disk (retired, or never published).
    """
    if not (Path(index_root) / version / "manifest.json").is_file():
        raise FileNotFoundError(f"no index version {version} under {index_root} (retired or never published)")
    atomic_write_text(Path(index_root) / CURRENT, version)


def kept_versions(index_root: str | os.PathLike, keep: int) -> list[str]:
    """The versions retention keeps: the newest ``keep``, the serving one and the pinned ones (oldest first).

    Raises:
        ValueError: ``keep`` is not an integer >= 1.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    versions = list_versions(index_root)
    keep_set = set(versions[-keep:]) | set(pinned_versions(index_root)) | {current_version(index_root)}
    return [v for v in versions if v in keep_set]


def retire_versions(index_root: str | os.PathLike, keep: int) -> dict:
    """Remove the versions :func:`kept_versions` does not keep, then the pinned encoders
    (``models/<model_id>``) that no kept version's manifest names. Each folder is renamed aside before it
    is deleted, so a crash leaves whole versions only.

    Returns:
        {"retired": [versions removed], "kept": [versions kept], "encoders_removed": [model ids]}.

    Raises:
        ValueError: ``keep`` < 1.
    """
    root = Path(index_root)
    kept = kept_versions(root, keep)
    retired = [v for v in list_versions(root) if v not in kept]
    for v in retired:
        _remove(root / v)
    used = {Path(read_manifest(root, v).get("encoder_dir", "")).name for v in kept}
    models = root / MODELS
    gone = sorted(p.name for p in models.iterdir()
                  if not p.name.startswith(".") and p.is_dir() and p.name not in used) if models.is_dir() else []
    for mid in gone:
        _remove(models / mid)
    return {"retired": retired, "kept": kept, "encoders_removed": gone}


def _remove(folder: Path) -> None:
    """Remove a published folder whole: its name first (the link :func:`storage.atomic.atomic_path` made, or
    the folder renamed aside), then the content, so a reader never sees half a version."""
    target = folder.parent / os.readlink(folder) if folder.is_symlink() else None
    aside = folder.with_name(f".retired-{folder.name}")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(folder, aside)
    if target is not None:
        aside.unlink()
        aside = target
    shutil.rmtree(aside, ignore_errors=True)
