"""Content hashes (sha256, hex) for files, texts, JSON-able configs and source code."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

_CHUNK = 1 << 20


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes, read in 1 MiB chunks. Raises FileNotFoundError."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def text_sha256(text: str) -> str:
    """sha256 of a string's UTF-8 bytes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def json_sha256(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj`` (sorted keys, no spaces; dataclasses via ``default=str``)."""
    return text_sha256(json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str))


def code_version(packages: Iterable[str]) -> str:
    """sha256 over the ``.py`` files of the named top-level packages of this repo (path + bytes).

    Used as the "code version" in manifests and cache keys: any edit of a stage's library code
    changes it. Packages are looked up beside this file's package (the repo root).
    """
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for pkg in sorted(set(packages)):
        base = root / pkg
        if not base.is_dir():
            raise FileNotFoundError(f"package folder {base} not found")
        for f in sorted(base.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]
