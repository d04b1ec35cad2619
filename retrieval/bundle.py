"""One index version loaded for serving (SPEC §7, §9): the unit every query path reads.

:func:`load_bundle` reads ``index/CURRENT`` once (:func:`retrieval.versions.current_version`, the one reader of
the pointer), loads that version's search (:class:`retrieval.retrievers.Retriever`: dense side with its pinned
encoder, sparse side, fusion weights) and composes its query pipeline (:attr:`ServingBundle.pipeline`) and gives its serving parts (:mod:`retrieval.parts`: the documents'
texts, the answer scorer, any reranker) only after checking each against the sha256 its manifest names. A
version rolled back to serves exactly what it served when it was published.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from retrieval.parts import part_installed, part_path
from retrieval.query import QueryLimits
from retrieval.versions import current_version, version_key


class IndexMissingError(FileNotFoundError):
    """No index version is published under the index root (run the pipeline first)."""


class PartsView:
    """What every view of one index version shares: its ``folder`` and its serving parts, each loaded by its
    declared loader after its sha256 is checked, once per view. A subclass gives ``index_root``, ``version``,
    ``manifest`` and a ``_parts`` dict (the cache)."""

    @property
    def folder(self) -> Path:
        return self.index_root / self.version

    def load(self, part):
        """Part ``part`` (a :class:`~retrieval.serving_parts.ServingPart`) loaded by its declared loader after
        its sha256 is checked (:func:`retrieval.serving_parts.load_part`), once per view.

        Raises:
            PartError: the version has no such part, it was refused at publication, or it changed.
        """
        from retrieval.serving_parts import load_part

        key = ("loaded", part.name)
        if key not in self._parts:
            self._parts[key] = load_part(self, part)
        return self._parts[key]

    def has_part(self, name: str) -> bool:
        """Whether the version was published with part ``name`` installed (not refused)."""
        return part_installed(self.manifest, name)

    @cached_property
    def texts(self) -> pd.DataFrame:
        """The version's documents (:data:`retrieval.parts.TEXT_COLUMNS`), checked against the manifest."""
        from retrieval.serving_parts import TEXTS_PART

        return self.load(TEXTS_PART)


@dataclass
class ServingBundle(PartsView):
    """A loaded index version: ``retriever`` (its search), ``manifest``, ``key`` (:func:`retrieval.versions.version_key`) and its
    parts, read on first use and checked (:class:`retrieval.parts.PartError` names a missing, refused or
    changed part)."""

    index_root: Path
    version: str
    retriever: object
    key: str
    _parts: dict = field(default_factory=dict, repr=False)

    @property
    def manifest(self) -> dict:
        return self.retriever.manifest

    @property
    def model_id(self) -> str:
        return str(self.manifest.get("model_id", ""))

    @property
    def encoder_name(self) -> str:
        return str(self.manifest.get("encoder_dir", self.manifest.get("model_dir", "")))

    @cached_property
    def pipeline(self):
        """The version's :class:`~retrieval.pipeline.QueryPipeline`: its hybrid search (the searcher), then
        every reranker it was published with (the declared parts of role ``reranker``,
        :mod:`retrieval.serving_parts`), in declaration order.

        Raises:
            PartError: a reranker or the texts part changed since publication. ValueError: an unreadable reranker.
        """
        from retrieval.pipeline import QueryPipeline
        from retrieval.serving_parts import serving_parts

        rerankers = [self.load(p) for p in serving_parts() if p.role == "reranker" and self.has_part(p.name)]
        return QueryPipeline(self.retriever, tuple(rerankers))

    def check_parts(self) -> list[str]:
        """Check every declared part the manifest records (:func:`retrieval.serving_parts.check_parts`);
        returns the names checked.

        Raises:
            PartError: a part's file (or a weights file it names) is missing or changed since publication.
        """
        from retrieval.serving_parts import check_parts

        return check_parts(self.folder, self.manifest)

    def part_text(self, name: str) -> str:
        """The text of JSON part ``name`` (read once, after its sha256 is checked).

        Raises:
            PartError: the version has no such part, it was refused at publication, or it changed.
        """
        if name not in self._parts:
            self._parts[name] = part_path(self.folder, self.manifest, name).read_text(encoding="utf-8")
        return self._parts[name]


def load_bundle(index_root: str | os.PathLike, version: str | None = None, tokenizer=None,
                limits: QueryLimits = QueryLimits()) -> ServingBundle:
    """Load ``version`` (default: the one ``index/CURRENT`` names, read once) for serving; ``limits``: the
    largest ``k`` and the longest query its search accepts.

    Raises:
        IndexMissingError: no index published under ``index_root``, or ``version`` is not on disk.
        retrieval.versions.IndexLoadError: ``CURRENT`` or a file of the version is corrupt.
        retrieval.pinning.EncoderMismatchError: the pinned encoder or the segmenter is not the version's.
    """
    from retrieval.retrievers import Retriever

    root = Path(index_root)
    version, key = resolve_version(root, version)
    return ServingBundle(root, version, Retriever(root, version=version, tokenizer=tokenizer, limits=limits), key)


def resolve_version(index_root: str | os.PathLike, version: str | None = None) -> tuple[str, str]:
    """(``version`` or the one ``index/CURRENT`` names, read once; its identity
    :func:`retrieval.versions.version_key`): what a cache of loaded versions is keyed by.

    Raises:
        IndexMissingError: no index published under ``index_root``, or ``version`` is not on disk.
    """
    root = Path(index_root)
    version = version or current_version(root)
    if version is None:
        raise IndexMissingError(f"no index in {root} (no CURRENT): run the pipeline first")
    try:
        return version, version_key(root, version)
    except FileNotFoundError:
        raise IndexMissingError(f"index version {version} is not in {root}") from None

