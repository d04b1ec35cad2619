"""Index stage, search API and evaluation over storage (SPEC §7). Never imports prefect."""
from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import numpy as np

from model.stages import load_encoder
from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.embed import embed_texts
from retrieval.index import IndexConfig, load_index, refresh_index, search
from storage import code_version, file_sha256, manifest_fingerprint, read_table

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


def index_stage(clean_dir, ckpt_dir, index_root, cfg: ChunkConfig, index_cfg: IndexConfig = IndexConfig(),
                batch_size: int = 64, device: str = "auto", on_progress=None) -> dict:
    """Chunk ``documents_clean`` and publish the next ``index/vN``, embedding only new/changed chunks."""
    docs = read_table(clean_dir, ["doc_id", "text", "title", "source", "url"])
    chunks = build_chunks(docs, cfg)
    manifest = {"config": asdict(cfg), "code_version": code_version(RETRIEVAL_PACKAGES),
                "model_dir": os.path.relpath(Path(ckpt_dir).resolve(), Path(index_root).resolve()),
                "metric": "inner_product", "inputs": {"documents_clean": manifest_fingerprint(clean_dir)}}
    encoder = Encoder.from_checkpoint(ckpt_dir, batch_size, device)
    encoder.on_progress = on_progress
    stats = refresh_index(index_root, chunks, encoder, model_id(ckpt_dir),
                          index_cfg, manifest)
    return {**stats, "chunks": int(len(chunks)), "documents": int(chunks["doc_id"].nunique())}


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
