"""Query-side fine-tuning against a fixed pool (retrieval.query_tuning) and the convex score fusion
(retrieval.fusion), on tiny encoders and a policy-like corpus the tests build."""
import json

import numpy as np
import pandas as pd
import pytest
import torch

from tests.retrieval_builders import TOPICS, policy_docs, save_tiny_bert


def _questions():
    """Three questions per topic document (one per detail), gold = that document."""
    rows = []
    for i, (_, topic, detail) in enumerate(TOPICS):
        for j, part in enumerate(detail.split("、")):
            rows.append({"query": f"{part}应该怎么做？", "gold": [f"d{i}"], "key": f"{i}-{j}"})
    return pd.DataFrame(rows)


def _pool(enc):
    docs = policy_docs()
    texts = [t[a:a + 120] for t in docs["text"] for a in range(0, len(t), 120)]
    row_docs = [d for d, t in zip(docs["doc_id"], docs["text"]) for _ in range(0, len(t), 120)]
    return enc.encode_corpus(texts), row_docs


def test_tower_loss_is_the_multi_positive_softmax_over_the_pool(tmp_path):
    from retrieval.query_tuning import QueryTower, load_query_encoder

    model, batcher, info = load_query_encoder(save_tiny_bert(tmp_path / "bert", seed=3))
    rng = np.random.default_rng(0)
    passages = rng.normal(size=(7, 32)).astype(np.float32)
    passages /= np.linalg.norm(passages, axis=1, keepdims=True)
    tower = QueryTower(model, passages, info.pooling, tau=0.1).eval()
    inputs = batcher(["数据要素", "市场准入规则"], 16)
    gold = torch.tensor([[2, 5], [0, -1]])
    out = tower(gold=gold, **inputs)
    q = tower.embed(inputs).detach().numpy()
    s = q @ passages.T / 0.1
    lse = lambda x: np.log(np.exp(x - x.max()).sum()) + x.max()  # noqa: E731
    expect = np.mean([lse(s[0]) - lse(s[0, [2, 5]]), lse(s[1]) - lse(s[1, [0]])])
    assert out.loss.item() == pytest.approx(expect, rel=1e-5)
    assert "passages" not in tower.state_dict()  # the pool is not part of the checkpoint


def test_tuned_query_encoder_learns_and_reloads_as_it_trained(tmp_path):
    from retrieval.encoders import Encoder
    from retrieval.metrics import doc_metrics
    from retrieval.query_tuning import (TUNING_FILE, QueryTower, QueryTuneConfig, embed_queries, load_query_encoder,
                                        ranked_docs, tune_queries)

    ckpt = save_tiny_bert(tmp_path / "bert", seed=5)
    start = Encoder.from_checkpoint(ckpt)
    passages, row_docs = _pool(start)
    q = _questions()
    before = doc_metrics(ranked_docs(start.encode_queries(q["query"].tolist()), passages, row_docs), q["gold"].tolist())
    cfg = QueryTuneConfig(steps=80, batch_size=8, lr=3e-3, tau=0.05, eval_every=20, train_embeddings=True, device="cpu")
    m = tune_queries(ckpt, passages, row_docs, q, q.iloc[::4], tmp_path / "tuned", cfg, passage_model="pool-v1",
                     log=lambda s: None)
    tuned = Encoder.from_checkpoint(tmp_path / "tuned")
    qv = tuned.encode_queries(q["query"].tolist())
    after = doc_metrics(ranked_docs(qv, passages, row_docs), q["gold"].tolist())
    assert after["mrr@10"] >= before["mrr@10"] + 0.2, (before, after)
    # the served encoder embeds queries as the training tower did (tokenizer batch vs the encoder's windows)
    model, batcher, info = load_query_encoder(tmp_path / "tuned")
    tower = QueryTower(model, passages, info.pooling, cfg.tau)
    assert np.allclose(embed_queries(tower, batcher, q["query"].tolist(), info.query_instruction, 64), qv, atol=1e-5)
    meta = json.loads((tmp_path / "tuned" / TUNING_FILE).read_text())
    assert meta["passage_model"] == "pool-v1" and meta["train_questions"] == len(q) and meta["best"]["step"] > 0
    assert (tmp_path / "tuned" / "vocab.txt").is_file()


def test_tuning_needs_gold_in_the_pool_and_matching_width(tmp_path):
    from retrieval.query_tuning import tune_queries

    ckpt = save_tiny_bert(tmp_path / "bert")
    q = pd.DataFrame({"query": ["数据要素"], "gold": [["nowhere"]]})
    with pytest.raises(ValueError, match="no training question"):
        tune_queries(ckpt, np.eye(2, 32, dtype=np.float32), ["a", "b"], q, None, tmp_path / "o")
    with pytest.raises(ValueError, match="width 16"):
        tune_queries(ckpt, np.eye(2, 16, dtype=np.float32), ["a", "b"], q, None, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_tuning_folds_never_report_what_they_trained_on():
    from retrieval.query_tuning import tuning_folds

    keys = [f"q{i % 40}" for i in range(100)]  # repeated questions share a key
    folds = tuning_folds(keys, keys, folds=5, dev_share=0.2, seed=1)
    assert len(folds) == 5
    assert sorted(i for f in folds for i in f.test) == list(range(100))  # every question reported once
    for f in folds:
        test_keys = {keys[i] for i in f.test}
        assert not test_keys & {keys[i] for i in f.train + f.dev}
        assert f.train and f.dev and not set(f.train) & set(f.dev)
    other = tuning_folds(["x1", "x2"], keys, folds=5)  # disjoint sets: one fold, all reported
    assert len(other) == 1 and other[0].test == [0, 1] and len(other[0].train) + len(other[0].dev) == 100
    with pytest.raises(ValueError, match="folds >= 2"):
        tuning_folds(keys, keys, folds=1)


def test_convex_fusion_keeps_score_gaps():
    from retrieval.fusion import FusionConfig, fit_fusion, fuse, fuse_convex

    # row 1: dense rank 1, BM25 rank 3; row 4: dense rank 4, BM25 rank 1 far ahead of its runner-up
    dense, d_sc = list(range(1, 11)), [0.80 - 0.01 * i for i in range(10)]
    sparse, s_sc = [4, 11, 1, 12, 13, 14, 15, 16, 17, 18], [30.0, 5, 4.5, 4, 3.5, 3, 2.5, 2, 1.5, 1]
    z = fuse_convex(dense, d_sc, sparse, s_sc, 0.5)
    assert z[0][0] == 4 and fuse(dense, sparse, 0.5)[0][0] == 1  # RRF sees ranks only
    assert [r for r, *_ in fuse_convex(dense, d_sc, sparse, s_sc, 1.0)][:10] == dense
    assert [r for r, *_ in fuse_convex(dense, d_sc, sparse, s_sc, 0.0)][:10] == sparse
    row11 = next(t for t in z if t[0] == 11)
    assert row11[2] is None and row11[3] == 2  # ranks explained, a missing side is None
    assert fuse_convex([5], [0.3], [], [], 0.5)[0][0] == 5  # one empty side
    docs = {r: f"doc{r}" for r in range(1, 19)}
    with pytest.raises(ValueError, match="scores"):
        fit_fusion([dense], [sparse], docs, ["doc4"], FusionConfig(method="convex"))
    fit = fit_fusion([dense], [sparse], docs, ["doc4"], FusionConfig(method="convex"), [d_sc], [s_sc])
    assert fit["method"] == "convex" and fit["hybrid"]["recall@1"] == 1.0
    with pytest.raises(ValueError, match="method"):
        FusionConfig(method="max")
