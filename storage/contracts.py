"""Stage contracts: what each pipeline stage reads, writes, runs and is configured by, declared once.

A :class:`Stage` is plain data. The task wrappers (``tasks/``), their cache keys, asset keys, the
output paths under a data dir, the lineage records and the report are derived from the declarations
in each library's ``stages.py`` (``corpus.stages.STAGES``, ``model.stages.STAGES``, ...), so a
stage's inputs and outputs are written down in one place.

Code versions are per stage: sha256 over the source of the stage function and of the modules it
declares, closed over their in-repo imports (:func:`module_closure`). Editing a module that a
stage does not import leaves its version, and so its cache key, unchanged.

Mapped stages (plan -> parts -> merge: segmentation, embedding) are declared the same way: ``part_file``
for a step whose one file is named by its task's cache key, ``takes_parts`` for the parameters that carry
such files' records (:mod:`storage.mapped`).

The cache key that produced an output is stamped into it (:func:`stamp`, :func:`stamped_key`):
``produced_by`` in a table's ``manifest.json``, ``.producer.json`` in other folders. A cache hit
is valid only while every declared output still carries the key (:meth:`Stage.outputs_carry`).
"""
from __future__ import annotations

import ast
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from storage.atomic import atomic_write_text
from storage.mapped import PARTS_ROOT
from storage.tables import MANIFEST_NAME

REPO_ROOT = Path(__file__).resolve().parent.parent
PRODUCER_FILE = ".producer.json"
# CPython 3.11's ast.parse is not safe to call from several threads at once ("AST constructor recursion depth
# mismatch"); mapped parts compute their cache keys in parallel threads, so parsing is serialised.
_PARSE_LOCK = threading.Lock()


def _parse(source: str) -> ast.Module:
    with _PARSE_LOCK:
        return ast.parse(source)


OUTPUT_KINDS = ("table", "checkpoint", "folder", "versioned")


class Output(str):
    """A declared output: its data-dir relative path (the string itself) and its kind.

    Kinds: ``table`` (a ``manifest.json`` with shards: :mod:`storage.tables`), ``checkpoint`` (a model
    folder with ``metrics.json``), ``versioned`` (a folder of ``vN`` versions and a ``CURRENT`` pointer:
    the index) and ``folder`` (anything else: tokenizer, report, a folder of tables).

    Raises:
        ValueError: an unknown kind.
    """

    kind: str

    def __new__(cls, path: str, kind: str = "table") -> "Output":
        if kind not in OUTPUT_KINDS:
            raise ValueError(f"output {path!r}: unknown kind {kind!r} (known: {', '.join(OUTPUT_KINDS)})")
        obj = super().__new__(cls, path)
        obj.kind = kind
        return obj


def table(path: str) -> Output:
    """A table output (``manifest.json`` with shards)."""
    return Output(path, "table")


def checkpoint(path: str) -> Output:
    """A model checkpoint output (a folder with ``metrics.json``)."""
    return Output(path, "checkpoint")


def folder(path: str) -> Output:
    """A folder output that is neither a table nor a checkpoint (tokenizer, report, folder of tables)."""
    return Output(path, "folder")


def versioned(path: str) -> Output:
    """A versioned folder output (``vN`` versions and a ``CURRENT`` pointer: the index)."""
    return Output(path, "versioned")


@dataclass(frozen=True)
class Stage:
    """One pipeline stage's contract.

    Attributes:
        name: the stage (and Prefect task) name, e.g. ``"clean"``.
        fn: the library function that does the work, ``"package.module:function"``.
        reads: outputs of other stages it reads: paths relative to the data dir (``"documents"``,
            ``"models/pretrain"``); ``{param}`` placeholders are filled from the task's parameters.
        writes: the outputs it writes, typed (:class:`Output`: :func:`table`, :func:`checkpoint`,
            :func:`folder`, :func:`versioned`); same path form as ``reads``.
        code: extra modules for the code version. The version covers the source of ``fn``, of the helpers
            of its module it refers to (:func:`local_sources`) and of every in-repo module those import
            (module-level names they use and function-level imports; :func:`used_modules`), closed over
            their imports: ``code`` is only for modules reached otherwise (data files, plugins).
        config: the dataclass type of its config, or None.
        settings: the stage task's parameters taken from the run's ``PipelineConfig``, as
            ``{parameter: field path}`` (``{"cfg": "clean"}``, ``{"cfg": "pretrain", "epochs": "pretrain_epochs"}``);
            every field is reachable from ``--set``. Passed to ``fn``'s parameter of the same name.
        inputs: the stage task's parameters given by the flow's caller (input files, backbones, column
            mappings: ``files`` are among them), passed to ``fn`` by name.
        args: how ``fn``'s parameters are given the declared paths, by name: ``{fn parameter: source}``, the
            source a declared read, write or scratch name (``{param}`` placeholders as declared), a task
            parameter, ``"*reads"`` / ``"*writes"`` (``{name: path}`` of all of them), ``"*part"`` (the part file
            of a ``part_file`` stage) or ``"<param>.path"`` (the file of the record in ``takes_parts``
            parameter ``param``). Every declared read and write is named here (or through ``*reads`` /
            ``*writes``); :func:`storage.binding.bind` refuses a contract that leaves one out. Task parameters
            reach ``fn``'s parameters of the same name without an entry.
        keep: the keys of ``fn``'s result the task returns (all when empty).
        gpu: the stage runs on a GPU (the task is retried once and tagged ``gpu``).
        files: names of task parameters that hold input files or folders outside the data dir
            (CSV export, stopwords, backbone checkpoints); their content enters the cache key.
        scratch: folders under the data dir it may also use that are not outputs (caches reused
            across runs); never part of a cache key. The part folders of a mapped stage (its own, and those
            of the stages whose records it takes) are added from ``part_file`` / ``takes_parts``.
        defaults: values of the ``{param}`` placeholders when the task is called without them (the
            main job's paths); the lineage lists outputs under these names.
        part_file: a mapped part (or a plan that stages files): the suffix of the one file it writes
            (``".parquet"``, ``".npz"``; ``""``: a folder), named by its task's cache key under
            ``cache/parts/<name>`` (:func:`storage.mapped.part_file`) and bound through ``"*part"``; its task
            returns the function's result as a record whose ``path`` is relative to the data dir
            (:func:`storage.mapped.carried_record`). Such a stage declares no ``writes``; its cache hit is valid
            while the file exists.
        takes_parts: ``{task parameter: mapped stage}``: parameters holding the records (one, or a list in
            part order) that a ``part_file`` stage returned; their paths are made absolute before ``fn`` is
            called. A stage that takes parts and has ``writes`` is a merge: once it has run, the part files of
            those stages that its records do not name (earlier plans and parts) are removed.
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
    settings: Mapping[str, str] = field(default_factory=dict)
    inputs: tuple[str, ...] = ()
    args: Mapping[str, str] = field(default_factory=dict)
    keep: tuple[str, ...] = ()
    gpu: bool = False
    part_file: str | None = None
    takes_parts: Mapping[str, str] = field(default_factory=dict)

    @property
    def parameters(self) -> tuple[str, ...]:
        """The stage task's parameters after ``data_dir``: settings, inputs, records taken, files, then
        placeholders."""
        return tuple(dict.fromkeys([*self.settings, *self.inputs, *self.takes_parts, *self.files, *self.defaults]))

    @property
    def merges(self) -> bool:
        """True for the merge of a mapped stage: it takes part records and writes declared outputs."""
        return bool(self.takes_parts) and bool(self.writes)

    def __post_init__(self) -> None:
        untyped = [w for w in self.writes if not isinstance(w, Output)]
        if untyped:
            raise TypeError(f"stage {self.name}: outputs {untyped} have no kind (declare them with table(), "
                            "checkpoint(), folder() or versioned())")
        if self.part_file is not None and self.writes:
            raise ValueError(f"stage {self.name}: a part_file stage writes its part file only, not {list(self.writes)}")
        mapped = ([self.name] if self.part_file is not None else []) + list(self.takes_parts.values())
        parts = [f"{PARTS_ROOT}/{n}" for n in mapped]
        object.__setattr__(self, "scratch", tuple(dict.fromkeys([*self.scratch, *parts])))

    def output_kinds(self, params: Mapping[str, Any] | None = None) -> dict[str, str]:
        """``{output name: kind}`` of the declared outputs (placeholders filled as in :meth:`write_paths`)."""
        names = _fill(self.writes, {**self.defaults, **(params or {})})
        return {n: w.kind for n, w in zip(names, self.writes)}

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


def stamp_record(path: str | os.PathLike) -> dict | None:
    """The ``{"stage", "cache_key"}`` record an output was stamped with, or None (missing output, never
    stamped, unreadable)."""
    p = Path(path)
    try:
        manifest = p / MANIFEST_NAME
        if manifest.is_file():
            m = json.loads(manifest.read_text(encoding="utf-8"))
            if "shards" in m:
                return m.get("produced_by") or None
        producer = p / PRODUCER_FILE
        return json.loads(producer.read_text(encoding="utf-8")) if producer.is_file() else None
    except (OSError, ValueError, TypeError):
        return None


def stamped_key(path: str | os.PathLike) -> str | None:
    """The cache key an output was stamped with, or None (missing output, never stamped, unreadable)."""
    record = stamp_record(path)
    return record.get("cache_key") if isinstance(record, dict) else None


def module_file(module: str) -> Path | None:
    """The in-repo source file of a dotted module name (package ``__init__.py`` included), or None."""
    base = REPO_ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _package(path: Path, module: str) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _resolve(node: ast.ImportFrom, package: str) -> str:
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
    return base


def _node_imports(nodes, package: str) -> set[str]:
    """Dotted names the import statements in ``nodes`` (walked) import (``from a import b`` gives a and a.b)."""
    found: set[str] = set()
    for top in nodes:
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, package)
                found.add(base)
                found.update(f"{base}.{a.name}" for a in node.names)
    return found


def _imports(path: Path, module: str) -> set[str]:
    """Dotted names a source file imports, module level and inside functions (relative imports resolved)."""
    return _node_imports([_parse(path.read_text(encoding="utf-8"))], _package(path, module))


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


def _top_level(tree: ast.Module) -> tuple[dict[str, ast.stmt], dict[str, str]]:
    """A module's top-level definitions by name, and the names its top-level imports bind -> module."""
    defs: dict[str, ast.stmt] = {}
    bound: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(t, ast.Name):
                    defs[t.id] = node
        elif isinstance(node, ast.Import):
            bound.update({a.asname or a.name.split(".")[0]: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom):
            bound.update({a.asname or a.name: f"{node.module}.{a.name}" for a in node.names if node.level == 0})
    return defs, bound


def _local_defs(module: str, name: str) -> tuple[str, list[ast.stmt], dict[str, str], Path]:
    """Source of ``module``, the top-level definitions ``name`` refers to transitively (in source order),
    the module's import bindings, and its file.

    Raises:
        KeyError: ``name`` is not defined at the top level of ``module`` (or the module is not in this repo).
    """
    path = module_file(module)
    if path is None:
        raise KeyError(f"module {module} is not in this repo")
    source = path.read_text(encoding="utf-8")
    defs, bound = _top_level(_parse(source))
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
    return source, nodes, bound, path


def local_sources(module: str, name: str) -> list[str]:
    """Source of ``module``'s top-level definition ``name`` and of every top-level definition of the same
    module it refers to, transitively (helpers, constants), in source order.

    Raises:
        KeyError: ``name`` is not defined at the top level of ``module``.
    """
    source, nodes, _, _ = _local_defs(module, name)
    return [ast.get_source_segment(source, n) or "" for n in nodes]


def used_modules(module: str, name: str) -> set[str]:
    """In-repo modules that ``module:name`` (with its local helpers, :func:`local_sources`) uses: those bound
    by the module's top-level imports whose names the code refers to, and those its function-level (lazy)
    imports name. Third-party names are kept too; :func:`module_closure` skips what is not in this repo.

    Raises:
        KeyError: as :func:`local_sources`.
    """
    _, nodes, bound, path = _local_defs(module, name)
    used = {bound[n.id] for top in nodes for n in ast.walk(top) if isinstance(n, ast.Name) and n.id in bound}
    return used | _node_imports(nodes, _package(path, module))


def code_modules(fn: str, extra: tuple[str, ...] = ()) -> list[Path]:
    """Source files whose content makes the code version of stage function ``fn`` (``"module:function"``):
    the closure (:func:`module_closure`) of what it uses (:func:`used_modules`) and of ``extra``."""
    mod_name, _, fn_name = fn.partition(":")
    return module_closure(sorted(used_modules(mod_name, fn_name) | set(extra)))


def _code_version(fn: str, modules: tuple[str, ...]) -> str:
    mod_name, _, fn_name = fn.partition(":")
    h = hashlib.sha256()
    for src in local_sources(mod_name, fn_name):
        h.update(src.encode())
    for f in code_modules(fn, modules):
        h.update(str(f.relative_to(REPO_ROOT)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@dataclass(frozen=True)
class Registry:
    """The stages of one pipeline, in pipeline order. Built at the top (``flows/``) from the libraries'
    ``STAGES`` and passed down, so that ``storage`` imports no layer above it.

    Raises:
        ValueError: two stages share a name.
    """

    stages: tuple[Stage, ...]

    def __post_init__(self) -> None:
        names = [s.name for s in self.stages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"stages declared twice: {dupes}")

    def __iter__(self):
        return iter(self.stages)

    def named(self, name: str) -> Stage:
        """The stage called ``name``.

        Raises:
            KeyError: no stage has that name.
        """
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(f"no stage contract named {name!r}")

    def producer_of(self, output: str, params: Mapping[str, Any] | None = None) -> Stage | None:
        """The stage that writes ``output`` (placeholders filled from ``params``, else defaults), or None."""
        for s in self.stages:
            if output in s.write_paths(".", params):
                return s
        return None
