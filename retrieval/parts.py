"""Serving parts of an index version (SPEC §7, §9): everything a query reads besides the dense and sparse
sides lives inside the version and is named with its sha256 in ``manifest.json`` under ``parts``, so a version
is the one unit serving loads, pins and rolls back.

- ``texts`` (``texts.parquet``): the cleaned text and metadata of every document the version's chunks point
  into (``doc_id, text, title, url, source, pubtime, external_id``): answers read their spans and passages from
  the version's own texts, never from a ``documents_clean`` that a later run replaced.
- ``answer_scorer`` (``answer-scorer.json``): the answer stage's learned scorer (:mod:`answers.scorer`),
  installed only when the version's encoder and segmenter are the ones it was fitted with (its
  ``info.provenance``); otherwise the part records why it was refused and serving says so.
- ``reranker`` (``reranker.json``): the settings of the query pipeline's reranker (:mod:`retrieval.rerankers`).
- ``answer_reranker`` (``answer-reranker.json`` and the fp16 weights it names): the answer stage's sentence
  cross-encoder (:mod:`retrieval.cross_encoder`, :mod:`answers.rerank_features`), pinned to its encoder.
- any further model after the index (the related-documents model): one more declaration.

Each part is declared once, with its role, file, pins, build and loader (:mod:`retrieval.serving_parts`); this
module is the mechanics the declarations use.

A part is either a file fitted elsewhere and installed (:class:`PartSource`) or fitted on the staged version
itself (:class:`FittedPart`: the answer scorer fitted on a configured question set, SPEC §9), which then
searches with its own encoder, BM25 side and texts through :func:`staged_view` before ``CURRENT`` switches.
Parts are written into the version folder while it is staged by :func:`write_parts`; :func:`part_path`
checks each at load.
"""
from __future__ import annotations

import json
import re
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd

from storage.hashing import file_sha256

TEXTS, TEXTS_FILE = "texts", "texts.parquet"  # the texts part's name and file (retrieval.serving_parts.TEXTS_PART)
ANSWER_SCORER = "answer_scorer"  # kept for callers of this module: declared in answers.parts
ANSWER_RERANKER = "answer_reranker"  # a pin key of version_identity: the sha256 of the version's answer cross-encoder
TEXT_COLUMNS = ("doc_id", "text", "title", "url", "source", "pubtime", "external_id")


class PartError(ValueError):
    """A serving part of an index version that is missing, changed since publication (sha256 mismatch), or
    refused at publication (fitted with another encoder or segmenter); the message names the part."""


@dataclass(frozen=True)
class PartSource:
    """A JSON model file to install into a version as part ``name`` (file ``file`` in the version folder).

    ``path``: the file to install (a fitted model); ``requires``: what its ``info.provenance`` must match in
    the version (``encoder_model_id``, ``segmenter``), filled by :func:`write_parts` from the manifest;
    ``fallback``: the source installed instead when this one is refused (None: none)."""

    name: str
    file: str
    path: str
    requires: tuple[str, ...] = ("encoder_model_id", "segmenter")
    meta: dict = field(default_factory=dict)
    fallback: "PartSource | None" = None


def part_installed(manifest: dict, name: str) -> bool:
    """Whether a version's manifest records part ``name`` as installed (present and not refused)."""
    rec = (manifest.get("parts") or {}).get(name)
    return isinstance(rec, dict) and "refused" not in rec


def version_identity(manifest: dict) -> dict:
    """What a model fitted on a version's retrieval depends on: ``encoder_model_id`` (the pinned encoder's
    content id), ``segmenter`` (``backend:model_id`` of the segmenter of its BM25 side, or None) and, when it
    holds one, ``answer_reranker`` (the sha256 of its installed answer cross-encoder part: a scorer fitted on
    that model's scores is installed only beside the same one)."""
    sp = manifest.get("sparse") or {}
    seg = f"{sp.get('backend')}:{sp.get('segmenter_model_id')}" if sp else None
    ar = (manifest.get("parts") or {}).get(ANSWER_RERANKER)
    extra = {"answer_reranker": ar["sha256"]} if isinstance(ar, dict) and "sha256" in ar else {}
    return {"encoder_model_id": manifest.get("model_id"), "segmenter": seg, **extra}


def write_texts(vdir: Path, clean_dir: str | os.PathLike, doc_ids) -> dict:
    """Write ``texts.parquet`` (the documents of ``doc_ids`` from the ``documents_clean`` table ``clean_dir``,
    the columns of :data:`TEXT_COLUMNS` it has) into ``vdir``; returns the part record (file, sha256, rows)."""
    from storage import read_manifest, read_table

    have = set(read_manifest(clean_dir)["columns"])
    df = read_table(clean_dir, [c for c in TEXT_COLUMNS if c in have])
    df = df[df["doc_id"].isin(set(doc_ids))].reset_index(drop=True)
    for c in TEXT_COLUMNS:
        if c not in df.columns:
            df[c] = None
    if "pubtime" in df.columns:
        df["pubtime"] = df["pubtime"].map(_date_text)
    df[list(TEXT_COLUMNS)].to_parquet(vdir / TEXTS_FILE, index=False, compression="zstd")
    return {"file": TEXTS_FILE, "sha256": file_sha256(vdir / TEXTS_FILE), "rows": int(len(df))}


def _date_text(v) -> str | None:
    if v is None or (isinstance(v, float) and v != v) or v is pd.NaT:
        return None
    return v.isoformat()[:10] if hasattr(v, "isoformat") else str(v)[:10]


def install_part(vdir: Path, source: PartSource, identity: dict) -> dict:
    """Copy ``source.path`` into ``vdir`` as ``source.file`` when its ``info.provenance`` matches ``identity``
    on every key of ``source.requires``; returns the part record (file, sha256, provenance) or, when refused,
    ``source.fallback``'s (its record then says what it replaced: ``fallback_for``), else ``{"refused": reason}``
    (nothing copied; with a fallback refused too, both reasons).

    Raises:
        PartError: the file is missing or not a JSON object.
    """
    prov = read_provenance(source.path, source.name)
    wrong = [f"{k} {prov.get(k)!r} (this version: {identity.get(k)!r})" for k in source.requires
             if prov.get(k) != identity.get(k)]
    if wrong:
        refused = {"refused": f"{source.name} {source.path} was fitted with another " + "; ".join(wrong),
                   "source": str(source.path)}
        if source.fallback is None:
            return refused
        rec = install_part(vdir, source.fallback, identity)
        if "refused" in rec:
            return {"refused": refused["refused"] + "; its fallback: " + rec["refused"], "source": str(source.path)}
        return {**rec, "fallback_for": refused["refused"]}
    sidecar = sidecar_file(source.path, source.name)
    if sidecar is not None:  # the weights a JSON part names (its JSON records their sha256: the loader checks it)
        if (vdir / sidecar).exists():
            raise PartError(f"{source.name}: weights file {sidecar} would overwrite a file of the version")
        shutil.copyfile(Path(source.path).parent / sidecar, vdir / sidecar)
    shutil.copyfile(source.path, vdir / source.file)
    rec = {"file": source.file, "sha256": file_sha256(vdir / source.file), "provenance": prov, **source.meta}
    return {**rec, "files": {sidecar: file_sha256(vdir / sidecar)}} if sidecar else rec


def sidecar_file(path: str | os.PathLike, name: str = "part") -> str | None:
    """The one file a JSON part names beside it (``weights.file``: a model's tensors, e.g. the cross-encoder
    reranker's safetensors), or None.

    Raises:
        PartError: a name that is not a plain file name, or no such file beside ``path``.
    """
    d = json.loads(Path(path).read_text(encoding="utf-8"))
    w = d.get("weights") if isinstance(d, dict) else None
    f = w.get("file") if isinstance(w, dict) else None
    if f is None:
        return None
    if not isinstance(f, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}\.safetensors", f):
        raise PartError(f"{name}: weights file {f!r} is not a plain '<name>.safetensors' file name")
    if not (Path(path).parent / f).is_file():
        raise PartError(f"{name}: weights file {f} not found beside {path}")
    return f


def read_provenance(path: str | os.PathLike, name: str = "part") -> dict:
    """``info.provenance`` of a JSON model file ({} when it has none).

    Raises:
        PartError: the file is missing, unreadable, nested too deep, or not a JSON object.
    """
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PartError(f"{name}: {path} not found") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise PartError(f"{name}: {path} is not readable JSON ({str(exc)[:120]})") from None
    if not isinstance(d, dict):
        raise PartError(f"{name}: {path} is not a JSON object")
    info = d.get("info") if isinstance(d.get("info"), dict) else {}
    return info.get("provenance") if isinstance(info.get("provenance"), dict) else {}


@dataclass(frozen=True)
class FittedPart:
    """A JSON model fitted on the staged version itself, written into it as part ``name`` (file ``file``).

    ``fit(index_root, version) -> (JSON text, record fields)``: called while the version is staged, with an
    index root in which ``version`` loads as any published one (:func:`staged_view`: its search, pinned
    encoder, BM25 side and the parts written before it); the record fields (e.g. ``provenance``, the fit's
    figures) join the part's record in the manifest. Errors it raises abort the publication."""

    name: str
    file: str
    fit: Callable[[Path, str], tuple[str, dict]]


def write_parts(vdir: Path, manifest: dict, clean_dir: str | os.PathLike | None, doc_ids,
                sources: tuple[PartSource, ...] = (), fitted: tuple[FittedPart, ...] = (),
                index_root: str | os.PathLike | None = None) -> dict:
    """Write every serving part into the staged version folder ``vdir``: the texts (when ``clean_dir`` is
    given), each of ``sources`` checked against the version's identity (:func:`version_identity` of
    ``manifest``), then each of ``fitted`` fitted on the staged version (:func:`staged_view` over
    ``index_root``, which ``fitted`` needs). Returns ``{part name: record}`` for the manifest's ``parts``.

    Raises:
        ValueError: ``fitted`` without ``index_root``; whatever a fit raises.
    """
    parts = {}
    if clean_dir is not None:
        parts[TEXTS] = write_texts(vdir, clean_dir, doc_ids)
    for s in sources:  # the identity read after each install: a scorer may depend on the answer reranker before it
        parts[s.name] = install_part(vdir, s, version_identity({**manifest, "parts": dict(parts)}))
    if fitted:
        if index_root is None:
            raise ValueError("fitted parts need the index root (the staged version's pinned encoder lies there)")
        with staged_view(vdir, {**manifest, "parts": dict(parts)}, index_root) as (root, version):
            for f in fitted:
                text, extra = f.fit(root, version)
                if text is None:  # the fit declined (e.g. a default training set without pairs): say why
                    parts[f.name] = {"refused": str(extra.get("refused", "not fitted"))}
                    continue
                (vdir / f.file).write_text(text, encoding="utf-8")
                parts[f.name] = {"file": f.file, "sha256": file_sha256(vdir / f.file), **extra}
    return parts


@contextmanager
def staged_view(vdir: Path, manifest: dict, index_root: str | os.PathLike) -> Iterator[tuple[Path, str]]:
    """``(root, version)``: a temporary index root in which the staged version folder ``vdir`` loads as
    ``version`` (the name it will be published under: the next ``vN`` of ``index_root``) with everything a
    published version has: a provisional ``manifest.json`` (``manifest`` with the version, size, chunk count
    and a ``staged-`` build id; removed on exit, the publication writes the final one) and the pinned encoder
    (``encoder_dir`` linked from ``index_root``). Nothing in ``index_root`` changes, ``CURRENT`` included.

    Raises:
        PartError: the manifest pins no encoder (``encoder_dir``).
    """
    from retrieval.versions import check_faiss_file, list_versions

    rel = manifest.get("encoder_dir")
    if not isinstance(rel, str) or not rel or Path(rel).is_absolute() or ".." in Path(rel).parts:
        raise PartError("the staged version pins no encoder (encoder_dir): nothing to fit a part with")
    index_root = Path(index_root)
    version = f"v{max((int(v[1:]) for v in list_versions(index_root)), default=0) + 1}"
    live = check_faiss_file(vdir / "index.faiss").ntotal - int((manifest.get("ann") or {}).get("tombstones", 0))
    rows = pd.read_parquet(vdir / "chunks.parquet", columns=["chunk_id"]).shape[0]
    (vdir / "manifest.json").write_text(json.dumps(
        {**manifest, "version": version, "size": int(live), "chunks": int(rows),
         "build_id": f"staged-{uuid.uuid4().hex}"}, ensure_ascii=False, default=str), encoding="utf-8")
    try:
        with tempfile.TemporaryDirectory(prefix="staged-index-") as tmp:
            root = Path(tmp)
            (root / version).symlink_to(vdir.resolve(), target_is_directory=True)
            top = Path(rel).parts[0]
            (root / top).symlink_to((index_root / top).resolve(), target_is_directory=True)
            yield root, version
    finally:
        (vdir / "manifest.json").unlink(missing_ok=True)


def part_path(vdir: Path, manifest: dict, name: str) -> Path:
    """The file of part ``name`` of the version in ``vdir``, after checking its sha256.

    Raises:
        PartError: the version has no such part, it was refused at publication (the reason), or its file is
            missing or changed.
    """
    rec = (manifest.get("parts") or {}).get(name)
    if not isinstance(rec, dict):
        raise PartError(f"index {manifest.get('version')} has no {name} part (none was configured when it was "
                        "published)")
    if "refused" in rec:
        raise PartError(f"index {manifest.get('version')} has no {name}: {rec['refused']}")
    f = vdir / str(rec.get("file", ""))
    if not isinstance(rec.get("file"), str) or f.parent != vdir or not f.is_file():
        raise PartError(f"index {manifest.get('version')}: {name} file {rec.get('file')!r} is missing")
    if file_sha256(f) != rec.get("sha256"):
        raise PartError(f"index {manifest.get('version')}: {name} file {f.name} changed since the version was "
                        "published (sha256 mismatch): roll back or rebuild")
    return f


def read_texts(vdir: Path, manifest: dict) -> pd.DataFrame:
    """The version's ``texts`` part (:data:`TEXT_COLUMNS`), checked (:func:`part_path`)."""
    return pd.read_parquet(part_path(vdir, manifest, TEXTS))
