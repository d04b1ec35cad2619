"""FAISS index versions (SPEC §7): ``index/vN/{index.faiss, chunks.parquet, embeddings.npy, manifest.json}``
and an atomically switched ``index/CURRENT`` pointer; earlier versions stay for rollback.

A refresh reuses the vectors of unchanged chunks from the serving version (same embedding model),
embeds only new or changed chunks, drops removed ones, writes the next version beside the old
and then switches the pointer: a crash mid-refresh leaves the last good version serving, and a
query during a refresh answers from it. A different embedding model forces a full rebuild.

Past a configurable size (``IndexConfig.ann_min_vectors``) a version gets an approximate index (HNSW or
IVF) instead of the exact one, and records its recall@10 against exact search, measured at build time.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import faiss
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from storage.atomic import atomic_path, atomic_write_text
from storage.bounds import check_bounds

if TYPE_CHECKING:
    from retrieval.hybrid import FusionConfig
    from retrieval.sparse import SparseConfig, Tokenize

CURRENT = "CURRENT"
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
    recall@``recall_k`` against exact search (:func:`ann_recall_report`).

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

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown index kind {self.kind!r} (one of {KINDS})")
        if self.ann_kind not in ANN_KINDS:
            raise ValueError(f"unknown ann_kind {self.ann_kind!r} (one of {ANN_KINDS})")
        check_bounds(self, ann_min_vectors=(1, None), nlist=(0, 1 << 20), nprobe=(1, 1 << 20), hnsw_m=(2, 256),
                     ef_construction=(1, 1 << 16), ef_search=(1, 1 << 16), seed=(0, 2 ** 31 - 1),
                     recall_queries=(0, 1_000_000), recall_k=(1, 10_000))


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
def _omp_threads(n: int | None):
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
        with _omp_threads(threads):
            index.add_with_ids(vectors, ids)
    return index


def ann_recall_report(index: faiss.Index, vectors: np.ndarray, ids: np.ndarray, cfg: IndexConfig) -> dict:
    """Recall@k (``cfg.recall_k``) of ``index`` against exact inner-product search over the same ``vectors``
    (n, dim) / ``ids`` (n,), with ``cfg.recall_queries`` indexed vectors as queries (sample seeded by
    ``cfg.seed``; all of them when fewer).

    Each query's own id is left out of both lists (an indexed vector trivially finds itself), so the figure
    is about its k true neighbours. Ties count: an approximate hit is right when its score reaches the exact
    k-th score (within 1e-5), so duplicate vectors do not lower the figure.

    Returns:
        {"recall@k": mean share of the exact top-k found (float, 1.0 with fewer than 2 vectors),
        "k", "queries", "seconds"}; the key is literally ``recall@10`` for ``recall_k = 10``.
    """
    t0 = time.perf_counter()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    ids = np.asarray(ids, dtype=np.int64)
    n, k = len(vectors), cfg.recall_k
    k_eff = min(k, n - 1)
    if k_eff < 1:
        return {f"recall@{k}": 1.0, "k": k, "queries": 0, "seconds": time.perf_counter() - t0}
    rows = np.sort(np.random.default_rng(cfg.seed).choice(n, size=min(cfg.recall_queries, n), replace=False))
    q = vectors[rows]
    exact = faiss.IndexFlatIP(vectors.shape[1])
    exact.add(vectors)
    e_scores, e_rows = exact.search(q, k_eff + 1)
    a_scores, a_ids = index.search(q, k_eff + 1)
    found = 0
    for j, r in enumerate(rows):
        keep = e_rows[j] != r
        kth = e_scores[j][keep][:k_eff][-1]
        mine = (a_ids[j] >= 0) & (a_ids[j] != ids[r])
        found += int(min(k_eff, int((a_scores[j][mine][:k_eff] >= kth - 1e-5).sum())))
    return {f"recall@{k}": found / (len(rows) * k_eff), "k": k, "queries": int(len(rows)),
            "seconds": time.perf_counter() - t0}


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


_VERSION = re.compile(r"v[0-9]{1,9}")


class IndexLoadError(ValueError):
    """An index version that cannot be loaded: ``CURRENT`` naming something other than a version ``vN``
    (a path such as ``../..``), or a ``manifest.json``, ``index.faiss`` or ``chunks.parquet`` that does
    not read (truncated, overwritten, not what :func:`publish_index` writes)."""


def check_version(name: str, where: str) -> str:
    """``name`` when it is a version name ``vN`` (what :func:`publish_index` writes), never a path.

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
    p = Path(index_root) / CURRENT
    if not p.is_file():
        return None
    with open(p, "rb") as fh:
        raw = fh.read(256)
    return check_version(raw.decode("utf-8", "replace").strip(), str(p))


def publish_index(index_root: str | os.PathLike, index: faiss.Index, chunks: pd.DataFrame, manifest: dict,
                  vectors: np.ndarray | None = None, write_extra: Callable[[Path], None] | None = None) -> str:
    """Write version ``vN`` (N = last + 1) and switch ``CURRENT`` to it atomically. Returns ``vN``.

    ``vectors`` (rows aligned with ``chunks``) are kept as ``embeddings.npy`` for later refreshes;
    ``write_extra(folder)`` writes more files (the sparse index) into the version before it is renamed
    into place, so they are published and switched together with the dense index.
    """
    root = Path(index_root)
    root.mkdir(parents=True, exist_ok=True)
    nums = [int(p.name[1:]) for p in root.glob("v*") if p.is_dir() and p.name[1:].isdigit()]
    version = f"v{max(nums, default=0) + 1}"
    with atomic_path(root / version) as tmp:
        tmp.mkdir()
        faiss.write_index(index, str(tmp / "index.faiss"))
        pq.write_table(pa.Table.from_pandas(chunks, preserve_index=False), tmp / "chunks.parquet", compression="zstd")
        if vectors is not None:
            np.save(tmp / "embeddings.npy", np.ascontiguousarray(vectors, dtype=np.float32))
        if write_extra is not None:
            write_extra(tmp)
        (tmp / "manifest.json").write_text(json.dumps({**manifest, "version": version, "size": int(index.ntotal),
                                                      "chunks": int(len(chunks))},
                                                      ensure_ascii=False, indent=1, default=str))
    atomic_write_text(root / CURRENT, version)
    return version


def load_index(index_root: str | os.PathLike, version: str | None = None) -> tuple[faiss.Index, pd.DataFrame, dict]:
    """(index, chunks, manifest) of ``version`` (default: the serving one).

    Raises:
        FileNotFoundError: no index has been published under ``index_root``, or a file of it is missing.
        IndexLoadError: ``CURRENT`` or ``version`` is not a version name; a file of the version is corrupt.
    """
    version = version or current_version(index_root)
    if version is None:
        raise FileNotFoundError(f"no index published under {index_root} (run the pipeline first)")
    d = Path(index_root) / check_version(version, "the requested version")
    if not d.is_dir():
        raise FileNotFoundError(f"index version {version} not found under {index_root}")
    try:
        manifest = json.loads((d / "manifest.json").read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:
        raise IndexLoadError(f"{d / 'manifest.json'}: not a readable manifest ({str(exc)[:120]})") from exc
    if not isinstance(manifest, dict) or manifest.get("version") != version:
        raise IndexLoadError(f"{d / 'manifest.json'}: not the manifest of version {version}")
    try:
        index = faiss.read_index(str(d / "index.faiss"))
    except RuntimeError as exc:  # faiss reports a truncated or foreign file this way
        raise IndexLoadError(f"{d / 'index.faiss'}: not a readable FAISS index "
                             f"({str(exc).strip().splitlines()[-1][:160]})") from exc
    try:
        chunks = pd.read_parquet(d / "chunks.parquet")
    except (OSError, ValueError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise IndexLoadError(f"{d / 'chunks.parquet'}: not a readable chunks table ({str(exc)[:120]})") from exc
    return index, chunks, manifest


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
        try:
            pm = json.loads((root / prev / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as exc:  # corrupt serving version: nothing reused from it
            log.warning("index %s: manifest not readable (%s); every chunk is embedded again", prev, exc)
            pm = {}
        pm = pm if isinstance(pm, dict) else {}
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


def embed_staged(staging: str | os.PathLike, embed: Callable[[list[str]], np.ndarray], part: int, n_parts: int,
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
                   embed_factory: Callable[[], Callable[[list[str]], np.ndarray]], manifest: dict | None = None, *,
                   sparse: "SparseConfig | None" = None, tokenizer: "Callable[[], tuple[Tokenize, dict]] | None" = None,
                   fusion_queries: pd.DataFrame | None = None,
                   query_embed_factory: Callable[[], Callable[[list[str]], np.ndarray]] | None = None,
                   fusion: "FusionConfig | None" = None, parts: list[dict] | None = None,
                   keep_staging: bool = False) -> dict:
    """Assemble reused and embedded vectors (parts not staged are embedded here), build the index,
    publish the next version and switch ``CURRENT``; the staging folder is removed unless ``keep_staging``.

    ``parts``: the records of the embedded parts (``path``, ``sha256``), in part order, as the mapped
    embedding tasks returned them; each file is checked against its sha256 (a missing or changed part
    raises :class:`storage.mapped.StalePlanError`). Without it the parts are read from the staging folder.

    With ``sparse`` (a :class:`~retrieval.sparse.SparseConfig`) the version also gets ``sparse/``: BM25
    over the chunks' tokens (``tokenizer()`` -> (texts -> tokens, segmenter identity), loaded once;
    tokens of chunks already in the previous version are reused when its sparse key matches). With
    ``fusion_queries`` (query, doc_id) the hybrid weights are fitted on them
    (:func:`retrieval.hybrid.fit_fusion`; queries embedded with ``query_embed_factory()``, default
    ``embed_factory()``, their vectors reused from the previous version under the same model) and stored
    in the manifest as ``fusion``.

    The FAISS index is of the kind ``IndexConfig`` resolves to for this many chunks (exact below
    ``ann_min_vectors``, IVF or HNSW from there on), rebuilt from all vectors (stored + new) on every
    publish; the manifest's ``ann`` records its kind, build time and (approximate kinds) its recall@k
    against exact search (:func:`build_index_with_report`).

    Returns stats: version, previous, full_rebuild, reused, embedded, removed, size, index_kind,
    index_build_seconds, ann_recall@10 (None for an exact index) (+ sparse_tokenized, fusion_w_dense with
    a sparse side).
    """
    staging = Path(staging)
    plan = json.loads((staging / "plan.json").read_text())
    chunks = pd.read_parquet(staging / "chunks.parquet")
    loaded: dict = {}

    def embed() -> Callable[[list[str]], np.ndarray]:
        if "embed" not in loaded:
            loaded["embed"] = embed_factory()
        return loaded["embed"]

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
    vectors = np.zeros((len(chunks), dims[0] if dims else 0), dtype=np.float32)
    for rows, vecs in fresh:
        vectors[rows] = vecs
    if reused is not None:
        vectors[plan["reuse_rows"]] = reused
    cfg = IndexConfig(**plan["index"])
    index, ann = build_index_with_report(vectors, chunks["chunk_id"].to_numpy(np.int64), cfg)
    man = {**(manifest or {}), "model_id": plan["model_id"], "index": plan["index"], "dim": int(vectors.shape[1]),
           "ann": ann}
    extra_stats, write_extra = {}, None
    if sparse is not None:
        from retrieval.sparse_build import build_sparse_side

        qembed = query_embed_factory or (lambda: embed())
        side = build_sparse_side(Path(index_root), plan, chunks, index, sparse, tokenizer, fusion_queries,
                                 qembed, fusion, vectors=vectors, passage_embed_factory=embed)
        man.update(side.manifest)
        extra_stats, write_extra = side.stats, side.write
    version = publish_index(index_root, index, chunks, man, vectors, write_extra=write_extra)
    if not keep_staging:
        shutil.rmtree(staging, ignore_errors=True)
    return {"version": version, "previous": plan["previous"], "full_rebuild": plan["full_rebuild"],
            "reused": len(plan["reuse_rows"]), "embedded": len(plan["todo"]), "removed": plan["removed"],
            "size": int(index.ntotal), "index_kind": ann["kind"], "index_build_seconds": ann["build_seconds"],
            f"ann_recall@{cfg.recall_k}": ann.get(f"recall@{cfg.recall_k}"), **extra_stats}


def _verified(record: dict) -> Path:
    """The part file of ``record`` after checking its sha256 (:class:`storage.mapped.StalePlanError` if not)."""
    from storage.hashing import file_sha256
    from storage.mapped import StalePlanError

    path = Path(record["path"])
    if not path.is_file() or file_sha256(path) != record["sha256"]:
        raise StalePlanError(f"embedding part {path} is missing or changed since its part ran")
    return path


def staging_dir(index_root: str | os.PathLike) -> Path:
    """Where a refresh is staged: ``index/.staging`` (never served)."""
    return Path(index_root) / ".staging"


def refresh_index(index_root: str | os.PathLike, chunks: pd.DataFrame, embed: Callable[[list[str]], np.ndarray],
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


def search(index: faiss.Index, chunks: pd.DataFrame, query_vecs: np.ndarray, k: int = 5,
           min_score: float | None = None) -> list[list[dict]]:
    """Top-k chunks per query vector (q, dim): dicts with score, chunk_id and the chunk's columns,
    hits below ``min_score`` dropped."""
    by_id = chunks.set_index("chunk_id")
    scores, ids = index.search(np.ascontiguousarray(query_vecs, dtype=np.float32), k)
    out = []
    for srow, irow in zip(scores, ids):
        hits = []
        for s, i in zip(srow, irow):
            if i < 0 or (min_score is not None and s < min_score):
                continue
            rec = {c: (None if isinstance(v, float) and np.isnan(v) else v)
                   for c, v in by_id.loc[int(i)].to_dict().items()}
            hits.append({"score": float(s), "chunk_id": int(i), **rec})
        out.append(hits)
    return out
