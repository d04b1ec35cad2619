"""The version store of an index (SPEC §7): ``index/vN/{index.faiss, chunks.parquet, embeddings.npy,
manifest.json, sparse/, fusion/}``, an atomically switched ``index/CURRENT`` pointer, pinned encoders under
``index/models/<model_id>/`` (:mod:`retrieval.pinning`) and a retention rule that bounds the disk.

Retention (:func:`retire_versions`, run after every publish): the newest ``keep`` versions stay, and so do
the serving version and every version named in ``index/PINNED`` (versions an operator keeps for a rollback,
:func:`pin_version`); the others are removed, then every pinned encoder no kept version names. A rollback is
:func:`rollback`: ``CURRENT`` switched to a kept version, whose manifest names its own encoder.
"""
from __future__ import annotations

import json
import logging
import math
import os
import shutil
import struct
import uuid
from pathlib import Path, PurePosixPath
from typing import Callable, NamedTuple

import faiss
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval.fusion import METHODS
from retrieval.pinning import MODELS
from storage.atomic import atomic_path, atomic_write_text
from storage.pointer import CURRENT, VERSION, PointerError, read_pointer
from storage.hashing import file_sha256

PINNED = "PINNED"


_VERSION = VERSION
log = logging.getLogger(__name__)


class IndexLoadError(ValueError):
    """An index version that cannot be loaded: ``CURRENT`` naming something other than a version ``vN``
    (a path such as ``../..``), or a ``manifest.json``, ``index.faiss`` or ``chunks.parquet`` that does
    not read (truncated, overwritten, not what :func:`publish_version` writes)."""


class ManifestFieldError(IndexLoadError, KeyError):
    """A field the loaded version's ``manifest.json`` lacks (a :class:`Manifest` read by a caller that needs
    it); a ``KeyError`` too, as a plain dict's missing key is."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Manifest(dict):
    """A version's ``manifest.json`` as :func:`read_manifest` gives it: a dict whose missing fields (nested
    objects' too) raise :class:`ManifestFieldError` naming the file and the field, not a bare ``KeyError``."""

    def __init__(self, data: dict, path: str | os.PathLike = "manifest.json", prefix: str = ""):
        super().__init__((k, Manifest(v, path, f"{prefix}{k}.") if type(v) is dict else v) for k, v in data.items())
        self.path, self.prefix = str(path), prefix

    def __missing__(self, key):
        raise ManifestFieldError(f"{self.path}: no field {self.prefix}{key} (not a manifest publish_version "
                                 f"wrote; rebuild the index)")


def check_version(name: str, where: str) -> str:
    """``name`` when it is a version name ``vN`` (what :func:`publish_version` writes), never a path.

    Raises:
        IndexLoadError: naming ``where`` (the file or argument it came from).
    """
    if not _VERSION.fullmatch(name):
        raise IndexLoadError(f"{where} names {name[:80]!r}, not an index version vN")
    return name


def current_version(index_root: str | os.PathLike) -> str | None:
    """Name of the serving version (``vN``) or None when no index was published.

    Raises:
        IndexLoadError: ``CURRENT`` holds anything but a version name (``../..``, binary, a long text).
    """
    try:
        return read_pointer(index_root)
    except PointerError as exc:
        raise IndexLoadError(str(exc)) from None


def list_versions(index_root: str | os.PathLike) -> list[str]:
    """Published version folders (``vN``), oldest first (by N)."""
    root = Path(index_root)
    if not root.is_dir():
        return []
    nums = sorted(int(p.name[1:]) for p in root.glob("v*") if p.is_dir() and p.name[1:].isdigit())
    return [f"v{n}" for n in nums]


def read_manifest(index_root: str | os.PathLike, version: str) -> dict:
    """``manifest.json`` of ``version``.

    Returns:
        a :class:`Manifest` (a dict; a field it lacks raises :class:`ManifestFieldError` naming it).

    Raises:
        FileNotFoundError: no such version.
        IndexLoadError: ``version`` is not a version name, or its manifest does not read as this version's
            or fails :func:`check_manifest`.
    """
    path = Path(index_root) / check_version(version, "the requested version") / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:
        raise IndexLoadError(f"{path}: not a readable manifest ({str(exc)[:120]})") from exc
    if not isinstance(manifest, dict) or manifest.get("version") != version:
        raise IndexLoadError(f"{path}: not the manifest of version {version}")
    return Manifest(check_manifest(manifest, path), path)


def publish_version(index_root: str | os.PathLike, index: faiss.Index, chunks: pd.DataFrame, manifest: dict,
                    vectors: np.ndarray | None = None, write_extra: Callable[[Path], None] | None = None) -> str:
    """Write version ``vN`` (N = last + 1) and switch ``CURRENT`` to it atomically. Returns ``vN``.

    ``vectors`` (rows aligned with ``chunks``) are kept as ``embeddings.npy`` for later refreshes and the
    evaluation; ``write_extra(folder)`` writes more files (the sparse side) into the version before it is
    renamed into place, so they are published and switched together with the dense index. Retention is the
    caller's (:func:`retire_versions`). The manifest gets a random ``build_id``, so a version rebuilt under
    the same name never has the manifest of the one it replaces (:func:`version_key`).
    """
    root = Path(index_root)
    root.mkdir(parents=True, exist_ok=True)
    nums = [int(v[1:]) for v in list_versions(root)]
    version = f"v{max(nums, default=0) + 1}"
    with atomic_path(root / version) as tmp:
        tmp.mkdir()
        faiss.write_index(index, str(tmp / "index.faiss"))
        pq.write_table(pa.Table.from_pandas(chunks, preserve_index=False), tmp / "chunks.parquet", compression="zstd")
        if vectors is not None:
            np.save(tmp / "embeddings.npy", np.ascontiguousarray(vectors, dtype=np.float32))
        if write_extra is not None:
            write_extra(tmp)
        core = core_files(tmp, manifest)
        live = int(index.ntotal) - int((manifest.get("ann") or {}).get("tombstones", 0))
        (tmp / "manifest.json").write_text(json.dumps({**manifest, "version": version, "size": live,
                                                      "chunks": int(len(chunks)), "build_id": uuid.uuid4().hex,
                                                      "core_files": core},
                                                      ensure_ascii=False, indent=1, default=str))
    atomic_write_text(root / CURRENT, version)
    return version


CORE_FILES = ("index.faiss", "chunks.parquet", "embeddings.npy")


def core_files(vdir: Path, manifest: dict) -> dict:
    """``{path relative to vdir: sha256}`` of a version's core files (SPEC §7): :data:`CORE_FILES` present and
    every file of its BM25 folder (``sparse.dir``) and ``fusion/``, recorded in the manifest at publication
    (``core_files``) and checked at load by :func:`retrieval.verify.verify_version`."""
    out = {f: file_sha256(vdir / f) for f in CORE_FILES if (vdir / f).is_file()}
    sparse_dir = (manifest.get("sparse") or {}).get("dir") if isinstance(manifest.get("sparse"), dict) else None
    for sub in dict.fromkeys([d for d in (sparse_dir, "fusion") if isinstance(d, str) and d]):
        if (vdir / sub).is_dir():
            out.update({p.relative_to(vdir).as_posix(): file_sha256(p)
                        for p in sorted((vdir / sub).rglob("*")) if p.is_file()})
    return out


def load_version(index_root: str | os.PathLike, version: str | None = None
                 ) -> tuple[faiss.Index, pd.DataFrame, dict]:
    """(index, chunks, manifest) of ``version`` (default: the serving one).

    The manifest is checked (:func:`check_manifest`) and ``index.faiss`` walked against its size
    (:func:`check_faiss_file`) before FAISS reads it, so a forged header never drives an allocation.

    Raises:
        FileNotFoundError: no index has been published under ``index_root``, or a file of it is missing.
        IndexLoadError: ``CURRENT`` or ``version`` is not a version name; a file of the version is corrupt,
            forged or not of the shape its manifest records.
    """
    version = version or current_version(index_root)
    if version is None:
        raise FileNotFoundError(f"no index published under {index_root} (run the pipeline first)")
    d = Path(index_root) / check_version(version, "the requested version")
    if not d.is_dir():
        raise FileNotFoundError(f"index version {version} not found under {index_root}")
    manifest = read_manifest(index_root, version)
    faiss_path = d / "index.faiss"
    shape = check_faiss_file(faiss_path)  # before faiss allocates what a forged header declares
    check_index_matches(shape, manifest, faiss_path)
    try:
        index = faiss.read_index(str(faiss_path))
    except (RuntimeError, MemoryError) as exc:  # faiss reports a truncated or foreign file this way
        raise IndexLoadError(f"{faiss_path}: not a readable FAISS index "
                             f"({(str(exc).strip().splitlines() or [type(exc).__name__])[-1][:160]})") from exc
    try:
        chunks = pd.read_parquet(d / "chunks.parquet")
    except (OSError, ValueError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise IndexLoadError(f"{d / 'chunks.parquet'}: not a readable chunks table ({str(exc)[:120]})") from exc
    return index, chunks, manifest


# -- what a version's files may declare (checked before anything is allocated) ------------------------------

_NUMBER = (int, float)
_FUSION_INTS = {"rrf_k": (0, 1_000_000), "depth": (1, 1_000_000)}  # retrieval.fusion.FusionConfig's bounds
_ANN_KINDS = ("flat", "ivf", "hnsw")


def _field_error(path, name: str, value, want: str) -> IndexLoadError:
    shown = json.dumps(value, ensure_ascii=False, default=str)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return IndexLoadError(f"{path}: field {name} is {shown}, not {want}")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_int(m: dict, key: str, path, name: str, lo: int, hi: int | None = None) -> None:
    if key in m:
        v = m[key]
        if not _is_int(v) or v < lo or (hi is not None and v > hi):
            raise _field_error(path, name, v, f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else ""))


def _check_str(m: dict, key: str, path, name: str) -> None:
    if key in m and (not isinstance(m[key], str) or not m[key]):
        raise _field_error(path, name, m[key], "a non-empty string")


def _check_relative(m: dict, key: str, path, name: str, one_part: bool) -> None:
    """``m[key]`` a relative path that stays inside the folder it is joined to (``one_part``: a plain name)."""
    _check_str(m, key, path, name)
    if key in m:
        p = PurePosixPath(m[key])
        parts = p.parts
        if (p.is_absolute() or "\\" in m[key] or not parts or any(x in ("", ".", "..") for x in parts)
                or (one_part and len(parts) != 1)):
            raise _field_error(path, name, m[key], "a folder name inside the index" if not one_part
                               else "a folder name inside the version")


def _check_sparse(sparse, path) -> None:
    """The ``sparse`` entry: an object naming its ``dir`` (a folder of the version) and its segmenter."""
    if not isinstance(sparse, dict):
        raise _field_error(path, "sparse", sparse, "an object (the BM25 side) or null")
    if "dir" not in sparse:
        raise IndexLoadError(f"{path}: no field sparse.dir (the version's BM25 folder)")
    _check_relative(sparse, "dir", path, "sparse.dir", one_part=True)
    for key in ("backend", "segmenter_model_id"):
        _check_str(sparse, key, path, f"sparse.{key}")


def _check_fusion(fusion, path) -> None:
    """The ``fusion`` entry: fitted weights in [0, 1], ``rrf_k`` / ``depth`` within bounds, a known method."""
    if not isinstance(fusion, dict):
        raise _field_error(path, "fusion", fusion, "an object (the fitted fusion weights)")
    if "w_dense" not in fusion:
        raise IndexLoadError(f"{path}: no field fusion.w_dense (the fitted dense weight)")
    for key in ("w_dense", "w_sparse"):
        v = fusion.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, _NUMBER) or not math.isfinite(v) or not 0.0 <= v <= 1.0:
            raise _field_error(path, f"fusion.{key}", v, "a number in [0, 1]")
    for key, (lo, hi) in _FUSION_INTS.items():
        _check_int(fusion, key, path, f"fusion.{key}", lo, hi)
    if "method" in fusion and fusion["method"] not in METHODS:
        raise _field_error(path, "fusion.method", fusion["method"], f"one of {', '.join(METHODS)}")


def check_manifest(manifest: dict, path: str | os.PathLike) -> dict:
    """``manifest`` (the parsed ``manifest.json`` at ``path``) when every field the loaders read has the shape
    :func:`publish_version` and :func:`retrieval.build.publish_staged` write (SPEC §7): ``model_id`` a string;
    ``encoder_dir`` a relative folder inside the index root (``models/<model_id>``); ``dim`` >= 1, ``size``
    and ``chunks`` >= 0 integers; ``ann`` an object (``kind`` flat/ivf/hnsw, ``tombstones`` >= 0); ``sparse``
    null or an object naming its ``dir`` (a folder of the version) and the segmenter (strings); ``fusion`` an
    object whose ``w_dense`` (and ``w_sparse``) is a number in [0, 1], ``rrf_k`` and ``depth`` integers within
    :class:`retrieval.fusion.FusionConfig`'s bounds and ``method`` one of :data:`retrieval.fusion.METHODS`.
    Fields a version lacks are the caller's to need (a :class:`Manifest` names them when read); other fields
    are not looked at.

    Raises:
        IndexLoadError: naming the file and the first field of the wrong shape.
    """
    _check_str(manifest, "model_id", path, "model_id")
    _check_relative(manifest, "encoder_dir", path, "encoder_dir", one_part=False)
    _check_str(manifest, "model_dir", path, "model_dir")
    _check_int(manifest, "dim", path, "dim", 1, 1 << 16)
    _check_int(manifest, "size", path, "size", 0)
    _check_int(manifest, "chunks", path, "chunks", 0)
    for key in ("ann", "index"):
        if key in manifest and not isinstance(manifest[key], dict):
            raise _field_error(path, key, manifest[key], "an object")
    ann = manifest.get("ann") or {}
    _check_int(ann, "tombstones", path, "ann.tombstones", 0)
    if "kind" in ann and ann["kind"] not in _ANN_KINDS:
        raise _field_error(path, "ann.kind", ann["kind"], f"one of {', '.join(_ANN_KINDS)}")
    if manifest.get("sparse") is not None:
        _check_sparse(manifest["sparse"], path)
    if "fusion" in manifest:
        _check_fusion(manifest["fusion"], path)
    if "parts" in manifest:
        _check_files(manifest["parts"], path)
    return manifest


def _check_files(parts, path) -> None:
    """The ``parts`` entry: an object of part records, each an object whose ``file`` (when named) is a plain file
    name of the version, ``sha256`` a string and ``files`` (weights beside it) an object of name -> sha256."""
    if not isinstance(parts, dict):
        raise _field_error(path, "parts", parts, "an object of part records")
    for key, rec in parts.items():
        name = key if len(key) <= 80 else f"{key[:80]}...({len(key):,} chars)"
        if not isinstance(rec, dict):
            raise _field_error(path, f"parts.{name}", rec, "an object (a part record)")
        if "refused" in rec:
            continue
        _check_relative(rec, "file", path, f"parts.{name}.file", one_part=True)
        _check_str(rec, "sha256", path, f"parts.{name}.sha256")
        files = rec.get("files", {})
        if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                  for k, v in files.items()):
            raise _field_error(path, f"parts.{name}.files", files, "an object of file name -> sha256")


# FAISS's on-disk format (faiss/impl/index_read.cpp, ``read_index``): a fourcc, then per type a header and
# vectors stored as a uint64 count followed by the elements. The types this project writes
# (:func:`retrieval.dense.build_index`): IndexIDMap2 over IndexFlatIP or IndexHNSWFlat (with a flat storage),
# and IndexIVFFlat (a flat quantizer, array inverted lists). FAISS sizes each vector from its count before it
# reads it, so a forged count allocates gigabytes; the walk below checks every count against the bytes left.
_FLAT = (b"IxFI", b"IxF2", b"IxFl")
_IDMAP = (b"IxM2", b"IxMp")
_HNSW_FLAT, _IVF_FLAT = b"IHNf", b"IwFl"
_WRITTEN = "IndexIDMap2 over IndexFlatIP or IndexHNSWFlat, IndexIVFFlat"
_MAX_COUNT = 1 << 40  # FAISS's own bound on a stored vector's count
_MAX_DIM = 1 << 16


class FaissShape(NamedTuple):
    """(kind, d, ntotal) of a checked ``index.faiss``: kind ``flat``, ``hnsw`` or ``ivf``."""

    kind: str
    d: int
    ntotal: int


class _FaissWalk:
    """Reads the headers and counts of a FAISS file, seeking past its payloads, each checked to fit."""

    def __init__(self, fh, size: int, path: Path):
        self.fh, self.size, self.path = fh, size, path

    def fail(self, why: str) -> IndexLoadError:
        return IndexLoadError(f"{self.path}: not an index this project writes ({why})")

    def need(self, nbytes: int, what: str) -> None:
        left = self.size - self.fh.tell()
        if nbytes > left:
            raise self.fail(f"{what} declares {nbytes:,} bytes, the {self.size:,}-byte file has {max(left, 0):,} "
                            f"left: truncated or forged")

    def read(self, fmt: str, what: str) -> tuple:
        n = struct.calcsize(fmt)
        self.need(n, what)
        return struct.unpack(fmt, self.fh.read(n))

    def count(self, itemsize: int, what: str) -> int:
        """A stored vector's element count, checked to fit the file (the payload is left unread)."""
        (n,) = self.read("<Q", f"the length of {what}")
        if n >= _MAX_COUNT:
            raise self.fail(f"{what} declares {n:,} elements")
        self.need(n * itemsize, what)
        return n

    def skip(self, nbytes: int) -> None:
        self.fh.seek(nbytes, os.SEEK_CUR)

    def array(self, n: int, dtype: str) -> np.ndarray:
        """``n`` elements (already checked to fit) read as ``dtype``."""
        return np.frombuffer(self.fh.read(n * np.dtype(dtype).itemsize), dtype=dtype)

    def header(self, what: str) -> tuple[int, int]:
        """(d, ntotal) of an index header: d int32, ntotal int64, two unused int64, is_trained (1 byte),
        metric int32 (and a float argument for metrics above 1)."""
        d, ntotal, _, _, trained, metric = self.read("<iqqqBi", f"the {what} header")
        if metric > 1:
            self.read("<f", f"the {what} metric argument")
        if not 1 <= d <= _MAX_DIM or ntotal < 0 or trained > 1 or metric < 0:
            raise self.fail(f"{what} header declares d = {d}, ntotal = {ntotal:,}")
        return d, ntotal

    def index(self, allowed: tuple[bytes, ...], what: str) -> FaissShape:
        (h,) = self.read("<4s", f"the {what} type")
        if h not in allowed:
            raise self.fail(f"{what} of type {h.decode('ascii', 'replace')!r}; this project writes {_WRITTEN}")
        d, ntotal = self.header(what)
        if h in _FLAT:
            n = self.count(4, f"the {what}'s vectors")
            if n != ntotal * d:
                raise self.fail(f"the {what} stores {n:,} floats for {ntotal:,} vectors of dimension {d}")
            self.skip(n * 4)
            return FaissShape("flat", d, ntotal)
        if h in _IDMAP:
            inner = self.index(_FLAT + (_HNSW_FLAT,), "indexed storage")
            n = self.count(8, "the id map")
            if n != ntotal or inner.ntotal != ntotal or inner.d != d:
                raise self.fail(f"the id map holds {n:,} ids for {ntotal:,} vectors, its index "
                                f"{inner.ntotal:,} of dimension {inner.d} (declared {d})")
            self.skip(n * 8)
            return FaissShape(inner.kind, d, ntotal)
        if h == _HNSW_FLAT:
            return self.hnsw(d, ntotal)
        return self.ivf(d, ntotal)

    def hnsw(self, d: int, ntotal: int) -> FaissShape:
        """read_HNSW: assign_probas (double), cum_nneighbor_per_level (int32), levels (int32, one per vector),
        offsets (uint64, ntotal + 1, the last = len(neighbors)), neighbors (int32), then entry_point,
        max_level, efConstruction, efSearch and an unused int32; then the flat storage."""
        self.skip(8 * self.count(8, "the HNSW level probabilities"))
        cum = self.array(self.count(4, "the HNSW neighbours per level"), "<i4").astype(np.int64)
        if self.count(4, "the HNSW levels") != ntotal:
            raise self.fail(f"the HNSW graph has a level count other than its {ntotal:,} vectors")
        levels = self.array(ntotal, "<i4").astype(np.int64)
        if self.count(8, "the HNSW offsets") != ntotal + 1:
            raise self.fail(f"the HNSW graph has offsets other than its {ntotal:,} vectors + 1")
        offsets = self.array(ntotal + 1, "<u8")
        n_nb = self.count(4, "the HNSW neighbours")
        if (np.any(levels < 1) or np.any(levels >= len(cum)) or offsets[0] != 0 or int(offsets[-1]) != n_nb
                or np.any(np.diff(offsets.astype(np.int64)) != cum[np.clip(levels, 0, max(len(cum) - 1, 0))])):
            raise self.fail("the HNSW levels and offsets do not index its neighbour lists")
        neighbors = self.array(n_nb, "<i4")
        entry, max_level, ef_c, ef_s, _ = self.read("<5i", "the HNSW parameters")
        top = int(levels.max()) - 1 if ntotal else -1
        if ((neighbors.size and (neighbors.min() < -1 or neighbors.max() >= ntotal)) or max_level != top
                or not (entry == -1 if ntotal == 0 else 0 <= entry < ntotal) or ef_c < 1 or ef_s < 1):
            raise self.fail("the HNSW graph points outside its vectors")
        del cum, levels, offsets, neighbors
        storage = self.index(_FLAT, "HNSW storage")
        if storage.ntotal != ntotal or storage.d != d:
            raise self.fail(f"the HNSW storage holds {storage.ntotal:,} vectors of dimension {storage.d} "
                            f"for {ntotal:,} of dimension {d}")
        return FaissShape("hnsw", d, ntotal)

    def ivf(self, d: int, ntotal: int) -> FaissShape:
        """read_ivf_header (nlist, nprobe, the quantizer, the direct map) then read_InvertedLists (``ilar``:
        nlist, code_size, the list sizes ``full`` or ``sprs``, then per list its codes and its ids)."""
        nlist, nprobe = self.read("<QQ", "the IVF list counts")
        quantizer = self.index(_FLAT, "IVF quantizer")
        if quantizer.ntotal != nlist or quantizer.d != d or not 1 <= nprobe <= max(nlist, 1):
            raise self.fail(f"the IVF index declares {nlist:,} lists (nprobe {nprobe:,}) over "
                            f"{quantizer.ntotal:,} centroids of dimension {quantizer.d}")
        (dm_type,) = self.read("<B", "the IVF direct map type")
        if dm_type > 2:
            raise self.fail(f"the IVF direct map has type {dm_type}")
        self.skip(8 * self.count(8, "the IVF direct map"))
        if dm_type == 2:
            self.skip(16 * self.count(16, "the IVF direct hash map"))
        (h, nl, code_size) = self.read("<4sQQ", "the IVF inverted lists header")
        if h != b"ilar" or nl != nlist or code_size != 4 * d:
            raise self.fail(f"the IVF inverted lists ({h.decode('ascii', 'replace')!r}, {nl:,} lists of "
                            f"{code_size}-byte codes) are not the {nlist:,} flat lists of dimension {d}")
        (kind,) = self.read("<4s", "the IVF list sizes type")
        if kind == b"full":
            if self.count(8, "the IVF list sizes") != nlist:
                raise self.fail("the IVF list sizes do not match its lists")
            sizes = self.array(nlist, "<u8")
        elif kind == b"sprs":
            n = self.count(8, "the IVF list sizes")
            if n % 2:
                raise self.fail("the IVF sparse list sizes are not (list, size) pairs")
            pairs = self.array(n, "<u8").reshape(-1, 2)
            if pairs.size and int(pairs[:, 0].max()) >= nlist:
                raise self.fail("the IVF list sizes name lists it does not have")
            sizes = np.zeros(nlist, dtype=np.uint64)
            sizes[pairs[:, 0].astype(np.int64)] = pairs[:, 1]  # the last pair of a list wins, as in FAISS
        else:
            raise self.fail(f"the IVF list sizes have type {kind.decode('ascii', 'replace')!r}")
        if sizes.size and int(sizes.max()) >= _MAX_COUNT:
            raise self.fail("an IVF list declares more than 2^40 vectors")
        total = int(sizes.sum(dtype=np.uint64)) if sizes.size else 0
        if total != ntotal:
            raise self.fail(f"the IVF lists hold {total:,} vectors, the index declares {ntotal:,}")
        self.need(total * (code_size + 8), "the IVF lists")
        self.skip(total * (code_size + 8))
        return FaissShape("ivf", d, ntotal)


def check_faiss_file(path: str | os.PathLike) -> FaissShape:
    """The (kind, d, ntotal) of the FAISS index at ``path``, after walking its headers against the file's
    size: every count it declares (flat vectors exactly ``ntotal * d`` float32, ids, HNSW links, IVF lists)
    must fit in the bytes that follow, the parts must agree (an id per vector, a storage the graph's size,
    one list per centroid), the HNSW links must stay inside the graph, and the file must end where the
    index does. Only headers, counts and the HNSW link arrays are read; nothing is sized from the file
    before it is checked. Types other than those this project writes (:func:`retrieval.dense.build_index`)
    are refused.

    Raises:
        FileNotFoundError: no such file.
        IndexLoadError: the file is truncated, forged, of another type or inconsistent.
    """
    path = Path(path)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        walk = _FaissWalk(fh, size, path)
        shape = walk.index(_FLAT + _IDMAP + (_IVF_FLAT,), "index")
        if fh.tell() != size:
            raise walk.fail(f"{size - fh.tell():,} bytes after the end of the index")
    return shape


def check_index_matches(shape: FaissShape, manifest: dict, path: Path) -> None:
    """The index at ``path`` is the one ``manifest`` records: its dimension ``dim`` and its live vectors
    ``size`` (ntotal less the HNSW tombstones ``ann.tombstones``), where the manifest records them.

    Raises:
        IndexLoadError: naming ``path`` and the field that differs."""
    if "dim" in manifest and shape.d != manifest["dim"]:
        raise IndexLoadError(f"{path}: vectors of dimension {shape.d}, the manifest records dim {manifest['dim']}")
    if "size" in manifest:
        live = shape.ntotal - int((manifest.get("ann") or {}).get("tombstones", 0))
        if live != manifest["size"]:
            raise IndexLoadError(f"{path}: {live:,} live vectors, the manifest records size {manifest['size']:,}")


def version_key(index_root: str | os.PathLike, version: str) -> str:
    """``vN:<sha256 of its manifest.json, 16 hex>``: the identity of a loaded version, for caches of loaded
    versions. The name alone is not one: an index rebuilt from scratch publishes ``v1`` again, with another
    manifest (chunk counts, inputs and a random ``build_id``, :func:`publish_version`).

    Raises:
        FileNotFoundError: the version has no manifest (not published, or retired).
        IndexLoadError: ``version`` is not a version name.
    """
    path = Path(index_root) / check_version(version, "the requested version") / "manifest.json"
    try:
        return f"{version}:{file_sha256(path)[:16]}"
    except FileNotFoundError:
        raise FileNotFoundError(f"index version {version} not found under {index_root}") from None


def pinned_versions(index_root: str | os.PathLike) -> list[str]:
    """Versions named in ``index/PINNED`` (kept by retention), in the order pinned."""
    p = Path(index_root) / PINNED
    return json.loads(p.read_text(encoding="utf-8")) if p.is_file() else []


def pin_version(index_root: str | os.PathLike, version: str, pinned: bool = True) -> list[str]:
    """Add ``version`` to (``pinned=False``: remove it from) ``index/PINNED``; returns the pinned list.

    Raises:
        FileNotFoundError: pinning a version that is not on disk.
    """
    if pinned and not (Path(index_root) / version / "manifest.json").is_file():
        raise FileNotFoundError(f"no index version {version} under {index_root} to pin")
    pins = [v for v in pinned_versions(index_root) if v != version] + ([version] if pinned else [])
    atomic_write_text(Path(index_root) / PINNED, json.dumps(pins))
    return pins


def rollback(index_root: str | os.PathLike, version: str) -> None:
    """Serve ``version`` again: ``CURRENT`` switched to it atomically.

    Raises:
        FileNotFoundError: the version is not on disk (retired, or never published).
    """
    if not (Path(index_root) / version / "manifest.json").is_file():
        raise FileNotFoundError(f"no index version {version} under {index_root} (retired or never published)")
    atomic_write_text(Path(index_root) / CURRENT, version)


def kept_versions(index_root: str | os.PathLike, keep: int) -> list[str]:
    """The versions retention keeps: the newest ``keep``, the serving one and the pinned ones (oldest first).

    Raises:
        ValueError: ``keep`` is not an integer >= 1.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise ValueError(f"keep must be an integer >= 1, got {keep!r}")
    versions = list_versions(index_root)
    keep_set = set(versions[-keep:]) | set(pinned_versions(index_root)) | {current_version(index_root)}
    return [v for v in versions if v in keep_set]


def retire_versions(index_root: str | os.PathLike, keep: int) -> dict:
    """Remove the versions :func:`kept_versions` does not keep, then the pinned encoders
    (``models/<model_id>``) that no kept version's manifest names. Each folder is renamed aside before it
    is deleted, so a crash leaves whole versions only. A kept version whose manifest does not read
    (:func:`check_manifest`) keeps every encoder.

    Returns:
        {"retired": [versions removed], "kept": [versions kept], "encoders_removed": [model ids]}.

    Raises:
        ValueError: ``keep`` < 1.
    """
    root = Path(index_root)
    kept = kept_versions(root, keep)
    retired = [v for v in list_versions(root) if v not in kept]
    for v in retired:
        _remove(root / v)
    used: set[str] | None = set()
    for v in kept:
        try:
            used.add(Path(read_manifest(root, v).get("encoder_dir", "")).name)
        except IndexLoadError as exc:  # a kept version whose encoder is unknown: no encoder is removed
            log.warning("index %s: %s; pinned encoders kept", v, exc)
            used = None
            break
    models = root / MODELS
    gone = sorted(p.name for p in models.iterdir() if not p.name.startswith(".") and p.is_dir()
                  and p.name not in used) if models.is_dir() and used is not None else []
    for mid in gone:
        _remove(models / mid)
    return {"retired": retired, "kept": kept, "encoders_removed": gone}


def _remove(folder: Path) -> None:
    """Remove a published folder whole: its name first (the link :func:`storage.atomic.atomic_path` made, or
    the folder renamed aside), then the content, so a reader never sees half a version."""
    target = folder.parent / os.readlink(folder) if folder.is_symlink() else None
    aside = folder.with_name(f".retired-{folder.name}")
    shutil.rmtree(aside, ignore_errors=True)
    os.replace(folder, aside)
    if target is not None:
        aside.unlink()
        aside = target
    shutil.rmtree(aside, ignore_errors=True)
