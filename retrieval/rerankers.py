"""Rerankers of the query pipeline (:class:`retrieval.pipeline.Reranker`; SPEC §7).

:class:`WindowBM25Reranker`: BM25 of the query over each candidate chunk's *window* (the chunk with
``window`` characters of its document on each side, from the index version's texts), fused with the search's
own order by weighted reciprocal-rank fusion (Cormack et al. 2009). A chunk cut just after the sentence that
names the question's subject is found by its neighbourhood. No learning: its settings are a small JSON part of
the index version (``reranker.json``: ``{"kind": "bm25-window", "window", "weight", "depth", "rrf_k"}``), so a
version pins how it reranks and a rollback restores it.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from typing import Callable, Mapping, Sequence

import numpy as np

from retrieval.hits import SearchHit
from retrieval.sparse import bm25_scores

RERANKER = "reranker"  # its part of an index version (retrieval.parts)
KINDS = ("bm25-window", "cross-encoder")


@dataclass(frozen=True)
class WindowBM25Reranker:
    """``texts``: doc_id → the document's text (the version's texts part); ``tokenize``: the segmenter of the
    version's BM25 side; ``window``: characters added on each side of a chunk (>= 0); ``weight``: the window
    BM25's share of the fused score (0..1; 0 keeps the search's order); ``depth``: candidates reranked;
    ``rrf_k``: the fusion's rank offset."""

    texts: Mapping[str, str]
    tokenize: Callable[[Sequence[str]], list[list[str]]]
    window: int = 200
    weight: float = 0.5
    depth: int = 20
    rrf_k: int = 60
    name: str = "bm25-window"

    def windows(self, hits: Sequence[SearchHit]) -> list[str]:
        """Each hit's chunk widened by ``window`` chars on each side within its document (the chunk alone when
        the document is not in ``texts``)."""
        out = []
        for h in hits:
            text = self.texts.get(h.doc_id)
            if text is None:
                out.append(h.text)
                continue
            out.append(text[max(0, int(h.start) - self.window):int(h.end) + self.window])
        return out

    def rerank(self, query: str, hits: Sequence[SearchHit]) -> list[SearchHit]:
        """``hits`` ordered by ``(1 − weight) / (rrf_k + search rank) + weight / (rrf_k + window-BM25 rank)``
        (ranks 1-based; ties keep the search's order), each a copy with ``rerank_score`` (that fused score) and
        ``rerank_features`` ``{"window_bm25": its window's BM25}``."""
        if not hits:
            return []
        toks = self.tokenize([query, *self.windows(hits)])
        counts = [Counter(t) for t in toks[1:]]
        bm = bm25_scores(toks[0], counts, np.array([len(t) for t in toks[1:]]))
        bm_rank = np.empty(len(hits), dtype=int)
        bm_rank[np.argsort(-bm, kind="stable")] = np.arange(1, len(hits) + 1)
        fused = [(1 - self.weight) / (self.rrf_k + i + 1) + self.weight / (self.rrf_k + int(bm_rank[i]))
                 for i in range(len(hits))]
        order = sorted(range(len(hits)), key=lambda i: -fused[i])
        return [replace(hits[i], rerank_score=float(fused[i]), rerank_features={"window_bm25": float(bm[i])})
                for i in order]


def reranker_from_json(text: str, texts: Mapping[str, str], tokenize, part_file=None, encoder=None,
                       encoder_id: str | None = None):
    """The reranker a version's ``reranker.json`` part describes: a :class:`WindowBM25Reranker`, or a
    cross-encoder (:func:`retrieval.cross_encoder.load_cross_encoder`: ``part_file``, the part's JSON in the
    version folder with its weights beside it, on the version's ``encoder`` whose id is ``encoder_id``).

    Raises:
        ValueError: an unknown ``kind``, a setting out of range (the message names it), a cross-encoder
            without its part file and encoder, or trained on another encoder.
    """
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"reranker part is not readable JSON ({str(exc)[:120]})") from None
    if not isinstance(d, dict) or d.get("kind") not in KINDS:
        raise ValueError(f"reranker part: kind must be one of {KINDS}")
    if d["kind"] == "cross-encoder":
        if part_file is None or encoder is None:
            raise ValueError("reranker part: a cross-encoder needs its part file and the version's encoder")
        from retrieval.cross_encoder import load_cross_encoder

        return load_cross_encoder(part_file, encoder, encoder_id)
    window, weight, depth, rrf_k = d.get("window", 200), d.get("weight", 0.5), d.get("depth", 20), d.get("rrf_k", 60)
    for name, v, ok in (("window", window, isinstance(window, int) and 0 <= window <= 100_000),
                        ("weight", weight, isinstance(weight, (int, float)) and 0 <= weight <= 1),
                        ("depth", depth, isinstance(depth, int) and 1 <= depth <= 1000),
                        ("rrf_k", rrf_k, isinstance(rrf_k, int) and 0 <= rrf_k <= 10_000)):
        if isinstance(v, bool) or not ok:
            raise ValueError(f"reranker part: {name} = {v!r} is out of range")
    return WindowBM25Reranker(texts, tokenize, window, float(weight), depth, rrf_k)
