"""A stage's library function and its keyword arguments for one run, from its contract (SPEC §1: one
``Stage`` declaration per stage). Used by the Prefect tasks (:mod:`tasks.stages`) and by anything that runs
a stage without Prefect (the whole-job benchmark); imports no orchestration code."""
from __future__ import annotations

import dataclasses
import importlib
import inspect
from pathlib import Path
from typing import Any, Callable, Mapping

from storage.contracts import Stage


def jsonable(value: Any) -> Any:
    """Dataclasses -> dicts, paths -> str, numpy scalars/arrays -> Python numbers/lists, recursively; other
    values unchanged."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalar/array -> Python values
        return value.tolist()
    return value


def stage_paths(stage: Stage, data_dir: str, **params) -> dict:
    """The stage's declared reads, writes and scratch folders under ``data_dir``, by name."""
    return {**{n: Path(data_dir) / n for n in stage.scratch}, **stage.read_paths(data_dir, params),
            **stage.write_paths(data_dir, params)}


def stage_function(stage: Stage) -> Callable:
    """The library function named by ``stage.fn`` (``"module:function"``)."""
    module, _, name = stage.fn.partition(":")
    return getattr(importlib.import_module(module), name)


def bind(stage: Stage, fn: Callable, data_dir: str, params: Mapping[str, Any],
         hooks: Callable[[str], Callable] | None = None) -> dict:
    """Keyword arguments of ``fn`` for one run: the declared paths (those ``stage.args`` binds by name, the
    other reads then writes positionally to the parameters ``args`` leaves), the task parameters ``fn`` names
    (dataclasses as dicts where ``fn`` takes a dict) and, for an ``on_step`` / ``on_progress`` parameter,
    ``hooks(name)`` (left to the function's default without ``hooks``).

    Raises:
        KeyError: an ``args`` source that is neither a declared path nor a task parameter.
    """
    sig = inspect.signature(fn)
    reads, writes = stage.read_paths(data_dir, params), stage.write_paths(data_dir, params)
    sources = {**stage_paths(stage, data_dir, **params), "*reads": reads, "*writes": writes, **params}
    named = set(stage.args.values())
    named |= set(reads) if "*reads" in named else set()
    named |= set(writes) if "*writes" in named else set()
    declared = {**reads, **writes}
    free = [p for p in sig.parameters if p not in stage.args]
    kwargs = dict(zip(free, [path for name, path in declared.items() if name not in named]))
    kwargs.update({p: sources[src] for p, src in stage.args.items()})
    for name, p in sig.parameters.items():
        if name in kwargs or name not in params:
            continue
        kwargs[name] = jsonable(params[name]) if p.annotation in (dict, "dict") else params[name]
    if hooks is not None:
        for hook in {"on_step", "on_progress"} & set(sig.parameters):
            kwargs[hook] = hooks(hook)
    return kwargs
