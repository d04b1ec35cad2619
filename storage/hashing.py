"""Content hashes (sha256, hex) for files, texts and JSON-able configs (code versions: storage.contracts)."""
from __future__ import annotations

import hashlib
import json
import os
from typing import Any

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
