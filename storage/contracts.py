"""Stage contracts: what each pipeline stage reads, writes, runs and is configured by, declared once.

A :class:`Stage` is plain data. The task wrappers (``tasks/``), their cache keys, asset keys, the
output paths under a data dir, the lineage records and the report are derived from the declarations
in each library's ``stages.py`` (``corpus.stages.STAGES``, ``model.stages.STAGES``, ...), so a
stage's inputs and outputs are written down in one place.

Code versions are per stage: sha256 over the source of the stage function and of the modules it
declares, closed over their in-repo imports (:func:`module_closure`). Editing a module that a
stage does not import leaves its version, and so its cache key, unchanged.

The cache key that produced an output is stamped into it (:func:`stamp`, :func:`stamped_key`):
``produced_by`` in a table's ``manifest.json``, ``.producer.json`` in other folders. A cache hit
is valid only while every declared output still carries the key (:meth:`Stage.outputs_carry`).
"""
from __future__ import annotations

import ast
import hashlib
import importlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from storage.atomic import atomic_write_text
from storage.tables import MANIFEST_NAME

REPO_ROOT = Path(__file__).resolve().parent.parent
PRODUCER_FILE = ".producer.json"
# CPython 3.11's ast.parse is not safe to call from several threads at once ("AST constructor recursion depth
# mismatch"); mapped parts compute their cache keys in parallel threads, so parsing is serialised.
_PARSE_LOCK = threading.Lock()


def _parse(source: str) -> ast.Module:
    with _PARSE_LOCK:
        return ast.parse(source)


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's contract.

    Attributes:
        name: the stage (and Prefect task) name, e.g. ``"clean"``.
        fn: the library function that does the work, ``"package.module:function"``.
        reads: outputs of other stages it reads: paths relative to the data dir (``"documents"``,
            ``"models/pretrain"``); ``{param}`` placeholders are filled from the task's parameters.
        writes: the outputs it writes (same form). Each is a table folder (``manifest.json`` with
            shards) or a folder (checkpoint, index, report).
        code: modules whose source, with their in-repo imports, makes the stage's code version (beside
            the source of ``fn`` and of the helpers of its module it refers to: :func:`local_sources`).
        config: the dataclass type of its config, or None.
        files: names of task parameters that hold input files or folders outside the data dir
            (CSV export, stopwords, backbone checkpoints); their content enters the cache key.
        scratch: folders under the data dir it may also use that are not outputs (caches reused
            across runs); never part of a cache key.
        defaults: values of the ``{param}`` placeholders when the task is called without them (the
            main job's paths); the lineage lists outputs under these names.
    """

    name: str
    fn: str
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    code: tuple[str, ...] = ()
    config: type | None = None
    files: tuple[str, ...] = ()
    scratch: tuple[str, ...] = field(default=())
    defaults: Mapping[str, str] = field(default_factory=dict)

    def read_paths(self, data_dir: str | os.PathLike, params: Mapping[str, Any] | None = None) -> dict[str, Path]:
        """Declared inputs as ``{name: data_dir / name}`` (placeholders filled from ``params``, else ``defaults``)."""
        return {n: Path(data_dir) / n for n in _fill(self.reads, {**self.defaults, **(params or {})})}

    def write_paths(self, data_dir: str | os.PathLike, params: Mapping[str, Any] | None = None) -> dict[str, Path]:
        """Declared outputs as ``{name: data_dir / name}`` (placeholders filled from ``params``, else ``defaults``)."""
        return {n: Path(data_dir) / n for n in _fill(self.writes, {**self.defaults, **(params or {})})}

    def code_version(self) -> str:
        """16 hex chars: sha256 over the stage function's source and its declared modules' closure."""
        return _code_version(self.fn, self.code)

    def outputs_carry(self, data_dir: str | os.PathLike, key: str, params: Mapping[str, Any] | None = None) -> bool:
        """True when every declared output exists and was stamped with cache key ``key``."""
        return all(stamped_key(p) == key for p in self.write_paths(data_dir, params).values())

    def stamp_outputs(self, data_dir: str | os.PathLike, key: str, params: Mapping[str, Any] | None = None) -> None:
        """Record ``key`` (and the stage name) in every declared output that exists.

        Raises:
            FileNotFoundError: a declared output was not written by the stage.
        """
        for name, path in self.write_paths(data_dir, params).items():
            if not path.exists():
                raise FileNotFoundError(f"stage {self.name} did not write its declared output {name} ({path})")
            stamp(path, self.name, key)


def _fill(names: tuple[str, ...], params: Mapping[str, Any] | None) -> list[str]:
    return [n.format(**params) if "{" in n else n for n in names]


def stamp(path: str | os.PathLike, stage: str, key: str) -> None:
    """Write ``{"stage", "cache_key"}`` into a table's manifest (``produced_by``) or, for another folder,
    into its ``.producer.json``; atomically (one file replaced)."""
    p = Path(path)
    record = {"stage": stage, "cache_key": key}
    manifest = p / MANIFEST_NAME
    if manifest.is_file():
        m = json.loads(manifest.read_text(encoding="utf-8"))
        if "shards" in m:
            m["produced_by"] = record
            atomic_write_text(manifest, json.dumps(m, ensure_ascii=False, indent=1, sort_keys=True, default=str))
            return
    atomic_write_text(p / PRODUCER_FILE, json.dumps(record))


def stamped_key(path: str | os.PathLike) -> str | None:
    """The cache key an output was stamped with, or None (missing output, never stamped, unreadable)."""
    p = Path(path)
    try:
        manifest = p / MANIFEST_NAME
        if manifest.is_file():
            m = json.loads(manifest.read_text(encoding="utf-8"))
            if "shards" in m:
                return (m.get("produced_by") or {}).get("cache_key")
        producer = p / PRODUCER_FILE
        return json.loads(producer.read_text(encoding="utf-8"))["cache_key"] if producer.is_file() else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def module_file(module: str) -> Path | None:
    """The in-repo source file of a dotted module name (package ``__init__.py`` included), or None."""
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Dotted names a source file imports (absolute, relative resolved; ``from a import b`` gives a and a.b)."""
    tree = _parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
    return found


def module_closure(modules: tuple[str, ...] | list[str]) -> list[Path]:
    """Source files of ``modules`` and of every in-repo module they import, transitively (sorted).

    Imports inside functions count. Third-party and standard-library modules are not followed.
    """
    seen: dict[str, Path] = {}
    todo = list(modules)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        parts = mod.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            name = ".".join(parts[:i])
            f = module_file(name)
            if f is not None and name not in seen:
                seen[name] = f
                todo.extend(_imports(f, name))
    return sorted(set(seen.values()))


def local_sources(module: str, name: str) -> list[str]:
    """Source of ``module``'s top-level definition ``name`` and of every top-level definition of the same
    module it refers to, transitively (helpers, constants), in source order.

    Raises:
        KeyError: ``name`` is not defined at the top level of ``module``.
    """
    path = module_file(module)
    if path is None:
        raise KeyError(f"module {module} is not in this repo")
    source = path.read_text(encoding="utf-8")
    defs: dict[str, ast.stmt] = {}
    for node in _parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    defs[t.id] = node
    if name not in defs:
        raise KeyError(f"{module} defines no {name}")
    seen, todo = {name}, [name]
    while todo:
        for sub in ast.walk(defs[todo.pop()]):
            ref = sub.id if isinstance(sub, ast.Name) else None
            if ref in defs and ref not in seen:
                seen.add(ref)
                todo.append(ref)
    nodes = sorted({id(defs[n]): defs[n] for n in seen}.values(), key=lambda n: n.lineno)
    return [ast.get_source_segment(source, n) or "" for n in nodes]


def _code_version(fn: str, modules: tuple[str, ...]) -> str:
    mod_name, _, fn_name = fn.partition(":")
    h = hashlib.sha256()
    for src in local_sources(mod_name, fn_name):
        h.update(src.encode())
    for f in module_closure(modules):
        h.update(str(f.relative_to(REPO_ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def all_stages() -> list[Stage]:
    """Every declared stage of the pipeline, in pipeline order (from the libraries' ``stages.py``)."""
    out: list[Stage] = []
    for mod in ("crawler.stages", "corpus.stages", "model.stages", "retrieval.contracts"):
        out.extend(importlib.import_module(mod).STAGES)
    return out


def producer_of(output: str) -> Stage | None:
    """The declared stage that writes ``output`` (a data-dir relative name; placeholders at their defaults), or None."""
    for s in all_stages():
        if output in s.write_paths(".", {}):
            return s
    return None
