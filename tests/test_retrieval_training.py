"""The retrieval-trained encoder (contrastive fine-tuning on pairs mined from the corpus, on the one engine)."""
import json

import numpy as np
import pytest

from retrieval.chunks import ChunkConfig
from retrieval.mining import mine_pairs
from retrieval.train import RetrievalTrainConfig, load_bi_encoder, mine_hard_negatives
from tests.retrieval_builders import policy_docs, save_tiny_bert, save_tiny_policybert, write_clean

CFG = RetrievalTrainConfig(steps=30, batch_size=8, lr=1e-3, dev_fraction=0.25, log_every=10, max_passage_len=64,
                           max_query_len=48, eval_every=10)


def test_mined_pairs_titles_and_ict_without_the_query_in_its_passage():
    pairs = mine_pairs(policy_docs(), CFG)
    assert set(pairs["kind"]) == {"title", "ict"}
    ict = pairs[pairs.kind == "ict"]
    assert len(ict) > 50 and not any(q in p for q, p in zip(ict["query"], ict["passage"]))
    assert pairs["passage"].str.len().max() <= CFG.max_passage_len - 2


def test_hard_negatives_skip_the_positive_document():
    rng = np.random.default_rng(0)
    p = rng.normal(size=(30, 8)).astype(np.float32)
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    docs = [f"d{i // 3}" for i in range(30)]
    hard = mine_hard_negatives(p, p, docs, n=2, depth=20, start=2, rng=rng)
    assert hard.shape == (30, 2) and (hard >= 0).all()
    assert all(docs[h] != docs[i] for i in range(30) for h in hard[i])


@pytest.mark.parametrize("kind", ["policybert", "bert"])
def test_retrieval_training_learns_and_the_index_serves_it(tmp_path, kind):
    from retrieval.encoders import Encoder
    from retrieval.pinning import model_id
    from retrieval.retrievers import Retriever
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_stage, retrieval_train_stage

    start = (save_tiny_policybert(tmp_path / "ft", seed=5) if kind == "policybert"
             else save_tiny_bert(tmp_path / "bge", seed=5))
    clean = write_clean(policy_docs(), tmp_path / "clean")
    out = tmp_path / "retrieval"
    logs = []
    # a random BERT's [CLS] state does not learn in 30 steps: the BERT case trains mean pooling (the default,
    # CLS as bge uses it, is checked on its own)
    cfg = CFG if kind == "policybert" else RetrievalTrainConfig(**{**CFG.__dict__, "pooling": "mean"})
    if kind == "bert":
        assert load_bi_encoder(start, CFG)[0].pooling == "cls"
    res = retrieval_train_stage(clean, start, out, cfg, segmenter="hanlp-dict", log=logs.append)
    metrics = json.loads((out / "metrics.json").read_text())
    for k in ("dev_before", "dev_bm25", "dev_after"):
        assert res[k]["queries"] == res["pairs"]["dev"] > 0
    assert res["pairs"]["test"] > 0 and res["best_step"] in [p["step"] for p in metrics["train"]["curve"]]
    # the trained encoder beats its start on held-out test pairs (other documents; never used to pick a checkpoint)
    assert res["test_after"]["mrr@10"] > res["test_before"]["mrr@10"] + 0.05
    losses = [float(line.split(" loss ")[1].split()[0]) for line in logs if line.startswith("retrieval-train step")]
    assert len(losses) == CFG.steps // CFG.log_every and losses[-1] < 0.9 * losses[0]  # InfoNCE falls
    info = json.loads((out / "retrieval.json").read_text())
    assert info["pooling"] == "mean"
    assert res["model_id"] == model_id(out) != model_id(start)
    enc = Encoder.from_checkpoint(out)
    v = enc.encode_corpus(["数据要素流通", "乡村振兴"])
    assert v.shape == (2, 32) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(v, Encoder.from_checkpoint(start).encode_corpus(["数据要素流通", "乡村振兴"]), atol=1e-4)
    tok = make_tokenizer("hanlp-dict")
    index_stage(clean, out, tmp_path / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tok)
    r = Retriever(tmp_path / "index", tokenizer=tok)
    assert r.manifest["retrieval"]["pooling"] == info["pooling"]
    assert r.search("养老服务体系", k=3)[0].doc_id == "d5"


class Kill(Exception):
    pass


def test_retrieval_training_resumes_to_the_same_weights(tmp_path):
    import torch

    from retrieval.train import state_dir_of, train_retrieval

    start = save_tiny_policybert(tmp_path / "ft", seed=8)
    pairs = mine_pairs(policy_docs(), CFG)
    cfg = RetrievalTrainConfig(**{**CFG.__dict__, "steps": 12, "save_every": 4, "eval_every": 4})
    train_retrieval(start, pairs, tmp_path / "straight", cfg, log=lambda s: None)

    def kill_at_7(step, total):
        if step == 7:
            raise Kill()

    with pytest.raises(Kill):
        train_retrieval(start, pairs, tmp_path / "resumed", cfg, log=lambda s: None, on_step=kill_at_7)
    assert json.loads((state_dir_of(tmp_path / "resumed") / "trainer_state" / "position.json").read_text())["step"] == 4
    m = train_retrieval(start, pairs, tmp_path / "resumed", cfg, log=lambda s: None)
    assert m["train"]["resumed_from"] == 4 and m["train"]["steps"] == 12 and not state_dir_of(tmp_path / "resumed").exists()
    from safetensors.torch import load_file

    a, b = (load_file(tmp_path / d / "model.safetensors") for d in ("straight", "resumed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
