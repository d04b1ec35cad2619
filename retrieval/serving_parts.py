"""Serving parts declared once (SPEC §7, §9): what an index version holds besides its dense and sparse sides,
each part a :class:`ServingPart` — plain data, as :class:`storage.contracts.Stage` is for a pipeline stage.

From the declarations are derived: the index stage's inputs and input files (:func:`index_inputs`), what the
index stage installs or fits into a staged version (:func:`part_sources`, :func:`fitted_parts`), the load-time
check of every part a manifest records (:func:`check_parts`) and the one loader (:func:`load_part`). A part's
name is spelled in its declaration and its own module only.

Each library declares its own parts in its own module (retrieval: :data:`TEXTS_PART`, :data:`RERANKER_PART`
here; the policy records in ``retrieval.policy_records``; ``docmatch.parts``; ``answers.parts``); :data:`REGISTRY`
names those tuples as ``"module:NAME"`` strings resolved when first asked for (:func:`serving_parts`), as a stage's ``fn`` is, so retrieval never imports a
layer above it. Adding a part: its declaration (and loader) in its library's module, one test.
"""
from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from retrieval.parts import TEXTS, TEXTS_FILE

ROLES = ("texts", "searcher", "reranker", "reader", "related", "metadata")
BUILDS = ("written", "installed", "fitted")
REGISTRY = ("retrieval.serving_parts:PARTS", "retrieval.policy_records:PARTS", "docmatch.parts:PARTS",
            "answers.parts:PARTS")


@dataclass(frozen=True)
class ServingPart:
    """One serving part of an index version, declared once.

    Attributes:
        name: the part's key under the manifest's ``parts`` (e.g. ``"answer_scorer"``).
        role: one of :data:`ROLES` (the loader composes searcher -> reranker* -> reader).
        file: its file name in the version folder.
        build: ``"written"`` (by the index stage itself: the texts), ``"installed"`` (a file fitted elsewhere,
            :class:`retrieval.parts.PartSource`) or ``"fitted"`` (on the staged version,
            :class:`retrieval.parts.FittedPart`).
        setting: the index-stage input (a ``PipelineConfig`` field) naming the file to install, or None.
        fallback_setting: the index-stage input naming a second file, installed when the first is refused
            (another encoder's scorer: an encoder-free one answers over any), or None.
        pins: provenance keys (``info.provenance`` of the file) that must equal the version's
            (:func:`retrieval.parts.version_identity`): ``encoder_model_id``, ``segmenter``.
        pins_if_named: provenance keys matched only when the file names them (a scorer fitted on the answer
            cross-encoder's scores; a learned reranker's encoder).
        fit: ``"module:function"``: ``(inputs: {setting: value}) -> FittedPart | None``, the part fitted on the
            staged version from ``fit_settings`` (None: not asked for); a fitted part replaces an installed one.
        fit_settings: the index-stage inputs the fit reads (question set, pair file, corpus).
        record: ``"module:function"``: ``() -> dict``, fields pinned into the part's manifest record (a
            reader's answer settings), or None.
        load: ``"module:function"``: ``(bundle, path) -> object``, the loaded part (``path`` already checked).
        check: how the part is checked at load: ``"sha256"`` (its file and any weights file its record
            names, against the manifest).
    """

    name: str
    role: str
    file: str
    build: str = "installed"
    setting: str | None = None
    fallback_setting: str | None = None
    pins: tuple[str, ...] = ()
    pins_if_named: tuple[str, ...] = ()
    fit: str | None = None
    fit_settings: tuple[str, ...] = ()
    record: str | None = None
    load: str | None = None
    check: str = "sha256"

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"serving part {self.name}: unknown role {self.role!r} (known: {', '.join(ROLES)})")
        if self.build not in BUILDS:
            raise ValueError(f"serving part {self.name}: unknown build {self.build!r} (known: {', '.join(BUILDS)})")
        if Path(self.file).name != self.file or not self.file:
            raise ValueError(f"serving part {self.name}: file {self.file!r} is not a plain file name")

    @property
    def inputs(self) -> tuple[str, ...]:
        """The index-stage inputs this part reads (its ``setting``, ``fallback_setting``, then its
        ``fit_settings``)."""
        return tuple(dict.fromkeys([*(s for s in (self.setting, self.fallback_setting) if s), *self.fit_settings]))


def resolve(ref: str) -> Any:
    """The object ``"package.module:NAME"`` names (imported now).

    Raises:
        ValueError: not of the form ``module:name``. ImportError / AttributeError: no such module or name.
    """
    mod, sep, attr = ref.partition(":")
    if not sep or not mod or not attr:
        raise ValueError(f"{ref!r} is not a 'module:name' reference")
    return getattr(importlib.import_module(mod), attr)


def serving_parts(registry: Iterable[str] | None = None) -> tuple[ServingPart, ...]:
    """Every declared serving part of ``registry`` (default :data:`REGISTRY`), in registry order (install
    order: a part may pin one installed before it).

    Raises:
        ValueError: two declarations share a name or a file.
    """
    parts = tuple(p for ref in (REGISTRY if registry is None else registry) for p in resolve(ref))
    for attr in ("name", "file"):
        seen = [getattr(p, attr) for p in parts]
        dupes = sorted({v for v in seen if seen.count(v) > 1})
        if dupes:
            raise ValueError(f"serving parts declared twice ({attr}): {dupes}")
    return parts


def declared(name: str, parts: Iterable[ServingPart] | None = None) -> ServingPart:
    """The declaration of part ``name``.

    Raises:
        KeyError: no part of that name is declared.
    """
    for p in serving_parts() if parts is None else parts:
        if p.name == name:
            return p
    raise KeyError(f"no serving part named {name!r} is declared")


def index_inputs(parts: Iterable[ServingPart]) -> tuple[str, ...]:
    """The index stage's inputs (and input files: their content enters its cache key) the parts read."""
    return tuple(dict.fromkeys(i for p in parts for i in p.inputs))


def part_modules(parts: Iterable[ServingPart], registry: Iterable[str] | None = None) -> tuple[str, ...]:
    """The modules the declarations name (the registry's, each part's fit, record and loader): what the index
    stage's code version covers beside its function (:attr:`storage.contracts.Stage.code`)."""
    refs = [*(REGISTRY if registry is None else registry),
            *(r for p in parts for r in (p.fit, p.record, p.load) if r)]
    return tuple(dict.fromkeys(r.partition(":")[0] for r in refs))


def part_sources(parts: Iterable[ServingPart], inputs: Mapping[str, Any], skip: Iterable[str] = ()) -> tuple:
    """:class:`retrieval.parts.PartSource` of every installed part whose ``setting`` is given in ``inputs``
    (those named in ``skip``, e.g. fitted instead, left out), its pins read from the file's provenance; the
    file its ``fallback_setting`` gives, when given, as the source's ``fallback``."""
    from retrieval.parts import PartSource

    out, skip = [], set(skip)
    for p in parts:
        path = inputs.get(p.setting) if p.setting and p.build == "installed" else None
        if not path or p.name in skip:
            continue
        spare = inputs.get(p.fallback_setting) if p.fallback_setting else None
        fallback = PartSource(p.name, p.file, str(spare), requires=_requires(p, spare), meta=_record(p)) if spare else None
        out.append(PartSource(p.name, p.file, str(path), requires=_requires(p, path), meta=_record(p),
                              fallback=fallback))
    return tuple(out)


def _requires(p: ServingPart, path) -> tuple[str, ...]:
    """The provenance keys file ``path`` must match for part ``p``: its pins, and those of ``pins_if_named`` the
    file names."""
    from retrieval.parts import read_provenance

    named = read_provenance(path, p.name) if p.pins_if_named else {}
    return tuple(dict.fromkeys((*p.pins, *(k for k in p.pins_if_named if k in named))))


def fitted_parts(parts: Iterable[ServingPart], inputs: Mapping[str, Any]) -> tuple:
    """:class:`retrieval.parts.FittedPart` of every part with a ``fit`` that is asked for (its factory returns
    one from ``inputs``), named and filed as declared, its ``record`` fields added to the fit's."""
    from retrieval.parts import FittedPart

    out = []
    for p in parts:
        made = resolve(p.fit)(inputs) if p.fit else None
        if made is None:
            continue
        out.append(FittedPart(p.name, p.file, _with_record(made.fit, _record(p))))
    return tuple(out)


def _with_record(fit: Callable, extra: dict) -> Callable:
    def run(root: Path, version: str):
        text, fields = fit(root, version)
        return text, ({**fields, **extra} if text is not None else fields)

    return run


def _record(p: ServingPart) -> dict:
    return dict(resolve(p.record)()) if p.record else {}


def check_parts(vdir: str | os.PathLike, manifest: dict, parts: Iterable[ServingPart] | None = None) -> list[str]:
    """Check every declared part the manifest records as installed (:func:`retrieval.parts.part_path`: present,
    sha256 as published; the weights files its record names too); returns the names checked.

    Raises:
        retrieval.parts.PartError: a part's file is missing or changed (the message names it).
    """
    from retrieval.parts import PartError, part_installed, part_path
    from storage.hashing import file_sha256

    vdir, done = Path(vdir), []
    for p in serving_parts() if parts is None else parts:
        if not part_installed(manifest, p.name):
            continue
        part_path(vdir, manifest, p.name)
        for f, sha in ((manifest["parts"][p.name].get("files") or {}).items()):
            if Path(f).name != f or not (vdir / f).is_file() or file_sha256(vdir / f) != sha:
                raise PartError(f"index {manifest.get('version')}: {p.name} file {f} is missing or changed since "
                                "the version was published (sha256 mismatch): roll back or rebuild")
        done.append(p.name)
    return done


def load_part(bundle, part: ServingPart) -> Any:
    """Part ``part`` of the loaded version ``bundle`` (:class:`retrieval.bundle.ServingBundle`): its file
    checked against the manifest (:func:`retrieval.parts.part_path`), then given to its declared loader.

    Raises:
        retrieval.parts.PartError: the version has no such part, it was refused, or it changed.
        ValueError: the part declares no loader.
    """
    from retrieval.parts import part_path

    if not part.load:
        raise ValueError(f"serving part {part.name} declares no loader")
    return resolve(part.load)(bundle, part_path(bundle.folder, bundle.manifest, part.name))


def load_texts(bundle, path: Path):
    """The ``texts`` part: a frame of :data:`retrieval.parts.TEXT_COLUMNS`."""
    import pandas as pd

    return pd.read_parquet(path)


def load_reranker(bundle, path: Path):
    """The query pipeline's reranker (:func:`retrieval.rerankers.reranker_from_json`) over the version's texts,
    tokens and pinned encoder."""
    from retrieval.rerankers import reranker_from_json

    texts = dict(zip(bundle.texts["doc_id"], bundle.texts["text"]))
    return reranker_from_json(path.read_text(encoding="utf-8"), texts, bundle.retriever.tokenize, path,
                              bundle.retriever.dense.encoder, bundle.model_id)


TEXTS_PART = ServingPart(TEXTS, "texts", TEXTS_FILE, build="written",
                         load="retrieval.serving_parts:load_texts")
RERANKER_PART = ServingPart("reranker", "reranker", "reranker.json", setting="reranker",
                            pins_if_named=("encoder_model_id",), load="retrieval.serving_parts:load_reranker")
PARTS = (TEXTS_PART, RERANKER_PART)
