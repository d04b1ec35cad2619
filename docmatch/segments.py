"""Document matrices for LTM-B (SPEC §12): a document is its segments' vectors, one row a segment, in order.

- In an index version (SPEC §7) the segments are the version's own chunks and the rows their stored vectors
  (``chunks.parquet`` + ``embeddings.npy``, rows aligned; ordered by ``start``): :func:`version_matrices`,
  nothing re-embedded.
- A document outside the version (e.g. LawRefBook laws for a policy-corpus index) is chunked the way the
  version chunks (:func:`retrieval.chunks.chunk_text` with the version's ``ChunkConfig``; identical chunk
  texts in one document kept once, as :func:`retrieval.chunks.build_chunks` does), capped at its first
  ``max_segments`` segments, and embedded with the version's pinned encoder (``encode_corpus``, L2-normalised)
  by :class:`SegmentCache`, which keeps each document's rows on disk under the sha256 of (encoder id, chunk
  config, text): a later call with as many or fewer segments reads them back, one with more embeds only the
  segments the cache lacks (a document's first n segments are a prefix of its first n + 1).
"""
from __future__ import annotations

import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from retrieval.chunks import ChunkConfig, chunk_text
from storage import atomic_path, json_sha256


def segments(text: str, cfg: ChunkConfig = ChunkConfig(), max_segments: int | None = None) -> list[str]:
    """The first ``max_segments`` (None: all) chunk texts of ``text`` in document order, stripped, empty and
    repeated ones dropped (as the index does)."""
    out: list[str] = []
    for s, e in chunk_text(text, cfg):
        t = text[s:e].strip()
        if t and t not in out:
            out.append(t)
        if max_segments is not None and len(out) >= max_segments:
            break
    return out


def version_matrices(version_dir: str | os.PathLike, doc_ids: Sequence[str] | None = None,
                     max_segments: int | None = None, drop: dict[str, Sequence[str]] | None = None
                     ) -> dict[str, np.ndarray]:
    """doc_id -> float32 (n_segments, hidden) of an index version: its chunks' stored vectors ordered by
    ``start`` (first ``max_segments``; None: all), for ``doc_ids`` (None: every document). ``drop``: doc_id ->
    names; that document's chunks whose text holds one of them are left out (a citation-stripped view of its
    vectors without embedding it again, SPEC §12), unless every chunk holds one.

    Raises:
        FileNotFoundError: the version keeps no ``embeddings.npy`` or ``chunks.parquet``.
        ValueError: the vectors and the chunks table disagree in rows, or a vector is not finite (NaN, inf).
    """
    d = Path(version_dir)
    if not (d / "embeddings.npy").is_file():
        raise FileNotFoundError(f"{d}: no embeddings.npy (the version keeps no raw chunk vectors)")
    chunks = pd.read_parquet(d / "chunks.parquet", columns=["doc_id", "start"] + (["text"] if drop else []))
    vecs = np.load(d / "embeddings.npy", mmap_mode="r")
    if len(vecs) != len(chunks):
        raise ValueError(f"{d}: embeddings.npy has {len(vecs)} rows, chunks.parquet {len(chunks)}")
    chunks = chunks.assign(row=np.arange(len(chunks)))
    if doc_ids is not None:
        chunks = chunks[chunks["doc_id"].isin(set(doc_ids))]
    out = {}
    for doc, g in chunks.sort_values(["doc_id", "start", "row"]).groupby("doc_id", sort=False):
        rows = g["row"].to_numpy()
        names = [n for n in (drop or {}).get(str(doc), ()) if n]
        if names:
            keep = ~g["text"].map(lambda t: any(n in t for n in names)).to_numpy()
            rows = rows[keep] if keep.any() else rows
        rows = rows[:max_segments]
        out[str(doc)] = np.asarray(vecs[rows], dtype=np.float32)
        if not np.isfinite(out[str(doc)]).all():  # would score NaN and print invalid JSON
            raise ValueError(f"{d}: embeddings.npy holds a vector that is not finite (NaN or inf) for document "
                             f"{str(doc)[:80]!r}: rebuild the version")
    return out


class SegmentCache:
    """Embeds documents outside an index as segment matrices, cached by content (module docstring).

    ``encode``: passages -> float32 (n, hidden) L2-normalised (an encoder's ``encode_corpus``), loaded on first
    need by ``encoder_factory``; ``encoder_id``: its content id (the version's ``model_id``); ``root``: the
    cache folder (one ``<sha256>.npy`` per document). ``stats`` counts segments embedded / read and seconds.
    """

    def __init__(self, root: str | os.PathLike, encoder_id: str, encoder_factory: Callable[[], Callable],
                 cfg: ChunkConfig = ChunkConfig()):
        self.root, self.encoder_id, self.cfg = Path(root), encoder_id, cfg
        self._factory, self._encode = encoder_factory, None
        self.stats = {"embedded_segments": 0, "cached_segments": 0, "embed_seconds": 0.0}

    def key(self, text: str) -> str:
        """sha256 of (encoder id, chunk config, text): the cache file's name."""
        return json_sha256({"encoder": self.encoder_id, "chunks": asdict(self.cfg), "text": text})

    def matrices(self, texts: dict[str, str], max_segments: int) -> dict[str, np.ndarray]:
        """doc id -> float32 (min(max_segments, segments of the text), hidden) for every text of ``texts``;
        documents whose cached rows do not cover the request are embedded in one batch and cached.

        Raises:
            ValueError: ``max_segments`` < 1, or a text with no segment (empty after stripping).
        """
        if max_segments < 1:
            raise ValueError(f"max_segments must be >= 1, got {max_segments}")
        out, todo = {}, {}
        for doc, text in texts.items():
            segs = segments(text, self.cfg, max_segments)
            if not segs:
                raise ValueError(f"document {doc!r} has no text to segment")
            f = self.root / f"{self.key(text)}.npy"
            m = np.load(f) if f.is_file() else None
            if m is not None and len(m) >= len(segs):
                out[doc] = m[:len(segs)]
                self.stats["cached_segments"] += len(segs)
            else:  # segments are a prefix of the document's: embed only the rows the cache lacks
                have = m if m is not None else np.zeros((0, 0), dtype=np.float32)
                todo[doc] = (segs[len(have):], f, have)
                self.stats["cached_segments"] += len(have)
        out.update(self._embed(todo))
        return {doc: out[doc] for doc in texts}

    def _embed(self, todo: dict) -> dict[str, np.ndarray]:
        if not todo:
            return {}
        if self._encode is None:
            self._encode = self._factory()
        flat = [s for segs, _, _ in todo.values() for s in segs]
        t0 = time.perf_counter()
        vecs = np.asarray(self._encode(flat), dtype=np.float32)
        self.stats["embed_seconds"] += time.perf_counter() - t0
        self.stats["embedded_segments"] += len(flat)
        out, i = {}, 0
        self.root.mkdir(parents=True, exist_ok=True)
        for doc, (segs, f, have) in todo.items():
            new, i = vecs[i:i + len(segs)], i + len(segs)
            out[doc] = np.concatenate([have, new]) if len(have) else new
            with atomic_path(f) as tmp, open(tmp, "wb") as fh:
                np.save(fh, out[doc])
        return out


def encoder_cache(ckpt_dir: str | os.PathLike, root: str | os.PathLike, cfg: ChunkConfig = ChunkConfig(),
                  batch_size: int = 16, precision: str | None = None) -> SegmentCache:
    """A :class:`SegmentCache` over the encoder checkpoint ``ckpt_dir`` (id: :func:`retrieval.pinning.model_id`),
    loaded on CPU only when something must be embedded, with autocast ``precision`` (None: the encoder kind's
    default)."""
    from retrieval.encoders import Encoder
    from retrieval.pinning import model_id

    return SegmentCache(root, model_id(ckpt_dir),
                        lambda: Encoder.from_checkpoint(ckpt_dir, batch_size, "cpu",
                                                                precision=precision).encode_corpus, cfg)
