"""Content fingerprints of stage outputs (tables, checkpoints, folders), for cache keys and lineage."""
from __future__ import annotations

import os
from pathlib import Path

from storage.hashing import file_sha256, json_sha256
from storage.pointer import CURRENT, PointerError, read_pointer
from storage.tables import MANIFEST_NAME, manifest_fingerprint


def path_fingerprint(path: str | os.PathLike) -> str:
    """sha256 content fingerprint of a stage output.

    A table folder (a ``manifest.json`` with shards): its :func:`manifest_fingerprint` (shards only). A
    versioned folder (a ``CURRENT`` file naming a subfolder, e.g. the index): the serving version's name and
    content only, so retiring or adding other versions beside it leaves the fingerprint alone. Another
    folder: sha256 over (relative path, content hash) of every file below it, hidden entries (``.name``)
    skipped and tables inside it counted by their manifest fingerprint. A file: its sha256. A missing
    path: the string ``"missing"``.
    """
    p = Path(path)
    if _is_table(p):
        return manifest_fingerprint(p)
    try:
        version = read_pointer(p)
    except PointerError:
        version = None  # an unreadable pointer: the folder fingerprinted as a whole
    if version is not None and (p / version).is_dir():
        return json_sha256({CURRENT: version, "entries": _folder_entries(p / version)})
    if p.is_dir():
        return json_sha256(_folder_entries(p))
    if p.is_file():
        return file_sha256(p)
    return "missing"


def _is_table(p: Path) -> bool:
    m = p / MANIFEST_NAME
    return m.is_file() and '"shards"' in m.read_text(encoding="utf-8")


def _folder_entries(root: Path) -> list[tuple[str, str]]:
    entries = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        if here != root and _is_table(here):
            entries.append((str(here.relative_to(root)), manifest_fingerprint(here)))
            dirnames[:] = []
            continue
        for f in sorted(filenames):
            if not f.startswith("."):
                entries.append((str((here / f).relative_to(root)), file_sha256(here / f)))
    return sorted(entries)
