"""One build of an index version (SPEC §7): plan, embed, publish. Dense (FAISS, :mod:`retrieval.dense`) +
sparse (BM25, :mod:`retrieval.sparse`) + the fitted fusion (:mod:`retrieval.sparse_build`), written as the
next version of the store (:mod:`retrieval.versions`) and followed by its retention.

A refresh reuses the vectors of unchanged chunks from the serving version (same embedding model),
embeds only new or changed chunks, drops removed ones, writes the next version beside the old
and then switches the pointer: a crash mid-refresh leaves the last good version serving, and a
query during a refresh answers from it. A different embedding model forces a full rebuild.
The three steps can run in separate processes (the mapped embedding parts of the pipeline):
:func:`stage_refresh` writes ``plan.json``, :func:`embed_staged` one part, :func:`publish_staged` the version.
"""
from __future__ import annotations

import logging

import json
import os
import shutil
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval.ann_update import refresh_ann
from retrieval.dense import IndexConfig, search_params
from retrieval.fusion import FusionConfig
from retrieval.sparse import SparseConfig, Tokenize
from retrieval.sparse_build import build_sparse_side
from retrieval.versions import current_version, publish_version, read_manifest, retire_versions
from storage.atomic import atomic_path, atomic_write_text
from storage.hashing import file_sha256
from storage.mapped import StalePlanError

Embed = Callable[[list[str]], np.ndarray]


log = logging.getLogger(__name__)


def stage_refresh(index_root: str | os.PathLike, chunks: pd.DataFrame, model_id: str, cfg: IndexConfig,
                  staging: str | os.PathLike, extra: dict | None = None) -> dict:
    """Plan a refresh into ``staging``: the chunks, which rows reuse a vector of the serving version
    (same ``model_id``: vectors do not depend on the index config, so a changed index kind or ANN setting
    rebuilds only the FAISS structure from stored vectors) and which must be embedded. ``extra`` keys are
    stored in the plan as they are. ``plan.json`` is written last, atomically. Returns the plan (JSON-able)."""
    root, staging = Path(index_root), Path(staging)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    prev = current_version(root)
    ids = chunks["chunk_id"].to_numpy(np.int64)
    reuse_rows, reuse_vecs, full, removed = [], None, True, 0
    if prev is not None:
        pm = _readable_manifest(root, prev)  # corrupt serving version: nothing reused from it
        emb = root / prev / "embeddings.npy"
        if pm.get("model_id") == model_id and emb.is_file():
            full = False
            prev_ids = pd.read_parquet(root / prev / "chunks.parquet", columns=["chunk_id"])["chunk_id"].to_numpy()
            where = {int(i): k for k, i in enumerate(prev_ids)}
            vecs = np.load(emb)
            reuse_rows = [k for k, i in enumerate(ids) if int(i) in where]
            reuse_vecs = vecs[[where[int(ids[k])] for k in reuse_rows]] if reuse_rows else None
            removed = int(len(prev_ids) - len(reuse_rows))
    reused = set(reuse_rows)
    todo = [k for k in range(len(ids)) if k not in reused]
    pq.write_table(pa.Table.from_pandas(chunks, preserve_index=False), staging / "chunks.parquet", compression="zstd")
    if reuse_vecs is not None:
        np.save(staging / "reused.npy", reuse_vecs)
    plan = {"previous": prev, "full_rebuild": full, "removed": removed, "reuse_rows": reuse_rows, "todo": todo,
            "model_id": model_id, "index": asdict(cfg), **(extra or {})}
    atomic_write_text(staging / "plan.json", json.dumps(plan))
    return plan


def embed_staged(staging: str | os.PathLike, embed: Embed, part: int, n_parts: int,
                 out_file: str | os.PathLike | None = None) -> int:
    """Embed part ``part`` of ``n_parts`` of the planned rows into ``out_file`` (default
    ``staging/emb-NNNNN.npz``: arrays ``rows`` and ``vectors``); returns rows embedded.

    Parts may run in any order, in parallel; :func:`publish_staged` assembles them by row."""
    staging = Path(staging)
    plan = json.loads((staging / "plan.json").read_text())
    todo = plan["todo"]
    rows = todo[part * len(todo) // n_parts:(part + 1) * len(todo) // n_parts]
    texts = pd.read_parquet(staging / "chunks.parquet", columns=["text"])["text"].iloc[rows].tolist()
    vecs = embed(texts) if rows else np.zeros((0, 0), dtype=np.float32)
    with atomic_path(Path(out_file) if out_file else staging / f"emb-{part:05d}.npz") as tmp, open(tmp, "wb") as fh:
        np.savez(fh, rows=np.asarray(rows, dtype=np.int64), vectors=vecs)
    return len(rows)


def publish_staged(index_root: str | os.PathLike, staging: str | os.PathLike, n_parts: int,
                   embed_factory: Callable[[], Embed], manifest: dict | None = None, *,
                   sparse: SparseConfig | None = None, tokenizer: Callable[[], tuple[Tokenize, dict]] | None = None,
                   fusion_queries: pd.DataFrame | None = None, query_embed_factory: Callable[[], Embed] | None = None,
                   fusion: FusionConfig | None = None, parts: list[dict] | None = None,
                   keep_staging: bool = False,
                   serving_parts: Callable[[Path, dict, pd.DataFrame], dict] | None = None) -> dict:
    """Assemble reused and embedded vectors (parts not staged are embedded here), build the dense index and,
    with ``sparse``, the sparse side and the fitted fusion (:func:`retrieval.sparse_build.build_sparse_side`:
    ``tokenizer()`` -> (texts -> tokens, segmenter identity); hybrid weights fitted on ``fusion_queries``
    embedded with ``query_embed_factory()``, default ``embed_factory()``), publish the next version, switch
    ``CURRENT`` and retire old versions (``IndexConfig.keep_versions``, :func:`retrieval.versions.retire_versions`).
    The staging folder is removed unless ``keep_staging``. ``serving_parts(version_dir, manifest, chunks)``
    writes the version's serving parts (:func:`retrieval.parts.write_parts`) into the staged folder after
    the sparse side, before ``CURRENT`` switches (a part fitted on the version itself loads that folder through
    :func:`retrieval.parts.staged_view`; an error it raises publishes nothing); its records become the
    manifest's ``parts``.

    ``parts``: the records of the embedded parts (``path``, ``sha256``) in part order, as the mapped embedding
    tasks returned them; each file is checked against its sha256. Without it the parts are read from staging.
    The FAISS index is of the kind ``IndexConfig`` resolves to for this many chunks: an approximate one is
    updated in place from the serving version when the encoder and settings are the same and its drift allows
    (:func:`retrieval.ann_update.refresh_ann`), else rebuilt from all vectors; the manifest's ``ann`` records
    its kind, build time, drift, tombstones and (approximate kinds) the recall measured at its build.

    Returns stats: version, previous, full_rebuild, reused, embedded, removed, size, index_kind,
    index_build_seconds, ann_recall@10 (None for an exact index), index_in_place, retired (+ sparse_tokenized,
    fusion_w_dense, ... with a sparse side).

    Raises:
        storage.mapped.StalePlanError: a part file is missing or changed since its part ran.
    """
    staging = Path(staging)
    plan = json.loads((staging / "plan.json").read_text())
    chunks = pd.read_parquet(staging / "chunks.parquet")
    embed = _once(embed_factory)
    vectors = _assemble(staging, plan, len(chunks), n_parts, parts, embed)
    cfg = IndexConfig(**plan["index"])
    root, prev = Path(index_root), plan["previous"]
    prev_man = _readable_manifest(root, prev)
    index, ann = refresh_ann(root / prev if prev else None, prev_man, vectors, chunks["chunk_id"].to_numpy(np.int64),
                             cfg, same_encoder=not plan["full_rebuild"])
    man = {**(manifest or {}), "model_id": plan["model_id"], "index": plan["index"], "dim": int(vectors.shape[1]),
           "ann": ann}
    extra_stats, write_extra = {}, None
    if sparse is not None:
        side = build_sparse_side(root, plan, chunks, index, sparse, tokenizer, fusion_queries,
                                 query_embed_factory or embed, fusion, vectors=vectors, passage_embed_factory=embed,
                                 search_params=search_params(index, ann))
        man.update(side.manifest)
        extra_stats, write_extra = side.stats, side.write

    def write_all(vdir: Path) -> None:
        if write_extra is not None:
            write_extra(vdir)
        if serving_parts is not None:  # publish_version writes ``man`` after this returns
            man["parts"] = serving_parts(vdir, man, chunks)

    version = publish_version(index_root, index, chunks, man, vectors, write_extra=write_all)
    retired = retire_versions(index_root, cfg.keep_versions)["retired"]
    if not keep_staging:
        shutil.rmtree(staging, ignore_errors=True)
    return {"version": version, "previous": plan["previous"], "full_rebuild": plan["full_rebuild"],
            "reused": len(plan["reuse_rows"]), "embedded": len(plan["todo"]), "removed": plan["removed"],
            "size": int(index.ntotal) - int(ann.get("tombstones", 0)), "index_kind": ann["kind"],
            "index_build_seconds": ann["build_seconds"],
            f"ann_recall@{cfg.recall_k}": ann.get(f"recall@{cfg.recall_k}"), "index_in_place": ann["in_place"],
            "retired": retired, **extra_stats}


def _readable_manifest(root: Path, version: str | None) -> dict:
    """The manifest of ``version`` ({} when there is none or it cannot be read: the next index is built)."""
    if version is None:
        return {}
    try:
        return read_manifest(root, version)
    except (OSError, ValueError) as exc:
        log.warning("index %s: manifest not readable (%s); nothing is reused from it", version, exc)
        return {}


def _once(factory: Callable[[], Embed]) -> Callable[[], Embed]:
    """``factory`` called on first use only (the encoder is loaded once, and only when something is embedded)."""
    loaded: dict = {}

    def get() -> Embed:
        if "embed" not in loaded:
            loaded["embed"] = factory()
        return loaded["embed"]

    return get


def _assemble(staging: Path, plan: dict, n: int, n_parts: int, parts: list[dict] | None,
              embed: Callable[[], Embed]) -> np.ndarray:
    """The version's vectors (n, dim) float32 by row: the reused ones and the embedded parts (verified
    ``parts`` records, else the staged part files, embedding any part not staged yet)."""
    if parts is not None:
        blocks = [np.load(_verified(r)) for r in parts]
    else:
        for part in range(n_parts):
            if not (staging / f"emb-{part:05d}.npz").is_file():
                embed_staged(staging, embed(), part, n_parts)
        blocks = [np.load(staging / f"emb-{p:05d}.npz") for p in range(n_parts)]
    fresh = [(b["rows"], b["vectors"]) for b in blocks if len(b["rows"])]
    reused = np.load(staging / "reused.npy") if plan["reuse_rows"] else None
    dims = [v.shape[1] for _, v in fresh] + ([reused.shape[1]] if reused is not None else [])
    vectors = np.zeros((n, dims[0] if dims else 0), dtype=np.float32)
    for rows, vecs in fresh:
        vectors[rows] = vecs
    if reused is not None:
        vectors[plan["reuse_rows"]] = reused
    return vectors


def _verified(record: dict) -> Path:
    """The part file of ``record`` after checking its sha256 (:class:`storage.mapped.StalePlanError` if not)."""
    path = Path(record["path"])
    if not path.is_file() or file_sha256(path) != record["sha256"]:
        raise StalePlanError(f"embedding part {path} is missing or changed since its part ran")
    return path


def staging_dir(index_root: str | os.PathLike) -> Path:
    """Where a refresh is staged: ``index/.staging`` (never served)."""
    return Path(index_root) / ".staging"


def refresh_index(index_root: str | os.PathLike, chunks: pd.DataFrame, embed: Embed,
                  model_id: str, cfg: IndexConfig = IndexConfig(), manifest: dict | None = None,
                  n_parts: int = 1, **sparse_kwargs) -> dict:
    """Publish the next index version for ``chunks`` (needs ``chunk_id`` and ``text``), in one process:
    :func:`stage_refresh`, :func:`embed_staged` per part, :func:`publish_staged`.

    Vectors of chunk ids present in the serving version are reused when its ``model_id`` matches (the
    FAISS structure, exact or approximate, is rebuilt from them); the rest are embedded with ``embed(texts) -> (n, dim)``. ``sparse_kwargs``
    (``sparse``, ``tokenizer``, ``fusion_queries``, ``query_embed_factory``, ``fusion``) go to
    :func:`publish_staged` to build the sparse side and fit the hybrid weights.

    Returns stats: version, previous, full_rebuild, reused, embedded, removed, size, seconds.
    """
    t0 = time.perf_counter()
    staging = staging_dir(index_root)
    stage_refresh(index_root, chunks, model_id, cfg, staging)
    for part in range(n_parts):
        embed_staged(staging, embed, part, n_parts)
    stats = publish_staged(index_root, staging, n_parts, lambda: embed, manifest, **sparse_kwargs)
    return {**stats, "seconds": time.perf_counter() - t0}
