"""Term counts as the stored sparse side (SPEC §7): BM25 from counts equals bm25s's own index of the same
tokens, for every variant; a composed refresh equals counting the next corpus from scratch."""
from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest

from retrieval.sparse import SparseConfig, SparseIndex
from retrieval.term_counts import TermCounts, bm25_from_counts


def _corpus(n: int, seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(300)] + ["数据", "要素", "市场"]
    return [[rng.choice(words[: rng.randint(5, len(words))]) for _ in range(rng.randint(0, 40))] for _ in range(n)]


QUERIES = (["w1", "w7", "w100"], ["w3"], ["w250", "w2", "w2"], ["数据", "市场"], ["absent"])


@pytest.mark.parametrize("method", ["robertson", "lucene", "atire", "bm25l", "bm25+"])
def test_bm25_from_counts_equals_bm25s_index(method):
    toks = _corpus(400, 1)
    ref = bm25s.BM25(k1=1.2, b=0.7, method=method)
    ref.index([t if t else [""] for t in toks], show_progress=False)
    ours = bm25_from_counts(TermCounts.from_tokens(np.arange(400), toks), 1.2, 0.7, method)
    for q in QUERIES[:-1]:
        assert np.array_equal(ref.get_scores(q), ours.get_scores(q))  # bit for bit, not approximately
    assert sum(1 for t in toks if not t) > 0  # the corpus has empty chunks, indexed as the token ""


def test_composed_counts_score_like_a_fresh_count(tmp_path):
    toks = _corpus(300, 2)
    tc = TermCounts.from_tokens(np.arange(300) * 7, toks)
    tc.save(tmp_path)
    loaded = TermCounts.load(tmp_path)
    assert loaded.vocab == tc.vocab and (loaded.counts != tc.counts).nnz == 0
    # next corpus: chunks 0-9 removed, 20 edited (new ids), two added at the front, order shuffled
    rng = random.Random(3)
    keep = list(range(10, 300))
    nxt = [(i * 7, toks[i]) for i in keep]
    for j in range(20):
        cid, t = nxt[j]
        nxt[j] = (10_000 + j, t + ["新词", f"w{j}"])
    nxt = [(20_001, ["只在新块"]), (20_002, [])] + nxt
    rng.shuffle(nxt)
    ids = [c for c, _ in nxt]
    rows = [k for k, (c, _) in enumerate(nxt) if c >= 10_000]
    by_text = {" ".join(t): t for _, t in nxt}  # a "tokenizer" over space-joined token lists
    fresh = TermCounts.from_texts([ids[k] for k in rows], [" ".join(nxt[k][1]) for k in rows],
                                  lambda texts: [by_text[t] for t in texts], loaded.vocab, batch=5)
    composed = loaded.compose(ids, rows, fresh)
    scratch = TermCounts.from_tokens(ids, [t for _, t in nxt])
    assert len(rows) == 22 and sorted(composed.vocab) == sorted(scratch.vocab)  # unused columns dropped
    a = SparseIndex.from_counts(composed, SparseConfig())
    b = SparseIndex.from_counts(scratch, SparseConfig())
    for q in QUERIES + (["新词"], ["只在新块"]):
        assert np.array_equal(a.scores(q), b.scores(q))
    assert a.top(["只在新块"], 1)[0].tolist() == [ids.index(20_001)]
    with pytest.raises(KeyError, match="no counted tokens"):
        loaded.compose([123_456], [], TermCounts.from_tokens([], [], loaded.vocab))
    with pytest.raises(ValueError, match="extend this vocabulary"):
        loaded.compose(ids, rows, TermCounts.from_tokens(rows, [["x"]] * len(rows)))


def test_counting_in_batches_equals_counting_at_once():
    toks = _corpus(103, 5)
    texts = [" ".join(t) for t in toks]
    once = TermCounts.from_tokens(np.arange(103), toks)
    batched = TermCounts.from_texts(np.arange(103), texts, lambda b: [t.split() for t in b], batch=10)
    assert batched.vocab == once.vocab and (batched.counts != once.counts).nnz == 0
    assert TermCounts.from_texts(np.arange(0), [], lambda b: []).counts.shape == (0, 1)


def test_sparse_index_build_matches_counts_and_reloads(tmp_path):
    toks = _corpus(50, 4)
    sp = SparseIndex.build(toks)
    sp.save(tmp_path)
    back = SparseIndex.load(tmp_path)
    for q in QUERIES:
        assert np.array_equal(sp.scores(q), back.scores(q))
    assert not back.scores(["absent"]).any()
