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


class BindingError(TypeError):
    """A stage's contract and its library function do not fit: a declared path no parameter takes, a parameter
    nothing gives, an ``args`` entry naming an unknown source or parameter."""


def stage_paths(stage: Stage, data_dir: str, **params) -> dict:
    """The stage's declared reads, writes and scratch folders under ``data_dir``, by name."""
    return {**{n: Path(data_dir) / n for n in stage.scratch}, **stage.read_paths(data_dir, params),
            **stage.write_paths(data_dir, params)}


def stage_function(stage: Stage) -> Callable:
    """The library function named by ``stage.fn`` (``"module:function"``)."""
    module, _, name = stage.fn.partition(":")
    return getattr(importlib.import_module(module), name)


def _record_path(record: Any) -> Path | None:
    return Path(record["path"]) if isinstance(record, dict) and record.get("path") else None


def binding_sources(stage: Stage, data_dir: str, params: Mapping[str, Any], part: Path | None = None) -> dict:
    """What ``stage.args`` may name, by name: the declared paths under ``data_dir``, ``"*reads"`` / ``"*writes"``,
    ``"*part"`` (``part``, for a ``part_file`` stage), ``"<param>.path"`` (the file of the record in a
    ``takes_parts`` parameter, None without one) and the task parameters."""
    reads, writes = stage.read_paths(data_dir, params), stage.write_paths(data_dir, params)
    records = {f"{p}.path": _record_path(params.get(p)) for p in stage.takes_parts}
    return {**stage_paths(stage, data_dir, **params), "*reads": reads, "*writes": writes,
            **({"*part": part} if stage.part_file is not None else {}), **records, **params}


def _source_name(stage: Stage, source: str, params: Mapping[str, Any]) -> str:
    """An ``args`` source with its ``{param}`` placeholders filled (from ``params``, else the defaults)."""
    return source.format(**{**stage.defaults, **params}) if "{" in source else source


def _check_args(stage: Stage, sig: inspect.Signature, sources: Mapping[str, Any], params: Mapping[str, Any]) -> None:
    open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values())
    for param, source in stage.args.items():
        if param not in sig.parameters and not open_kwargs:
            raise BindingError(f"stage {stage.name}: args binds {source!r} to parameter {param!r}, which {stage.fn} "
                               "does not take")
        if _source_name(stage, source, params) not in sources:
            raise BindingError(f"stage {stage.name}: args source {source!r} of parameter {param!r} is no declared "
                               "read, write or scratch folder, no record path and no task parameter")


def _check_paths_taken(stage: Stage, reads: Mapping[str, Path], writes: Mapping[str, Path],
                       params: Mapping[str, Any]) -> None:
    taken = {_source_name(stage, s, params) for s in stage.args.values()}
    taken |= set(reads) if "*reads" in taken else set()
    taken |= set(writes) if "*writes" in taken else set()
    for kind, names in (("read", reads), ("write", writes)):
        for name in names:
            if name not in taken:
                raise BindingError(f"stage {stage.name}: declared {kind} {name!r} is bound to no parameter of "
                                   f"{stage.fn}; name it in args ({{parameter: {name!r}}})")


def _check_covered(stage: Stage, sig: inspect.Signature, params: Mapping[str, Any], hooks: Mapping[str, Any]) -> None:
    for name, p in sig.parameters.items():
        if p.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if name in stage.args or name in params or name in hooks or p.default is not inspect.Parameter.empty:
            continue
        raise BindingError(f"stage {stage.name}: parameter {name!r} of {stage.fn} gets no declared path, task "
                           "parameter or default; bind it in args or declare the task parameter")


def bind(stage: Stage, fn: Callable, data_dir: str, params: Mapping[str, Any],
         hooks: Mapping[str, Callable[[], Any]] | None = None, part: Path | None = None) -> dict:
    """Keyword arguments of ``fn`` for one run, every one by name: the sources ``stage.args`` names
    (:func:`binding_sources`; ``part``: the part file of a ``part_file`` stage), the task parameters ``fn``
    names (dataclasses as dicts where ``fn`` takes a dict; when ``fn`` takes ``**kwargs``, also every declared
    input and input file of ``stage`` given in ``params``) and, for a parameter named in ``hooks`` that nothing
    else binds, ``hooks[name]()`` (callbacks: progress, per-worker loading; left to the function's default
    without one). The order of the declared reads and writes never matters (SPEC §1).

    Raises:
        BindingError: a declared read or write that no ``args`` entry takes, an ``fn`` parameter that no path,
            task parameter, hook or default covers, or an ``args`` entry naming an unknown source or parameter
            (each message names the stage and the path or parameter).
    """
    sig, hooks = inspect.signature(fn), hooks or {}
    sources = binding_sources(stage, data_dir, params, part)
    _check_args(stage, sig, sources, params)
    _check_paths_taken(stage, sources["*reads"], sources["*writes"], params)
    _check_covered(stage, sig, params, hooks)
    kwargs = {p: sources[_source_name(stage, src, params)] for p, src in stage.args.items()}
    for name, p in sig.parameters.items():
        if name in kwargs or name not in params:
            continue
        kwargs[name] = jsonable(params[name]) if p.annotation in (dict, "dict") else params[name]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        # a function taking **kwargs gets the stage's declared inputs given to the task by name (the index
        # stage: each serving part's setting, retrieval.serving_parts.index_inputs)
        for name in dict.fromkeys((*stage.inputs, *stage.files)):
            if name in params and name not in kwargs:
                kwargs[name] = params[name]
    for name in set(hooks) & set(sig.parameters) - set(kwargs):
        kwargs[name] = hooks[name]()
    return kwargs
