"""Index stage and search over storage (SPEC §7). Never imports prefect."""
from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from model.stages import load_encoder
from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.embed import embed_texts
from retrieval.index import build_flat_index, load_index, publish_index, search
from storage import code_version, file_sha256, manifest_fingerprint, read_table

RETRIEVAL_PACKAGES = ("retrieval", "model", "storage")


def model_id(ckpt_dir: str | os.PathLike) -> str:
    """Embedding model id: sha256 of the checkpoint's weights file(s)."""
    files = sorted(Path(ckpt_dir).glob("*.safetensors"))
    return "+".join(file_sha256(f)[:16] for f in files)


def index_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, batch_size: int = 64,
                device: str = "auto") -> dict:
    """Chunk ``documents_clean``, embed every chunk with the checkpoint's encoder, publish ``index/vN``."""
    docs = read_table(clean_dir, ["doc_id", "text", "title", "source", "url"])
    chunks = build_chunks(docs, cfg)
    model, enc, matcher = load_encoder(ckpt_dir)
    vecs = embed_texts(model, enc, matcher, chunks["text"].tolist(), max_len=min(128, model.config.max_position_embeddings),
                       max_words=model.config.max_words, batch_size=batch_size, device=device)
    index = build_flat_index(vecs, chunks["chunk_id"].to_numpy(np.int64))
    manifest = {"config": asdict(cfg), "code_version": code_version(RETRIEVAL_PACKAGES),
                "model_id": model_id(ckpt_dir),
                "model_dir": os.path.relpath(Path(ckpt_dir).resolve(), Path(index_root).resolve()), "dim": int(vecs.shape[1]),
                "metric": "inner_product", "inputs": {"documents_clean": manifest_fingerprint(clean_dir)}}
    version = publish_index(index_root, index, chunks, manifest)
    return {"version": version, "chunks": int(len(chunks)), "documents": int(chunks["doc_id"].nunique()),
            "dim": int(vecs.shape[1]), "model_id": manifest["model_id"]}


def query_index(index_root, query: str, k: int = 5, min_score: float | None = None) -> list[dict]:
    """Top-k chunks for a query from the serving index version, embedded by the index's own model."""
    index, chunks, manifest = load_index(index_root)
    model, enc, matcher = load_encoder(Path(index_root) / manifest["model_dir"])
    vec = embed_texts(model, enc, matcher, [query], max_len=min(128, model.config.max_position_embeddings),
                      max_words=model.config.max_words)
    return search(index, chunks, vec, k=k, min_score=min_score)[0]
