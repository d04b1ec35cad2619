"""Dense side of an index version (SPEC §7): the FAISS index over L2-normalised vectors (inner product =
cosine), exact below a configurable size and approximate (HNSW, Malkov & Yashunin 2018; IVF) from there on,
and the one "FAISS search -> chunk rows" helper every caller uses."""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass

import faiss
import numpy as np

from retrieval.metrics import ann_recall
from storage.bounds import check_bounds

KINDS = ("auto", "flat", "ivf", "hnsw")
ANN_KINDS = ("ivf", "hnsw")


@dataclass(frozen=True)
class IndexConfig:
    """Which FAISS index a version gets (all inner product over L2-normalised vectors).

    kind: ``auto`` (default: exact ``flat`` below ``ann_min_vectors`` vectors, ``ann_kind`` from there on),
    or forced ``flat`` (IndexFlatIP), ``ivf`` (IVFFlat) or ``hnsw`` (HNSWFlat).
    IVF: ``nlist`` inverted lists (0: ``4 * sqrt(n)``, the FAISS guideline; always at most ``n // 39`` so each
    list gets the ~39 training points FAISS asks for), ``nprobe`` lists searched; k-means seeded with ``seed``.
    HNSW (Malkov & Yashunin 2018): ``hnsw_m`` links per node, ``ef_construction`` / ``ef_search`` beam widths;
    built on one thread when ``deterministic`` (multi-threaded insertion order varies between runs).
    ``recall_queries`` indexed vectors (seeded sample) are searched at build time to measure the ANN's
    recall@``recall_k`` against exact search (:func:`ann_recall_report`). ``keep_versions``: the newest
    index versions kept on disk after a publish (besides the serving one and pinned ones,
    :func:`retrieval.versions.retire_versions`); at least 1. ``rebuild_share``: an approximate index is
    updated in place by a refresh until the vectors added or removed since its build exceed this share of it,
    then rebuilt (:mod:`retrieval.ann_update`; 0: always rebuilt).

    Defaults from ``bench/ann_bench.py`` at 21x (33,454 chunks x 128): HNSW at ``ef_search`` 256 keeps recall@10
    0.93 on held-out title queries (0.79 at 64), IVF needs ``nprobe`` 64 of 4 sqrt(n) lists for 0.85.
    """

    kind: str = "auto"
    ann_min_vectors: int = 20_000
    ann_kind: str = "hnsw"
    nlist: int = 0
    nprobe: int = 64
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 256
    seed: int = 13
    deterministic: bool = True
    recall_queries: int = 500
    recall_k: int = 10
    keep_versions: int = 5
    rebuild_share: float = 0.2

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown index kind {self.kind!r} (one of {KINDS})")
        if self.ann_kind not in ANN_KINDS:
            raise ValueError(f"unknown ann_kind {self.ann_kind!r} (one of {ANN_KINDS})")
        check_bounds(self, ann_min_vectors=(1, None), nlist=(0, 1 << 20), nprobe=(1, 1 << 20), hnsw_m=(2, 256),
                     ef_construction=(1, 1 << 16), ef_search=(1, 1 << 16), seed=(0, 2 ** 31 - 1),
                     recall_queries=(0, 1_000_000), recall_k=(1, 10_000), rebuild_share=(0, 1))
        if isinstance(self.keep_versions, bool) or not isinstance(self.keep_versions, int) or self.keep_versions < 1:
            raise ValueError(f"keep_versions must be an integer >= 1, got {self.keep_versions!r}")


def resolve_kind(cfg: IndexConfig, n: int) -> str:
    """The index kind ``cfg`` gives for ``n`` vectors: ``cfg.kind`` unless ``auto``, then ``flat`` below
    ``cfg.ann_min_vectors`` and ``cfg.ann_kind`` at or above it."""
    if cfg.kind != "auto":
        return cfg.kind
    return cfg.ann_kind if n >= cfg.ann_min_vectors else "flat"


def ivf_nlist(cfg: IndexConfig, n: int) -> int:
    """Inverted lists for ``n`` vectors: ``cfg.nlist`` (0: ``round(4 * sqrt(n))``), capped at ``n // 39``, >= 1."""
    want = cfg.nlist or int(round(4 * np.sqrt(max(n, 1))))
    return max(1, min(want, n // 39))


@contextmanager
def omp_threads(n: int | None):
    """FAISS's OpenMP thread count set to ``n`` inside the block (unchanged when None), restored after."""
    if n is None:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def build_index(vectors: np.ndarray, ids: np.ndarray, cfg: IndexConfig = IndexConfig(kind="flat")) -> faiss.Index:
    """An inner-product index with int64 ids over vectors (n, dim) float32, of kind
    :func:`resolve_kind` ``(cfg, n)`` (the default config is exact: callers that rank a fixed candidate set
    with it, such as the fusion fit and the evaluations, get exact search).

    Deterministic for a given input and config: IVF k-means is seeded (``cfg.seed``; FAISS samples at most 256
    training points per list with that seed), HNSW is built on one thread when ``cfg.deterministic``.

    Raises:
        ValueError: unknown ``cfg.kind`` (caught by :class:`IndexConfig`), or vectors not 2-D.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    ids = np.asarray(ids, dtype=np.int64)
    if vectors.ndim != 2:
        raise ValueError(f"vectors must be 2-D (n, dim), got shape {vectors.shape}")
    n, dim = vectors.shape
    kind = resolve_kind(cfg, n)
    threads = None
    if kind == "flat":
        index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    elif kind == "ivf":
        nlist = ivf_nlist(cfg, n)
        index = faiss.IndexIVFFlat(faiss.IndexFlatIP(dim), dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = cfg.seed
        index.train(vectors)
        index.nprobe = min(cfg.nprobe, nlist)
    else:
        hnsw = faiss.IndexHNSWFlat(dim, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = cfg.ef_construction
        hnsw.hnsw.efSearch = cfg.ef_search
        index = faiss.IndexIDMap2(hnsw)
        threads = 1 if cfg.deterministic else None
    if len(ids):
        with omp_threads(threads):
            index.add_with_ids(vectors, ids)
    return index


def build_index_with_report(vectors: np.ndarray, ids: np.ndarray, cfg: IndexConfig) -> tuple[faiss.Index, dict]:
    """:func:`build_index` and what the manifest records about it (key ``ann``): kind (resolved),
    requested (``cfg.kind``), vectors, build_seconds, the kind's parameters, and for an approximate
    index its :func:`ann_recall_report` (``recall@10``, k, queries, recall_seconds); an exact index
    records ``exact: true`` and no measurement."""
    n = int(len(vectors))
    kind = resolve_kind(cfg, n)
    t0 = time.perf_counter()
    index = build_index(vectors, ids, cfg)
    rep = {"kind": kind, "requested": cfg.kind, "ann_min_vectors": cfg.ann_min_vectors, "vectors": n,
           "build_seconds": round(time.perf_counter() - t0, 4), "exact": kind == "flat"}
    if kind == "ivf":
        rep.update(nlist=int(index.nlist), nprobe=int(index.nprobe), seed=cfg.seed)
    elif kind == "hnsw":
        rep.update(hnsw_m=cfg.hnsw_m, ef_construction=cfg.ef_construction, ef_search=cfg.ef_search)
    if kind != "flat":
        r = ann_recall_report(index, vectors, ids, cfg)
        rep.update({k: v for k, v in r.items() if k != "seconds"}, recall_seconds=round(r["seconds"], 4))
    return index, rep


def build_flat_index(vectors: np.ndarray, ids: np.ndarray) -> faiss.Index:
    """Exact inner-product index with int64 ids (see :func:`build_index`)."""
    return build_index(vectors, ids, IndexConfig(kind="flat"))


def ann_recall_report(index: faiss.Index, vectors: np.ndarray, ids: np.ndarray, cfg: IndexConfig) -> dict:
    """Recall@k (``cfg.recall_k``) of ``index`` against exact search over the same ``vectors`` (n, dim) /
    ``ids`` (n,), with ``cfg.recall_queries`` indexed vectors as queries (sample seeded by ``cfg.seed``; all of
    them when fewer), each query's own vector left out (:func:`retrieval.metrics.ann_recall`).

    Returns:
        {"recall@k": float (1.0 with fewer than 2 vectors), "k", "queries", "seconds"}; the key is literally
        ``recall@10`` for ``recall_k = 10``.
    """
    t0 = time.perf_counter()
    n, k = len(vectors), cfg.recall_k
    if min(k, n - 1) < 1:
        return {f"recall@{k}": 1.0, "k": k, "queries": 0, "seconds": time.perf_counter() - t0}
    rows = np.sort(np.random.default_rng(cfg.seed).choice(n, size=min(cfg.recall_queries, n), replace=False))
    r = ann_recall(index, vectors, ids, np.asarray(vectors, dtype=np.float32)[rows], k, self_rows=rows)
    return {f"recall@{k}": r, "k": k, "queries": int(len(rows)), "seconds": time.perf_counter() - t0}


def search_params(index: faiss.Index, ann: dict) -> faiss.SearchParameters | None:
    """FAISS search parameters that keep tombstoned nodes (id -1 in the ID map, left by an in-place HNSW update,
    :mod:`retrieval.ann_update`) out of the results, for a version whose manifest entry ``ann`` counts
    tombstones; None when there are none (plain search)."""
    if not int(ann.get("tombstones", 0)):
        return None
    tomb = faiss.IDSelectorRange(-1, 0)
    live = faiss.IDSelectorNot(tomb)
    inner = faiss.downcast_index(faiss.downcast_index(index).index)
    params = faiss.SearchParametersHNSW(sel=live, efSearch=int(inner.hnsw.efSearch))
    params.referenced_objects = [tomb, live]  # the C++ params hold raw pointers to both
    return params


def search_rows(index: faiss.Index, query_vecs: np.ndarray, depth: int, row_of: dict[int, int] | None = None,
                params: faiss.SearchParameters | None = None) -> tuple[list[list[int]], list[list[float]]]:
    """The one "FAISS search -> rows" step: the top ``depth`` hits of each query vector (q, dim), as chunk rows
    (``row_of[id]``; the ids themselves when ``row_of`` is None) and their inner-product scores, best first;
    empty slots (fewer vectors than ``depth``) dropped. ``depth`` is capped at the index size. ``params``:
    :func:`search_params` of the version (None: plain search).

    Returns:
        (rows, scores): two lists of q lists.
    """
    depth = max(1, min(int(depth), int(index.ntotal)))
    x = np.ascontiguousarray(query_vecs, dtype=np.float32)
    scores, ids = index.search(x, depth) if params is None else index.search(x, depth, params=params)
    rows, vals = [], []
    for srow, irow in zip(scores, ids):
        keep = irow >= 0
        rows.append([int(i) if row_of is None else row_of[int(i)] for i in irow[keep]])
        vals.append([float(s) for s in srow[keep]])
    return rows, vals
