"""The pointer of a versioned output (``CURRENT`` in a folder of ``vN`` versions, e.g. the index; SPEC §7):
the one place that reads it. It is replaced atomically by a publish or a rollback, so one ``read`` sees the old
name or the new one, never a mix."""
from __future__ import annotations

import os
import re
from pathlib import Path

CURRENT = "CURRENT"
VERSION = re.compile(r"v[0-9]{1,9}")


class PointerError(ValueError):
    """A ``CURRENT`` file that holds anything but a version name ``vN`` (a path such as ``../..``, binary, a
    long text); the message names the file."""


def read_pointer(folder: str | os.PathLike) -> str | None:
    """The version ``folder/CURRENT`` names (``vN``), or None when there is no ``CURRENT``.

    Raises:
        PointerError: the file holds anything but a version name.
    """
    p = Path(folder) / CURRENT
    if not p.is_file():
        return None
    with open(p, "rb") as fh:
        name = fh.read(256).decode("utf-8", "replace").strip()
    if not VERSION.fullmatch(name):
        raise PointerError(f"{p} names {name[:80]!r}, not an index version vN")
    return name
