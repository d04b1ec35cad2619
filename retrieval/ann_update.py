"""The dense index of the next version, updated in place from the serving one where FAISS allows (SPEC §7).

An approximate index costs seconds to build at 30k+ vectors (HNSW, one thread for determinism) while a
refresh usually changes a handful of chunks. So a refresh with the same encoder and index settings loads the
previous version's index and edits it: IVF lists drop removed ids (``remove_ids``) and take the new vectors
(``add_with_ids``); HNSW cannot delete a node, so a removed chunk's node stays in the graph as a tombstone
(its id set to -1 in the ID map; :func:`retrieval.dense.search_params` filters it out during the search, so a
query still gets ``k`` live results) and the new vectors are inserted. Edits accumulate as drift: the share
of the index's vectors added or removed since it was last built. Past ``IndexConfig.rebuild_share`` the
index is rebuilt from the stored vectors (FAISS's guidance for graph indexes with many deletions: rebuild).
An exact (flat) index is always rebuilt; it costs a copy of the vectors.
"""
from __future__ import annotations

import time
from pathlib import Path

import faiss
import numpy as np
import pandas as pd

from retrieval.dense import ANN_KINDS, IndexConfig, build_index_with_report, omp_threads, resolve_kind

_SETTINGS = {"hnsw": ("hnsw_m", "ef_construction", "ef_search"), "ivf": ("nprobe",)}


def refresh_ann(prev_dir: Path | None, prev_manifest: dict, vectors: np.ndarray, ids: np.ndarray, cfg: IndexConfig,
                same_encoder: bool) -> tuple[faiss.Index, dict]:
    """The dense index over ``vectors`` (n, dim) float32 with chunk ids ``ids`` (n,), and its manifest entry.

    Updated in place from ``prev_dir/index.faiss`` (its version's manifest ``prev_manifest``) when ``same_encoder``, the
    kind :func:`retrieval.dense.resolve_kind` gives is approximate and equal to the previous one, its settings
    are unchanged and the drift stays within ``cfg.rebuild_share``; otherwise built
    (:func:`retrieval.dense.build_index_with_report`). The entry adds ``in_place`` (bool), ``drift``,
    ``tombstones`` (HNSW nodes of removed chunks), ``rebuilt`` (why it was not updated in place, or None)
    and, in place, ``added`` / ``removed`` and ``built_in`` (the version whose build it edits; its
    ``recall@k`` is that build's measurement).
    """
    kind = resolve_kind(cfg, len(ids))
    prev_ann = prev_manifest.get("ann") or {}
    why = _rebuild_reason(prev_dir, prev_manifest, kind, cfg, same_encoder)
    if why is None and int(prev_manifest.get("dim", -1)) != vectors.shape[1]:
        why = "dimension changed"
    if why is None:
        t0 = time.perf_counter()
        prev_ids = pd.read_parquet(prev_dir / "chunks.parquet", columns=["chunk_id"])["chunk_id"].to_numpy(np.int64)
        removed = np.setdiff1d(prev_ids, ids)
        add = ~np.isin(ids, prev_ids)
        drift = float(prev_ann.get("drift", 0.0)) + (len(removed) + int(add.sum())) / max(len(ids), 1)
        if drift <= cfg.rebuild_share:
            index = faiss.read_index(str(prev_dir / "index.faiss"))
            tombstones = int(prev_ann.get("tombstones", 0))
            if kind == "hnsw":
                tombstones += _tombstone(index, removed)
            elif len(removed):
                index.remove_ids(faiss.IDSelectorBatch(removed))
            with omp_threads(1 if cfg.deterministic else None):
                if add.any():
                    index.add_with_ids(np.ascontiguousarray(vectors[add], dtype=np.float32), ids[add])
            ann = {**prev_ann, "vectors": int(len(ids)), "build_seconds": round(time.perf_counter() - t0, 4),
                   "in_place": True, "rebuilt": None, "added": int(add.sum()), "removed": int(len(removed)),
                   "drift": round(drift, 6), "tombstones": tombstones,
                   "built_in": prev_ann.get("built_in") or prev_dir.name}
            return index, ann
        why = f"drift {drift:.4f} > rebuild_share {cfg.rebuild_share}"
    index, ann = build_index_with_report(vectors, ids, cfg)
    return index, {**ann, "in_place": False, "rebuilt": why, "drift": 0.0, "tombstones": 0}


def _rebuild_reason(prev_dir: Path | None, prev_manifest: dict, kind: str, cfg: IndexConfig, same_encoder: bool
                    ) -> str | None:
    """Why the previous index cannot be edited into the next one (None: it can, drift aside). The previous
    ``index.faiss`` is walked by :func:`retrieval.versions.check_faiss_file` and matched against its manifest
    (``dim``, ``size``) before FAISS reads it: a truncated, forged or swapped file is rebuilt from the vectors,
    never loaded."""
    prev_ann = prev_manifest.get("ann") or {}
    from retrieval.versions import IndexLoadError, check_faiss_file, check_index_matches

    if prev_dir is None or not (prev_dir / "index.faiss").is_file() or not prev_ann:
        return "no previous index"
    if not same_encoder:
        return "encoder changed"
    if kind not in ANN_KINDS:
        return f"{kind} index (exact: always built)"
    if prev_ann.get("kind") != kind:
        return f"kind changed ({prev_ann.get('kind')} -> {kind})"
    changed = [s for s in _SETTINGS[kind] if prev_ann.get(s) != getattr(cfg, s)]
    if changed:
        return f"settings changed ({', '.join(changed)})"
    try:
        check_index_matches(check_faiss_file(prev_dir / "index.faiss"), prev_manifest, prev_dir / "index.faiss")
    except IndexLoadError as exc:
        return f"previous index.faiss unreadable ({str(exc)[:160]})"
    return None


def _tombstone(index: faiss.Index, removed: np.ndarray) -> int:
    """Set the ID-map entries of ``removed`` ids to -1 in an ``IndexIDMap2`` (the nodes stay); returns how many."""
    if not len(removed):
        return 0
    idmap = faiss.downcast_index(index)
    arr = faiss.vector_to_array(idmap.id_map)
    hit = np.isin(arr, removed)
    arr[hit] = -1
    faiss.copy_array_to_vector(arr, idmap.id_map)
    idmap.construct_rev_map()
    return int(hit.sum())
