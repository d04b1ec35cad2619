"""Cache keys from content (not from pickled Python objects).

A key is sha256 over: the task's name and source, the code version of the library packages it
wraps, its parameters (configs as JSON, paths as given), the fingerprints of its input tables and
folders under ``data_dir`` (manifest shard hashes), and the sha256 of input files. Nothing changed
-> the same key -> a cache hit; any input, config or code edit -> a new key.
"""
from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any, Callable, Iterable

from storage import code_version, json_sha256, path_fingerprint


def jsonable(value: Any) -> Any:
    """Dataclasses -> dicts, paths -> str, recursively; other values unchanged."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def content_cache_key(inputs: Iterable[str] = (), files: Iterable[str] = (), packages: Iterable[str] = ()
                      ) -> Callable[[Any, dict], str]:
    """Build a Prefect ``cache_key_fn``.

    Args:
        inputs: paths relative to the task's ``data_dir`` parameter whose fingerprints enter the key;
            ``{name}`` placeholders are filled from the task's parameters (e.g. ``"{dataset}"``).
        files: names of parameters holding file/folder paths whose content enters the key.
        packages: library packages whose source (code version) enters the key.
    """
    inputs, files, packages = tuple(inputs), tuple(files), tuple(packages)

    def key(context, parameters: dict) -> str:
        data_dir = Path(parameters["data_dir"])
        task = context.task
        return json_sha256({
            "task": task.name,
            "source": inspect.getsource(task.fn),
            "code": code_version(packages) if packages else "",
            "params": jsonable(parameters),
            "inputs": {name: path_fingerprint(data_dir / name.format(**parameters)) for name in inputs},
            "files": {p: path_fingerprint(parameters[p]) for p in files if parameters.get(p)},
        })

    return key
