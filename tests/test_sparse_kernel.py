"""retrieval.sparse.BM25Matrix, the sparse-matrix form of the BM25 kernel, scores exactly as
retrieval.sparse.bm25_scores (Robertson & Zaragoza 2009, Lucene IDF) over the same texts."""
from collections import Counter

import numpy as np
import pytest

from docmatch.baselines import bigrams
from retrieval.sparse import BM25Matrix, bm25_scores

TEXTS = [
    "第一条 为了合理开发、利用、节约和保护水资源，防治水害，实现水资源的可持续利用，制定本法。",
    "第二条 在中华人民共和国领域内开发、利用、节约、保护、管理水资源，防治水害，适用本法。",
    "第一条 为了加强档案管理，规范档案收集、整理工作，有效保护和利用档案，制定本法。",
    "",  # an empty text: counts as one token, matches nothing
    "第三条 水资源属于国家所有。水资源的所有权由国务院代表国家行使。农村集体经济组织的水塘中的水，归该农村集体经济组织使用。",
    "第五条 县级以上人民政府应当加强水利基础设施建设，并将其纳入本级国民经济和社会发展计划。",
]
QUERIES = [
    "根据《中华人民共和国水法》，结合本市实际，加强水资源管理和保护，制定本办法。",
    "档案管理工作由县级以上人民政府档案主管部门负责。",
    "",
    "量子计算",  # no bigram in the collection
]


def _kernel(q_tokens, texts, k1=1.5, b=0.75):
    toks = [bigrams(t) for t in texts]
    return bm25_scores(q_tokens, [Counter(t) for t in toks], np.array([len(t) for t in toks]), k1, b)


@pytest.mark.parametrize("k1,b", [(1.5, 0.75), (1.2, 0.3), (2.0, 1.0)])
def test_matrix_scores_as_the_per_query_kernel(k1, b):
    m = BM25Matrix([Counter(bigrams(t)) for t in TEXTS], k1, b)
    assert m.weights.shape == (len(TEXTS), len(m.vocab)) and m.idf.shape == (len(m.vocab),)
    assert m.weights[3].nnz == 0 and m.avg == pytest.approx(np.mean([max(len(bigrams(t)), 1) for t in TEXTS]))
    for q in QUERIES:
        got, want = m.scores(Counter(bigrams(q))), _kernel(bigrams(q), TEXTS, k1, b)
        assert got.dtype == np.float64 and got.shape == (len(TEXTS),)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    got = m.scores(Counter(bigrams(QUERIES[0])))
    assert got[3] == 0 and got[0] > got[2] > 0  # the water-law article beats the archives one
    assert not m.scores(Counter(bigrams(QUERIES[3]))).any() and not m.scores({}).any()
    # a token outside the vocabulary adds nothing next to indexed ones; the empty token is ignored
    q = Counter(bigrams(QUERIES[1]))
    np.testing.assert_array_equal(m.scores({**q, "量子": 3, "": 2}), m.scores(q))


def test_score_one_uses_the_collections_idf_and_average_length():
    counts = [Counter(bigrams(t)) for t in TEXTS]
    m = BM25Matrix(counts)
    q = Counter(bigrams(QUERIES[0]))
    full = m.scores(q)
    for i, c in enumerate(counts):
        assert m.score_one(q, c) == pytest.approx(full[i], rel=1e-12, abs=0)
    assert m.score_one(q, {}) == 0 and m.score_one({}, counts[0]) == 0 and m.score_one({"量子": 1}, {"量子": 4}) == 0
    # a replacement text of the same length holding the same tokens (one count moved from 水资 to 的水) leaves
    # the collection's IDF and average length unchanged: the kernel over the collection with it swapped in agrees
    moved = Counter(counts[4])
    assert moved["水资"] >= 2
    moved["水资"] -= 1
    moved["的水"] += 1
    assert "的水" in counts[4]
    swapped = [*TEXTS[:4], None, *TEXTS[5:]]
    toks = [bigrams(t) for t in TEXTS]
    kernel = bm25_scores(list(q.elements()), [moved if t is None else Counter(bigrams(t)) for t in swapped],
                         np.array([len(t) for t in toks]))
    assert m.score_one(q, moved) == pytest.approx(float(kernel[4]), rel=1e-6)
    assert m.score_one(q, moved) != pytest.approx(full[4], rel=1e-6)


def test_empty_collection_and_bad_counts():
    m = BM25Matrix([])
    assert m.scores({"水资": 1}).shape == (0,) and m.weights.shape == (0, 0)
    with pytest.raises(ValueError, match="non-negative"):
        BM25Matrix([{"水资": -1}])
