"""Index stage, search API and evaluation over storage (SPEC §7). Never imports prefect."""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from retrieval.contracts import EVALUATE, INDEX
from retrieval.query import QueryLimits, check_query
from storage.mapped import StalePlanError
from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.encoders import BertEncoder, Encoder, RetrievalInfo, checkpoint_type  # noqa: F401  (public API)
from retrieval.hybrid import FusionConfig, fuse, mine_queries
from retrieval.index import IndexConfig, embed_staged, load_index, publish_staged, stage_refresh, staging_dir
from retrieval.pinning import EncoderMismatchError, model_id, pin_encoder, verify_encoder
from retrieval.sparse import SparseConfig, SparseIndex, make_tokenizer, top_rows
from storage import file_sha256, json_sha256, manifest_fingerprint, read_manifest, read_table



def _inputs_key(clean_dir, ckpt_dir, cfg: ChunkConfig, index_cfg: IndexConfig) -> str:
    return json_sha256([manifest_fingerprint(clean_dir), model_id(ckpt_dir), asdict(cfg), asdict(index_cfg)])


def index_plan_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                     staging: str | os.PathLike | None = None) -> dict:
    """Chunk ``documents_clean`` and stage a refresh plan (which chunks to embed) in ``staging`` (default
    ``index/.staging``). Chunks carry the documents' ``external_id`` when the table has one."""
    columns = ["doc_id", "text", "title", "source", "url"]
    if "external_id" in read_manifest(clean_dir)["columns"]:
        columns.append("external_id")
    docs = read_table(clean_dir, columns)
    chunks = build_chunks(docs, cfg)
    plan = stage_refresh(index_root, chunks, model_id(ckpt_dir), index_cfg, staging or staging_dir(index_root),
                         extra={"inputs_key": _inputs_key(clean_dir, ckpt_dir, cfg, index_cfg)})
    return {"chunks": int(len(chunks)), "to_embed": len(plan["todo"]), "reused": len(plan["reuse_rows"])}


def index_embed_part_stage(ckpt_dir, index_root, part: int, n_parts: int, batch_size: int = 64,
                           device: str = "auto", on_progress=None, *, staging: str | os.PathLike | None = None,
                           out_file: str | os.PathLike | None = None) -> int:
    """Embed one of ``n_parts`` slices of the chunks planned in ``staging`` (default ``index/.staging``) into
    ``out_file`` (default: beside the plan); mapped over parts, GPU when present. Returns rows embedded.
    Without a staged plan it does nothing: the publish step plans and embeds what is missing."""
    staging = Path(staging or staging_dir(index_root))
    if not (staging / "plan.json").is_file():
        return 0
    encoder = Encoder.from_checkpoint(ckpt_dir, batch_size, device)
    encoder.on_progress = on_progress
    return embed_staged(staging, encoder, part, n_parts, out_file=out_file)


def index_publish_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                        n_parts: int = 1, batch_size: int = 64, device: str = "auto", *,
                        sparse: SparseConfig | None = SparseConfig(), fusion: FusionConfig = FusionConfig(),
                        tokenizer=None, staging: str | os.PathLike | None = None,
                        parts: list[dict] | None = None) -> dict:
    """Publish the refresh staged in ``staging`` (default ``index/.staging``, re-planned if missing or stale;
    with an explicit ``staging`` it is kept for the cache) as ``index/vN`` and switch ``index/CURRENT``.
    ``parts``: the embedded parts' records (``path``, ``sha256``) in part order (mapped embedding); without
    them any part not staged is embedded here.

    The version pins its encoder (a copy under ``index/models/<model_id>/``, ``encoder_dir`` in the
    manifest) and, unless ``sparse`` is None, holds the BM25 side (``sparse/``) and the hybrid weights
    fitted on titles and lead sentences of ``documents_clean`` (``fusion`` in the manifest).
    ``tokenizer``: an already loaded ``make_tokenizer(sparse.segmenter)`` result (else loaded here).

    Raises:
        retrieval.pinning.EncoderMismatchError: the checkpoint changed after the plan was made.
    """
    keep = staging is not None
    staging = Path(staging or staging_dir(index_root))
    plan_path = staging / "plan.json"
    key = _inputs_key(clean_dir, ckpt_dir, cfg, index_cfg)
    if not plan_path.is_file() or json.loads(plan_path.read_text()).get("inputs_key") != key:
        if parts is not None:
            raise StalePlanError(f"the index plan in {staging} is missing or stale: re-run the index plan")
        index_plan_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg, staging=staging)
    planned_id = json.loads(plan_path.read_text())["model_id"]
    encoder_dir = pin_encoder(index_root, ckpt_dir, planned_id)
    pinned = Path(index_root) / encoder_dir
    info = RetrievalInfo.load(pinned, checkpoint_type(pinned))
    manifest = {"config": asdict(cfg), "code_version": INDEX.code_version(),
                "model_dir": os.path.relpath(Path(ckpt_dir).resolve(), Path(index_root).resolve()),
                "encoder_dir": encoder_dir, "retrieval": asdict(info),
                "metric": "inner_product", "inputs": {"documents_clean": manifest_fingerprint(clean_dir)}}
    factory = _encoder_factory(pinned, batch_size, device)
    kw = {}
    if sparse is not None:
        docs = read_table(clean_dir, ["doc_id", "text", "title"])
        kw = dict(sparse=sparse, fusion_queries=mine_queries(docs, fusion), fusion=fusion,
                  tokenizer=(lambda: tokenizer) if tokenizer else None,
                  query_embed_factory=lambda: factory().queries)
    stats = publish_staged(index_root, staging, n_parts, factory, manifest, parts=parts, keep_staging=keep, **kw)
    chunks = pd.read_parquet(Path(index_root) / stats["version"] / "chunks.parquet", columns=["doc_id"])
    return {**stats, "chunks": int(len(chunks)), "documents": int(chunks["doc_id"].nunique())}


def _encoder_factory(ckpt_dir, batch_size: int, device: str):
    """A factory that loads the encoder once, however often it is called."""
    cache: dict = {}

    def make():
        if "enc" not in cache:
            cache["enc"] = Encoder.from_checkpoint(ckpt_dir, batch_size, device)
        return cache["enc"]

    return make


def index_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                batch_size: int = 64, device: str = "auto", on_progress=None, n_parts: int = 1, *,
                sparse: SparseConfig | None = SparseConfig(), fusion: FusionConfig = FusionConfig(),
                tokenizer=None) -> dict:
    """Chunk ``documents_clean`` and publish the next ``index/vN``, embedding only new/changed chunks,
    in one process (plan, every part, publish with the sparse side and fitted hybrid weights)."""
    index_plan_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg)
    for part in range(n_parts):
        index_embed_part_stage(ckpt_dir, index_root, part, n_parts, batch_size, device, on_progress)
    return index_publish_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg, n_parts, batch_size, device,
                               sparse=sparse, fusion=fusion, tokenizer=tokenizer)


MODES = ("hybrid", "dense", "sparse")


def encoder_dir_of(index_root: str | os.PathLike, manifest: dict) -> Path:
    """The encoder folder of an index version: its pinned copy (``encoder_dir``), else (versions
    published before pinning) the recorded ``model_dir``."""
    return Path(index_root) / manifest.get("encoder_dir", manifest["model_dir"])


def _legacy_model_id(ckpt_dir) -> str:
    return "+".join(file_sha256(f)[:16] for f in sorted(Path(ckpt_dir).glob("*.safetensors")))


class Retriever:
    """One index version (default: the serving one) with its pinned encoder and its sparse side,
    loaded once for many queries. ``tokenizer``: an already loaded ``make_tokenizer(...)`` result to
    share between retrievers (checked against the version's segmenter). ``limits``: the largest ``k`` and the
    longest query a search accepts.

    Raises (at construction):
        FileNotFoundError: no index published.
        retrieval.pinning.EncoderMismatchError: the encoder found does not hash to the version's
            ``model_id`` (a rebuilt or tampered checkpoint), or the segmenter differs from the one
            that tokenized the sparse side.
    """

    def __init__(self, index_root: str | os.PathLike, version: str | None = None, device: str = "auto",
                 batch_size: int = 64, tokenizer=None, limits: QueryLimits = QueryLimits()):
        root = Path(index_root)
        self.limits = limits
        self.index, self.chunks, self.manifest = load_index(root, version)
        vdir = root / self.manifest["version"]
        enc_dir = encoder_dir_of(root, self.manifest)
        if "encoder_dir" in self.manifest:
            verify_encoder(enc_dir, self.manifest["model_id"])
        elif _legacy_model_id(enc_dir) != self.manifest["model_id"]:
            raise EncoderMismatchError(f"encoder {enc_dir} is not the one index {self.manifest['version']} was "
                                       f"built with (weights changed); rebuild the index")
        self.encoder = Encoder.from_checkpoint(enc_dir, batch_size, device)
        self.vectors = np.load(vdir / "embeddings.npy", mmap_mode="r") if (vdir / "embeddings.npy").is_file() else None
        self.row_of = {int(c): k for k, c in enumerate(self.chunks["chunk_id"])}
        self.sparse, self._tokenize = None, tokenizer
        sp = self.manifest.get("sparse")
        if sp:
            self.sparse = SparseIndex.load(vdir / sp["dir"])
        self.fusion = self.manifest.get("fusion", {"w_dense": 0.5, "rrf_k": 60, "depth": 100})

    def tokenize(self, texts: list[str]) -> list[list[str]]:
        """Query tokens with the segmenter that built the sparse side (loaded on first use; a given
        ``tokenizer=(fn, identity)`` is used instead when its identity matches).

        Raises:
            EncoderMismatchError: the segmenter here is not the one that tokenized the index.
        """
        if self._tokenize is None or not callable(self._tokenize):
            sp = self.manifest["sparse"]
            fn, ident = self._tokenize or make_tokenizer(sp["backend"])
            if (ident["backend"], ident["model_id"]) != (sp["backend"], sp["segmenter_model_id"]):
                raise EncoderMismatchError(f"segmenter {ident} differs from the one that built the sparse index "
                                           f"({sp['backend']}, {sp['segmenter_model_id']})")
            self._tokenize = fn
        return self._tokenize(texts)

    def _dense(self, qv: np.ndarray, depth: int) -> tuple[list[int], dict[int, float]]:
        scores, ids = self.index.search(np.ascontiguousarray(qv, dtype=np.float32), min(depth, self.index.ntotal))
        rows = [self.row_of[int(i)] for i in ids[0] if i >= 0]
        return rows, {r: float(s) for r, s in zip(rows, scores[0])}

    def search(self, query: str, k: int = 5, min_score: float | None = None, mode: str = "hybrid") -> list[dict]:
        """Top-k chunk dicts for ``query``: score (the mode's: fused RRF score for ``hybrid``, cosine for
        ``dense``, BM25 for ``sparse``), dense_score, sparse_score, dense_rank, sparse_rank (1-based within
        each side's top ``depth`` candidates, None beyond), mode, chunk_id, doc_id, start, end, text, title,
        source, url. Hits whose score is below ``min_score`` are dropped. ``hybrid`` on a version without a
        sparse side answers ``dense``.

        Raises:
            retrieval.query.QueryError: an empty or whitespace query, one longer than ``limits.max_chars``, or
                ``k`` outside 1..``limits.max_k`` (:class:`~retrieval.query.QueryLimits`).
            ValueError: unknown mode, or ``sparse`` on a version without a sparse side.
        """
        query = check_query(query, k, self.limits)
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (one of {MODES})")
        if self.sparse is None:
            if mode == "sparse":
                raise ValueError(f"index {self.manifest['version']} has no sparse side (built before hybrid search)")
            mode = "dense"
        depth = max(int(self.fusion.get("depth", 100)), k)
        qv = self.encoder.queries([query]) if mode != "sparse" else None
        d_rows, d_score = self._dense(qv, depth) if qv is not None else ([], {})
        s_all = self.sparse.scores(self.tokenize([query])[0]) if self.sparse is not None else None
        s_rows = top_rows(s_all, depth)[0].tolist() if s_all is not None and mode != "dense" else []
        if mode == "hybrid":
            ranked = [(r, sc) for r, sc, _, _ in fuse(d_rows, s_rows, float(self.fusion["w_dense"]),
                                                     int(self.fusion.get("rrf_k", 60)))]
        elif mode == "dense":
            ranked = [(r, d_score[r]) for r in d_rows]
        else:
            ranked = [(r, float(s_all[r])) for r in s_rows]
        d_rank = {r: i + 1 for i, r in enumerate(d_rows)}
        s_rank = {r: i + 1 for i, r in enumerate(s_rows)} if s_rows else {
            r: i + 1 for i, r in enumerate(top_rows(s_all, depth)[0].tolist())} if s_all is not None else {}
        hits = []
        for r, sc in ranked[:k]:
            if min_score is not None and sc < min_score:
                continue
            hits.append({"score": float(sc), "dense_score": self._dense_score(r, d_score, qv),
                         "sparse_score": float(s_all[r]) if s_all is not None else None,
                         "dense_rank": d_rank.get(r), "sparse_rank": s_rank.get(r), "mode": mode,
                         **self._chunk(r)})
        return hits

    def _dense_score(self, row: int, known: dict[int, float], qv) -> float | None:
        if row in known:
            return known[row]
        if qv is None or self.vectors is None:
            return None
        return float(np.asarray(self.vectors[row]) @ qv[0])

    def _chunk(self, row: int) -> dict:
        rec = self.chunks.iloc[row].to_dict()
        rec = {c: (v.item() if isinstance(v, np.generic) else v) for c, v in rec.items()}
        return {c: (None if isinstance(v, float) and np.isnan(v) else v) for c, v in rec.items()}


def query_index(index_root, query: str, k: int = 5, min_score: float | None = None, mode: str = "hybrid") -> list[dict]:
    """Top-k chunks for one query from the serving index version (see :class:`Retriever`)."""
    return Retriever(index_root).search(query, k, min_score, mode)


def retrieval_train_stage(clean_dir, ckpt_dir, out_dir, cfg=None, segmenter: str = "auto", log=print) -> dict:
    """Retrieval-train an encoder (:mod:`retrieval.train`): mine query/passage pairs from
    ``documents_clean`` (titles, headings, ICT sentences; no held-out questions), fine-tune the encoder
    of ``ckpt_dir`` (the fine-tuned PolicyBERT, or a local HF BERT sentence encoder such as
    bge-base-zh-v1.5) with InfoNCE over in-batch and mined hard negatives, and save an HF checkpoint with
    ``retrieval.json`` (pooling, query instruction) and ``metrics.json`` to ``out_dir`` (atomically).

    Args:
        cfg: :class:`retrieval.train.RetrievalTrainConfig` (default: sized for cpu-small on 2 cores).
        segmenter: tokenizer backend of the BM25 baseline on the dev pairs.

    Returns:
        {"out_dir", "pairs", "dev_before", "dev_bm25", "dev_after", "seconds", "retrieval", "model_id"}.

    Raises:
        ValueError: too few pairs mined from the corpus.
    """
    from retrieval.train import RetrievalTrainConfig, mine_pairs, train_retrieval

    cfg = cfg or RetrievalTrainConfig()
    docs = read_table(clean_dir, ["doc_id", "text", "title"])
    pairs = mine_pairs(docs, cfg)
    metrics = train_retrieval(ckpt_dir, pairs, out_dir, cfg, make_tokenizer(segmenter)[0], log)
    keys = ("pairs", "dev_before", "dev_bm25", "dev_after", "seconds", "retrieval")
    return {"out_dir": str(out_dir), **{k: metrics.get(k) for k in keys}, "model_id": model_id(out_dir)}


def _tokenizer(backend: str):
    return make_tokenizer(backend)[0]


def retriever_rankings(retriever: Retriever, queries: list[str], mode: str, k: int = 10) -> list[list[str]]:
    """Doc ids of the top-k chunks per query from a :class:`Retriever` in ``mode``."""
    return [[h["doc_id"] for h in retriever.search(q, k, mode=mode)] for q in queries]


def evaluate_stage(clean_dir, index_root, out_dir, segmenter: str = "auto", seed: int = 13) -> dict:
    """Known-item evaluation of the serving index vs the untrained encoder vs BM25 (HanLP tokens, rank-bm25),
    plus the serving version's own sparse side (``sparse``) and its hybrid fusion (``hybrid``).

    Writes the results table (system, recall@1/5/10, mrr@10, queries) to ``out_dir`` and returns
    ``{"table": records, **ann recalls}``.
    """
    from retrieval.evaluate import evaluate_systems, make_queries
    from storage import write_table

    root = Path(index_root)
    _, chunks, manifest = load_index(index_root)
    version = manifest["version"]
    ckpt = encoder_dir_of(root, manifest)
    docs = read_table(clean_dir, ["doc_id", "title", "citation"])
    queries = make_queries(docs)
    stored = np.load(root / version / "embeddings.npy")
    table, extra = evaluate_systems(
        chunks, queries, {"policybert": Encoder.from_checkpoint(ckpt), "untrained": Encoder.untrained_like(ckpt, seed)},
        _tokenizer(segmenter), stored={"policybert": stored})
    if manifest.get("sparse"):
        from retrieval.evaluate import rank_metrics

        r = Retriever(index_root)
        rows = [{"system": m, **rank_metrics(retriever_rankings(r, queries["query"].tolist(), m),
                                             queries["doc_id"].tolist())} for m in ("sparse", "hybrid")]
        table = pd.concat([table, pd.DataFrame(rows)], ignore_index=True)
        extra["fusion_w_dense"] = manifest["fusion"]["w_dense"]
    write_table(table, out_dir, name="retrieval_eval", config={"segmenter": segmenter, "seed": seed},
                code_version=EVALUATE.code_version(), inputs={"index": f"{version}:{manifest['model_id']}"},
                stats={**extra, "queries": int(len(queries)), "index_version": version})
    return {"table": table.to_dict("records"), **extra, "queries": int(len(queries))}
