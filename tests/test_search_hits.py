"""Search hits stay typed records from the search through the rerankers to the reader and become dicts only where
they are rendered (SPEC §7, §9): :class:`retrieval.hits.SearchHit` through a :class:`retrieval.pipeline.QueryPipeline`
with the real window-BM25 reranker, over chunks of the policy documents the test cuts itself."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import FrozenInstanceError, replace

import numpy as np
import pytest

from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.hits import SearchHit
from retrieval.pipeline import QueryPipeline
from retrieval.query import QueryLimits, check_query
from retrieval.rerankers import WindowBM25Reranker
from retrieval.sparse import bm25_scores, make_tokenizer
from tests.retrieval_builders import policy_docs

QUERY = "养老托育第7项要完善什么？"
RENDERED = ("score", "dense_score", "sparse_score", "dense_rank", "sparse_rank", "mode", "chunk_id", "doc_id",
            "start", "end", "text", "title", "source", "url", "external_id")


class _ChunkBM25:
    """A searcher (the :class:`retrieval.pipeline.Searcher` role) scoring every chunk by BM25
    (:func:`retrieval.sparse.bm25_scores`), its hits built from the chunk rows as the retriever builds them."""

    def __init__(self, chunks, tokenize):
        self.rows, self.tokenize, self.limits = chunks.to_dict("records"), tokenize, QueryLimits()
        toks = tokenize([r["text"] for r in self.rows])
        self.counts, self.lens = [Counter(t) for t in toks], np.array([len(t) for t in toks])

    def search(self, query, k, mode="hybrid", tokens=None):
        query = check_query(query, k, self.limits)
        bm = bm25_scores(tokens or self.tokenize([query])[0], self.counts, self.lens)
        top = np.argsort(-bm, kind="stable")[:k]
        return [SearchHit.of_chunk(self.rows[i], float(bm[i]), mode, sparse_score=float(bm[i]), sparse_rank=r)
                for r, i in enumerate(top, 1)]


@pytest.fixture(scope="module")
def parts():
    """(chunks with an ``external_id`` column, doc_id → text, tokenizer)."""
    docs = policy_docs()
    docs["external_id"] = [f"ext-{i}" for i in range(len(docs))]
    return build_chunks(docs, ChunkConfig(max_chars=120, overlap=30)), dict(zip(docs["doc_id"], docs["text"])), \
        make_tokenizer("auto")[0]


def test_hits_stay_search_hits_through_a_real_reranker_and_render_as_before(parts):
    chunks, texts, tokenize = parts
    searcher = _ChunkBM25(chunks, tokenize)
    reranker = WindowBM25Reranker(texts, tokenize, window=300, weight=1.0, depth=8)
    got = QueryPipeline(searcher, (reranker,)).search(QUERY, 5)
    base = {h.chunk_id: h for h in searcher.search(QUERY, 8)}
    assert len(got) == 5 and all(isinstance(h, SearchHit) for h in got)
    # weight 1: the window BM25's order; each hit is the search's own with only the reranker's fields set
    bm = [h.rerank_features["window_bm25"] for h in got]
    assert bm == sorted(bm, reverse=True) and bm[0] > 0 and all(h.rerank_score is not None for h in got)
    assert all(replace(h, rerank_score=None, rerank_features={}) == base[h.chunk_id] for h in got)
    assert all(base[h.chunk_id].rerank_score is None for h in got)
    with pytest.raises(FrozenInstanceError):
        got[0].score = 0.0

    # rendered: the keys, their order and values the search's dicts had (flows.search's fields among them)
    row = chunks[chunks["chunk_id"] == got[0].chunk_id].iloc[0].to_dict()
    h = got[0]
    old = {"score": h.score, "dense_score": None, "sparse_score": h.sparse_score, "dense_rank": None,
           "sparse_rank": h.sparse_rank, "mode": "hybrid", **row, "rerank_score": h.rerank_score,
           "window_bm25": bm[0]}
    assert list(h.to_dict().items()) == list(old.items())
    assert tuple(h.to_dict()) == (*RENDERED, "rerank_score", "window_bm25") and h.external_id == row["external_id"]
    assert json.loads(json.dumps(h.to_dict(), ensure_ascii=False)) == h.to_dict()
    from flows.search import FIELDS

    assert set(FIELDS) <= set(h.to_dict())


def test_baseline_modes_skip_the_reranker_and_render_without_its_keys(parts):
    chunks, texts, tokenize = parts
    pipe = QueryPipeline(_ChunkBM25(chunks, tokenize), (WindowBM25Reranker(texts, tokenize, depth=8),))
    hits = pipe.search(QUERY, 3, mode="sparse")
    assert [h.rerank_score for h in hits] == [None] * 3 and all(not h.rerank_features for h in hits)
    assert tuple(hits[0].to_dict()) == RENDERED and hits[0].to_dict()["mode"] == "sparse"


def test_a_chunk_row_without_offsets_is_refused_by_name():
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['start', 'end'\]"):
        SearchHit.of_chunk({"chunk_id": 1, "doc_id": "d", "text": "x"}, 1.0, "dense")
    hit = SearchHit.of_chunk({"chunk_id": 1, "doc_id": "d", "start": 0, "end": 1, "text": "x"}, 1.0, "dense")
    assert hit.title is None and hit.external_id is None and "external_id" not in hit.to_dict()
