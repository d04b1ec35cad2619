"""Bounds of typed config fields, checked when a config dataclass is made (its ``__post_init__``).

A setting outside its range fails at start-up with its name and range (the CLI prints it as one
``error:`` line), not late in a stage (a chunker that never ends at ``max_chars=0``, FAISS aborting the
process at ``hnsw_m=0``). NaN and infinities are outside every range; an integer field takes an int only
(not a bool, not 2.5).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

Range = tuple  # (lo, hi) inclusive, either None for open; (">", lo, hi): lo excluded


def _describe(rng: Range, integer: bool) -> str:
    open_lo = rng[0] == ">"
    lo, hi = rng[1:] if open_lo else rng
    kind = "an integer" if integer else "a number"
    if hi is None:
        return f"{kind} {'>' if open_lo else '>='} {lo}"
    return f"{kind} in {'(' if open_lo else '['}{lo}, {hi}]"


def _inside(value: float, rng: Range) -> bool:
    open_lo = rng[0] == ">"
    lo, hi = rng[1:] if open_lo else rng
    if lo is not None and (value <= lo if open_lo else value < lo):
        return False
    return hi is None or value <= hi


def check_bounds(obj: Any, nullable: tuple[str, ...] = (), **ranges: Range) -> None:
    """Check fields of the dataclass ``obj``: each name in ``ranges`` holds a number in its range (an int
    for a field typed ``int``); a name in ``nullable`` may also hold None.

    Raises:
        ValueError: ``"<Class>.<field> = <value>: must be <range>"`` for the first field out of range.
    """
    types = {f.name: str(f.type) for f in dataclasses.fields(obj)}
    for name, rng in ranges.items():
        value = getattr(obj, name)
        if value is None and name in nullable:
            continue
        integer = "int" in types[name] and "float" not in types[name]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        ok = ok and (isinstance(value, int) if integer else math.isfinite(value)) and _inside(value, rng)
        if not ok:
            raise ValueError(f"{type(obj).__name__}.{name} = {value!r}: must be {_describe(rng, integer)}"
                             + (" or null" if name in nullable else ""))


def check_choice(obj: Any, name: str, choices: tuple) -> None:
    """Raises ValueError naming the field when ``obj.<name>`` is not one of ``choices``."""
    value = getattr(obj, name)
    if value not in choices:
        raise ValueError(f"{type(obj).__name__}.{name} = {value!r}: must be one of {', '.join(map(str, choices))}")


def check_order(obj: Any, low: str, high: str, strict: bool = False) -> None:
    """Raises ValueError when ``obj.<low>`` is above (``strict``: not below) ``obj.<high>``."""
    a, b = getattr(obj, low), getattr(obj, high)
    if a > b or (strict and a == b):
        raise ValueError(f"{type(obj).__name__}.{low} = {a!r} must be {'<' if strict else '<='} "
                         f"{high} = {b!r}")
