"""FAISS index versions (SPEC §7): ``index/vN/{index.faiss, chunks.parquet, manifest.json}`` and an
atomically switched ``index/CURRENT`` pointer; the previous version stays for rollback.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import faiss
import numpy as np
import pandas as pd

from storage.atomic import atomic_path, atomic_write_text
from storage.tables import read_table, write_table

CURRENT = "CURRENT"


def build_flat_index(vectors: np.ndarray, ids: np.ndarray) -> faiss.Index:
    """Exact inner-product index with int64 ids: vectors (n, dim) float32, ids (n,) int64."""
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(vectors.shape[1]))
    if len(ids):
        index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), np.asarray(ids, dtype=np.int64))
    return index


def current_version(index_root: str | os.PathLike) -> str | None:
    """Name of the serving version (``vN``) or None when no index was published."""
    p = Path(index_root) / CURRENT
    return p.read_text().strip() if p.is_file() else None


def publish_index(index_root: str | os.PathLike, index: faiss.Index, chunks: pd.DataFrame, manifest: dict) -> str:
    """Write a new version ``vN`` (N = last + 1) and switch ``CURRENT`` to it atomically.

    A crash before the switch leaves the previous version serving. Returns ``vN``.
    """
    root = Path(index_root)
    root.mkdir(parents=True, exist_ok=True)
    nums = [int(p.name[1:]) for p in root.glob("v*") if p.is_dir() and p.name[1:].isdigit()]
    version = f"v{max(nums, default=0) + 1}"
    with atomic_path(root / version) as tmp:
        tmp.mkdir()
        faiss.write_index(index, str(tmp / "index.faiss"))
        write_table(chunks, tmp / "chunks", name="chunks", config=manifest.get("config"),
                    code_version=manifest.get("code_version", ""))
        (tmp / "manifest.json").write_text(json.dumps({**manifest, "version": version, "size": int(index.ntotal)},
                                                      ensure_ascii=False, indent=1, default=str))
    atomic_write_text(root / CURRENT, version)
    return version


def load_index(index_root: str | os.PathLike) -> tuple[faiss.Index, pd.DataFrame, dict]:
    """The serving version's (index, chunks, manifest).

    Raises:
        FileNotFoundError: no index has been published under ``index_root``.
    """
    version = current_version(index_root)
    if version is None:
        raise FileNotFoundError(f"no index published under {index_root} (run the pipeline first)")
    d = Path(index_root) / version
    manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    return faiss.read_index(str(d / "index.faiss")), read_table(d / "chunks"), manifest


def search(index: faiss.Index, chunks: pd.DataFrame, query_vecs: np.ndarray, k: int = 5,
           min_score: float | None = None) -> list[list[dict]]:
    """Top-k chunks per query vector (q, dim): dicts with score and the chunk's columns."""
    by_id = chunks.set_index("chunk_id")
    scores, ids = index.search(np.ascontiguousarray(query_vecs, dtype=np.float32), k)
    out = []
    for srow, irow in zip(scores, ids):
        hits = []
        for s, i in zip(srow, irow):
            if i < 0 or (min_score is not None and s < min_score):
                continue
            rec = {k: (None if isinstance(v, float) and np.isnan(v) else v)
                   for k, v in by_id.loc[int(i)].to_dict().items()}
            hits.append({"score": float(s), "chunk_id": int(i), **rec})
        out.append(hits)
    return out
