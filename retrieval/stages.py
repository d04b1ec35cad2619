"""Index stage, search API and evaluation over storage (SPEC §7). Never imports prefect."""
from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from model.stages import load_encoder
from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.embed import embed_texts
from retrieval.index import IndexConfig, embed_staged, load_index, publish_staged, search, stage_refresh, staging_dir
from storage import code_version, file_sha256, json_sha256, manifest_fingerprint, read_table

RETRIEVAL_PACKAGES = ("retrieval", "model", "storage")


def model_id(ckpt_dir: str | os.PathLike) -> str:
    """Embedding model id: sha256 (16 hex) of the checkpoint's weight files."""
    return "+".join(file_sha256(f)[:16] for f in sorted(Path(ckpt_dir).glob("*.safetensors")))


class Encoder:
    """A checkpoint's encoder as a text -> vector function (mean-pooled, L2-normalised).

    Call with a list of texts -> float32 array (n, hidden).
    """

    def __init__(self, model, enc, matcher, batch_size: int = 64, device: str = "auto", on_progress=None):
        self.model, self.enc, self.matcher, self.on_progress = model, enc, matcher, on_progress
        self.batch_size, self.device = batch_size, device
        self.max_len = min(128, self.model.config.max_position_embeddings)

    @classmethod
    def from_checkpoint(cls, ckpt_dir: str | os.PathLike, batch_size: int = 64, device: str = "auto") -> "Encoder":
        """The encoder of a PolicyBERT checkpoint dir (any head), with its tokenizer and word vocab."""
        return cls(*load_encoder(ckpt_dir), batch_size=batch_size, device=device)

    @classmethod
    def untrained_like(cls, ckpt_dir: str | os.PathLike, seed: int = 13) -> "Encoder":
        """Same architecture and inputs as ``ckpt_dir`` but randomly initialised (a baseline)."""
        import torch

        from model import PolicyBertModel

        model, enc, matcher = load_encoder(ckpt_dir)
        torch.manual_seed(seed)
        return cls(PolicyBertModel(model.config), enc, matcher)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return embed_texts(self.model, self.enc, self.matcher, texts, max_len=self.max_len,
                           max_words=self.model.config.max_words, batch_size=self.batch_size, device=self.device,
                           on_progress=self.on_progress)


def _inputs_key(clean_dir, ckpt_dir, cfg: ChunkConfig, index_cfg: IndexConfig) -> str:
    return json_sha256([manifest_fingerprint(clean_dir), model_id(ckpt_dir), asdict(cfg), asdict(index_cfg)])


def index_plan_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig()) -> dict:
    """Chunk ``documents_clean`` and stage a refresh plan (which chunks to embed) under ``index/.staging``."""
    docs = read_table(clean_dir, ["doc_id", "text", "title", "source", "url"])
    chunks = build_chunks(docs, cfg)
    plan = stage_refresh(index_root, chunks, model_id(ckpt_dir), index_cfg, staging_dir(index_root),
                         extra={"inputs_key": _inputs_key(clean_dir, ckpt_dir, cfg, index_cfg)})
    return {"chunks": int(len(chunks)), "to_embed": len(plan["todo"]), "reused": len(plan["reuse_rows"])}


def index_embed_part_stage(ckpt_dir, index_root, part: int, n_parts: int, batch_size: int = 64,
                           device: str = "auto", on_progress=None) -> int:
    """Embed one of ``n_parts`` slices of the staged chunks (mapped over parts; GPU when present).
    Without a staged plan it does nothing: the publish step plans and embeds what is missing."""
    if not (staging_dir(index_root) / "plan.json").is_file():
        return 0
    encoder = Encoder.from_checkpoint(ckpt_dir, batch_size, device)
    encoder.on_progress = on_progress
    return embed_staged(staging_dir(index_root), encoder, part, n_parts)


def index_publish_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                        n_parts: int = 1, batch_size: int = 64, device: str = "auto") -> dict:
    """Publish the staged refresh as ``index/vN`` (re-planning if the staging is missing or stale, embedding
    any part that is not staged) and switch ``index/CURRENT``."""
    plan_path = staging_dir(index_root) / "plan.json"
    key = _inputs_key(clean_dir, ckpt_dir, cfg, index_cfg)
    if not plan_path.is_file() or json.loads(plan_path.read_text()).get("inputs_key") != key:
        index_plan_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg)
    manifest = {"config": asdict(cfg), "code_version": code_version(RETRIEVAL_PACKAGES),
                "model_dir": os.path.relpath(Path(ckpt_dir).resolve(), Path(index_root).resolve()),
                "metric": "inner_product", "inputs": {"documents_clean": manifest_fingerprint(clean_dir)}}
    stats = publish_staged(index_root, staging_dir(index_root), n_parts,
                           lambda: Encoder.from_checkpoint(ckpt_dir, batch_size, device), manifest)
    chunks = pd.read_parquet(Path(index_root) / stats["version"] / "chunks.parquet", columns=["doc_id"])
    return {**stats, "chunks": int(len(chunks)), "documents": int(chunks["doc_id"].nunique())}


def index_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                batch_size: int = 64, device: str = "auto", on_progress=None, n_parts: int = 1) -> dict:
    """Chunk ``documents_clean`` and publish the next ``index/vN``, embedding only new/changed chunks,
    in one process (plan, every part, publish)."""
    index_plan_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg)
    for part in range(n_parts):
        index_embed_part_stage(ckpt_dir, index_root, part, n_parts, batch_size, device, on_progress)
    return index_publish_stage(clean_dir, ckpt_dir, index_root, cfg, index_cfg, n_parts, batch_size, device)


class Retriever:
    """The serving index version and its embedding model, loaded once for many queries."""

    def __init__(self, index_root: str | os.PathLike):
        self.index, self.chunks, self.manifest = load_index(index_root)
        self.encoder = Encoder.from_checkpoint(Path(index_root) / self.manifest["model_dir"])

    def search(self, query: str, k: int = 5, min_score: float | None = None) -> list[dict]:
        """Top-k chunk dicts (score, chunk_id, doc_id, start, end, text, title, source, url)."""
        return search(self.index, self.chunks, self.encoder([query]), k=k, min_score=min_score)[0]


def query_index(index_root, query: str, k: int = 5, min_score: float | None = None) -> list[dict]:
    """Top-k chunks for one query from the serving index version (see :class:`Retriever`)."""
    return Retriever(index_root).search(query, k, min_score)


def _tokenizer(backend: str):
    from corpus.segment import load_segmenter

    seg = load_segmenter(backend)
    return lambda texts: [[w for w in ws if any(ch.isalnum() for ch in w)] for ws in seg.segment(texts)]


def evaluate_stage(clean_dir, index_root, out_dir, segmenter: str = "auto", seed: int = 13) -> dict:
    """Known-item evaluation of the serving index vs the untrained encoder vs BM25 (HanLP tokens).

    Writes the results table (system, recall@1/5/10, mrr@10, queries) to ``out_dir`` and returns
    ``{"table": records, **ann recalls}``.
    """
    from retrieval.evaluate import evaluate_systems, make_queries
    from storage import write_table

    root = Path(index_root)
    _, chunks, manifest = load_index(index_root)
    version = manifest["version"]
    ckpt = root / manifest["model_dir"]
    docs = read_table(clean_dir, ["doc_id", "title", "citation"])
    queries = make_queries(docs)
    stored = np.load(root / version / "embeddings.npy")
    table, extra = evaluate_systems(
        chunks, queries, {"policybert": Encoder.from_checkpoint(ckpt), "untrained": Encoder.untrained_like(ckpt, seed)},
        _tokenizer(segmenter), stored={"policybert": stored})
    write_table(table, out_dir, name="retrieval_eval", config={"segmenter": segmenter, "seed": seed},
                code_version=code_version(RETRIEVAL_PACKAGES), inputs={"index": f"{version}:{manifest['model_id']}"},
                stats={**extra, "queries": int(len(queries)), "index_version": version})
    return {"table": table.to_dict("records"), **extra, "queries": int(len(queries))}
