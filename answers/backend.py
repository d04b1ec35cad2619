"""The one place the answer stage touches the retrieval package (SPEC §7): the serving index version, its
hybrid search, its encoder and its segmenter.

Everything the answers need from an index version goes through :class:`SearchBackend`, so a change inside
``retrieval/`` meets this module alone.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np

CURRENT = "CURRENT"


class IndexMissingError(FileNotFoundError):
    """No index version is published under the index root (run the pipeline first)."""


def serving_version(index_root: str | os.PathLike) -> str:
    """The version named by ``index/CURRENT``, read in one ``read`` (the file is replaced atomically by
    a refresh, so a reader sees the old name or the new one, never a mix).

    Raises:
        IndexMissingError: no ``CURRENT`` file, or it names a version that does not exist.
    """
    path = Path(index_root) / CURRENT
    try:
        name = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise IndexMissingError(f"no index in {index_root} (no {CURRENT}): run the pipeline first") from None
    if not name or not (Path(index_root) / name).is_dir():
        raise IndexMissingError(f"{path} names version {name!r}, which is not in {index_root}")
    return name


class SearchBackend:
    """One index version: ``search`` (the project's hybrid search), query/passage vectors from the version's
    pinned encoder, tokens from the segmenter that built its BM25 side, and ``doc_cache``: the answer stage's
    per-document work under these tokens (:class:`~answers.doc_cache.DocumentCache`, ``cache_docs`` documents).

    Raises (at construction): IndexMissingError, and whatever ``retrieval.stages.Retriever`` raises for a
    version it refuses (e.g. ``EncoderMismatchError`` for a tampered encoder).
    """

    def __init__(self, index_root: str | os.PathLike, version: str | None = None, tokenizer=None,
                 cache_docs: int = 4096):
        from answers.doc_cache import DocumentCache
        from retrieval.stages import Retriever

        self.index_root = Path(index_root)
        self.version = version or serving_version(index_root)
        self._retriever = Retriever(self.index_root, version=self.version, tokenizer=tokenizer)
        manifest = self._retriever.manifest
        self.model_id = str(manifest.get("model_id", ""))
        self.encoder_name = str(manifest.get("encoder_dir", manifest.get("model_dir", "")))
        self.doc_cache = DocumentCache(cache_docs)

    def search(self, question: str, k: int, mode: str = "hybrid") -> list[dict]:
        """Top-``k`` chunks of the search (``hybrid``; ``sparse`` = BM25 alone, for baselines), best first
        (dicts with chunk_id, doc_id, start, end, text, title, source, url, score, dense_score, sparse_score,
        dense_rank, sparse_rank; external_id when the documents had one). Raises ``retrieval.query.QueryError`` on a bad question or ``k``."""
        return self._retriever.search(question, k, mode=mode)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Query vectors (n, dim), L2-normalised float32, from the version's pinned encoder."""
        return np.asarray(self._retriever.encoder.queries(list(texts)), dtype=np.float32)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Passage vectors (n, dim), L2-normalised float32, from the version's pinned encoder."""
        if not texts:
            return np.zeros((0, 1), dtype=np.float32)
        return np.asarray(self._retriever.encoder(list(texts)), dtype=np.float32)

    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """BM25 tokens (the segmenter that built the version's sparse side; letters/digits only)."""
        return self._retriever.tokenize(list(texts))
