"""Content fingerprints of stage outputs (tables, checkpoints, folders), for cache keys and lineage."""
from __future__ import annotations

import os
from pathlib import Path

from storage.hashing import file_sha256, json_sha256
from storage.tables import MANIFEST_NAME, manifest_fingerprint


def path_fingerprint(path: str | os.PathLike) -> str:
    """sha256 fingerprint of a stage output.

    A table folder (a ``manifest.json`` with shards): its manifest fingerprint. Another folder: sha256 over
    (relative path, file sha256) of every file below it, temp/hidden entries skipped. A file: its
    sha256. A missing path: the string ``"missing"``.
    """
    p = Path(path)
    if (p / MANIFEST_NAME).is_file() and '"shards"' in (p / MANIFEST_NAME).read_text(encoding="utf-8"):
        return manifest_fingerprint(p)
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts))
        return json_sha256([(str(f.relative_to(p)), file_sha256(f)) for f in files])
    if p.is_file():
        return file_sha256(p)
    return "missing"
