"""Stage tasks derived from the stage contracts (:mod:`storage.contracts`): name, cache key, result storage.

The cache key of a stage task is sha256 over: the stage name, the task body's source, the stage's
code version (its function, helpers and modules: per stage, not per package), its parameters
(configs as JSON), the content fingerprints of the tables it reads (shards only) and of its input
files (their content, not where they lie: a moved repository or corpus folder still hits). Config
and code enter the producing stage's key, never a table's identity, so a stage whose output comes out
byte-identical stops the re-runs below it (early cut-off).

A hit counts only while the outputs are really there: every declared output carries the key in its
manifest (``produced_by``) or ``.producer.json``, stamped right after the stage ran; a mapped part's
file named by its key (``Stage.part_file``) exists. Otherwise the cached record is dropped and the stage
runs again (a folder deleted by hand, a profile switched A -> B -> A in one data dir).

Results are JSON records in Prefect's local result storage. Before Prefect looks a key up, the key
function parses the record as plain JSON (nothing in it is decoded or imported) and drops it unless every
field is what this project writes (:func:`record_is_safe`): the ``json`` serializer with Prefect's own
encoder/decoder and no extra arguments, no storage block, and a result whose JSON holds no object that
Prefect's decoder would turn into a class or exception (``__class__`` / ``__exc_type__`` keys). A record
edited to ``pickle``, to another decoder (any importable callable) or to a payload naming a class is a cache
miss, never deserialized: the stage runs again and rewrites it.
"""
from __future__ import annotations

import functools
import inspect
import json
from pathlib import Path
from typing import Any, Callable

from prefect import task

from storage import json_sha256, path_fingerprint
from storage.binding import jsonable
from storage.contracts import Stage
from storage.mapped import part_file, parts_dir


def record_path(key: str) -> Path:
    """Where Prefect's local result storage keeps the cache record of ``key`` (``PREFECT_LOCAL_STORAGE_PATH``:
    the data dir's ``.prefect/storage`` for CLI runs)."""
    from prefect.settings import get_current_settings

    return Path(get_current_settings().results.local_storage_path).expanduser() / key


#: The serializer fields of every record this project writes (``result_serializer="json"``, Prefect's defaults).
PROJECT_SERIALIZER = {
    "type": "json", "jsonlib": "json",
    "object_encoder": "prefect.serializers.prefect_json_object_encoder",
    "object_decoder": "prefect.serializers.prefect_json_object_decoder",
    "dumps_kwargs": {}, "loads_kwargs": {},
}
_METADATA_KEYS = {"storage_key", "expiration", "serializer", "prefect_version", "storage_block_id"}
_CODE_KEYS = ("__class__", "__exc_type__")  # what prefect_json_object_decoder resolves to a class by name
MAX_RECORD_BYTES = 64 * 1024 * 1024


def _names_code(value: Any) -> bool:
    """True when a plain-JSON value holds, at any depth, a dict that Prefect's JSON decoder would resolve to a
    class or exception by name (iterative: no recursion limit)."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if any(k in v for k in _CODE_KEYS):
                return True
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
    return False


def record_is_safe(path: Path) -> bool:
    """True when the cache record at ``path`` is exactly what this project writes (see the module docstring):
    a JSON object ``{"metadata", "result"}`` whose serializer equals :data:`PROJECT_SERIALIZER`, with no
    storage block, and whose ``result`` is JSON text naming no class. Parsed as plain JSON only: nothing in it
    is deserialized, imported or run. Unreadable, oversized (> 64 MiB) or malformed records are False."""
    try:
        if path.stat().st_size > MAX_RECORD_BYTES:
            return False
        doc = json.loads(path.read_bytes())
        meta = doc["metadata"] if isinstance(doc, dict) else None
        if not isinstance(meta, dict) or set(doc) != {"metadata", "result"} or not set(meta) <= _METADATA_KEYS:
            return False
        if meta.get("serializer") != PROJECT_SERIALIZER or meta.get("storage_block_id") is not None:
            return False
        if not all(isinstance(meta.get(k), (str, type(None))) for k in ("storage_key", "expiration", "prefect_version")):
            return False
        return isinstance(doc["result"], str) and not _names_code(json.loads(doc["result"]))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False


def drop_record(key: str) -> None:
    """Delete the cache record of ``key`` (none: nothing to do); the task then runs as a cache miss."""
    record_path(key).unlink(missing_ok=True)


def stage_cache_key(stage: Stage, task_source: str) -> Callable[[Any, dict], str]:
    """A Prefect ``cache_key_fn`` for ``stage`` (see the module docstring). ``task_source``: the task body's
    source, read once where the task is defined (a task shipped by value to a Dask worker process has no source
    file to read there). A mapped part (or plan) declaring ``part_file`` is valid while the file (or folder)
    that :func:`storage.mapped.part_file` names by the key exists."""

    def key(context, parameters: dict) -> str:
        data_dir = Path(parameters["data_dir"])
        cfg = parameters.get("cfg")
        if stage.config is not None and cfg is not None and not isinstance(cfg, stage.config):
            raise TypeError(f"stage {stage.name} takes a {stage.config.__name__}, got {type(cfg).__name__}")
        k = json_sha256({
            "stage": stage.name,
            "task": task_source,
            "code": stage.code_version(),
            "params": jsonable({n: v for n, v in parameters.items() if n != "data_dir" and n not in stage.files}),
            "inputs": {n: path_fingerprint(p) for n, p in stage.read_paths(data_dir, parameters).items()},
            "files": {p: path_fingerprint(parameters[p]) for p in stage.files if parameters.get(p)},
        })
        valid = (part_file(parts_dir(data_dir, stage.name), k, stage.part_file).exists()
                 if stage.part_file is not None else stage.outputs_carry(data_dir, k, parameters))
        record = record_path(k)
        if record.exists() and not (valid and record_is_safe(record)):
            drop_record(k)
        return k

    return key


def current_key() -> str:
    """The cache key of the running stage task (its Prefect transaction key).

    Raises:
        RuntimeError: called outside a cached task run.
    """
    from prefect.transactions import get_transaction

    txn = get_transaction()
    if txn is None or not txn.key:
        raise RuntimeError("no cache key: not inside a cached stage task")
    return txn.key


def _stamping(stage: Stage, fn: Callable) -> Callable:
    """``fn`` followed by stamping the stage's declared outputs with the running task's cache key."""
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def run(*args, **kwargs):
        out = fn(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        stage.stamp_outputs(bound.arguments["data_dir"], current_key(), bound.arguments)
        return out

    return run


def _plain_result(fn: Callable) -> Callable:
    """``fn`` with its result made plain JSON (:func:`jsonable`), so that its record names no class and is
    read back by :func:`record_is_safe` as a hit, identical to what the first run returned."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return jsonable(fn(*args, **kwargs))

    return run


def stage_task(stage: Stage, *, source: str = "", **options) -> Callable[[Callable], Any]:
    """Decorator: the Prefect task of ``stage``, named after it, cached by :func:`stage_cache_key`, its
    result persisted as JSON, its declared outputs stamped with the key after it ran (a ``part_file`` stage
    has none: its file is named by the key).

    The decorated function takes ``data_dir`` as its first parameter. ``source``: more code whose text enters
    the cache key beside the function's own (the helpers a generic body calls). ``options`` go to
    ``prefect.task`` (retries for GPU work, tags).
    """

    def decorate(fn: Callable):
        body = _plain_result(fn if stage.part_file is not None or not stage.writes else _stamping(stage, fn))
        return task(name=stage.name, cache_key_fn=stage_cache_key(stage, inspect.getsource(body) + source),
                    persist_result=True, result_serializer="json", **options)(body)

    return decorate
