"""The cross-encoder reranker (retrieval.cross_encoder) on a tiny e5-like BERT body the tests build, and its
training data (retrieval.rerank_data): reranking order and fields, the fp16 part round trip, the encoder
check, and no held-out question or document in the training groups."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.retrieval_builders import TOPICS, policy_docs, save_tiny_bert

QA = Path(__file__).resolve().parent.parent.parent / "shared" / "qa"


@dataclass(frozen=True)
class FrozenHit:
    doc_id: str
    start: int
    end: int
    text: str
    score: float
    title: str = ""
    rerank_score: float | None = None


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """(encoder checkpoint dir, loaded BertEncoder, its model id)."""
    import torch

    from retrieval.encoders import BertEncoder
    from retrieval.pinning import model_id

    torch.set_num_threads(1)
    d = save_tiny_bert(tmp_path_factory.mktemp("tiny-e5"), seed=0)
    return d, BertEncoder.from_checkpoint(d), model_id(d)


def _groups(n: int = 2):
    """The first ``n`` policy documents' topics → their document, the 7 other documents as negatives."""
    texts = policy_docs()["text"].tolist()
    return [(TOPICS[i][1], texts[i], [x for j, x in enumerate(texts) if j != i]) for i in range(n)]


@pytest.fixture(scope="module")
def trained(tiny):
    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, TrainConfig, train

    _, enc, mid = tiny
    ce = CrossEncoder.from_encoder(enc, mid, CrossEncoderConfig(layers=2, max_len=48, max_query=16, depth=6))
    emb = enc.model.embeddings.word_embeddings.weight.detach().clone()
    stats = train(ce, _groups(), TrainConfig(steps=30, batch=2, negatives=7, lr=3e-3, head_lr=3e-2, warmup=3),
                  log=lambda m: None)
    assert torch_equal(enc.model.embeddings.word_embeddings.weight, emb)  # token embeddings frozen, shared
    return ce, stats


def torch_equal(a, b) -> bool:
    return bool((a.detach() == b).all())


def test_training_learns_the_pairs_and_reranking_orders_by_score(trained):
    ce, stats = trained
    assert stats["steps"] == 30 and stats["loss_last"] < 0.2 * stats["loss_first"]  # it fits its two queries
    docs = policy_docs()
    assert [int(np.argmax(ce.score(q, docs["text"].tolist()))) for q, _, _ in _groups()] == [0, 1]
    hits = [{"doc_id": d, "start": 0, "end": len(t), "text": t, "score": 1.0 - 0.1 * i, "title": f"t{i}"}
            for i, (d, t) in enumerate(zip(docs["doc_id"], docs["text"]))]
    q = TOPICS[1][1]
    out = ce.rerank(q, hits)
    s = ce.score(q, [h["text"] for h in hits[:6]])
    assert [h["doc_id"] for h in out[:6]] == [hits[i]["doc_id"] for i in np.argsort(-s, kind="stable")]
    assert out[0]["doc_id"] == "d1" and out[6:] == hits[6:]  # past depth 6: unchanged, search order
    assert [h["rerank_score"] for h in out[:6]] == sorted(s.tolist(), reverse=True)
    assert [h["doc_id"] for h in ce.reorder(hits[:6], s, weight=0.0)] == [h["doc_id"] for h in hits[:6]]
    half = [h["doc_id"] for h in ce.reorder(hits[:6], s, weight=0.5)]  # RRF of the two orders
    fused = {h["doc_id"]: 0.5 / (60 + i + 1) + 0.5 / (60 + 1 + [x["doc_id"] for x in out].index(h["doc_id"]))
             for i, h in enumerate(hits[:6])}
    assert half == sorted(fused, key=lambda d: -fused[d])
    by_id = {h["doc_id"]: h for h in hits}
    assert all({k: v for k, v in h.items() if k != "rerank_score"} == by_id[h["doc_id"]] for h in out)
    frozen = [FrozenHit(h["doc_id"], 0, h["end"], h["text"], h["score"], h["title"]) for h in hits]
    fout = ce.rerank(q, frozen)
    assert [h.doc_id for h in fout] == [h["doc_id"] for h in out] and fout[0].title == "t1"
    assert fout[0].rerank_score == out[0]["rerank_score"] and frozen[1].rerank_score is None


def test_saved_part_scores_identically_and_refuses_another_encoder(trained, tiny, tmp_path):
    from retrieval.cross_encoder import CrossEncoderMismatchError, CrossEncoderPartError, load_cross_encoder
    from retrieval.encoders import BertEncoder
    from retrieval.pinning import model_id

    ce, _ = trained
    enc_dir, enc, mid = tiny
    cfg = ce.save(tmp_path / "part")
    doc = json.loads(cfg.read_text(encoding="utf-8"))
    assert doc["kind"] == "cross-encoder" and doc["encoder_model_id"] == mid and doc["layers"] == 2
    from safetensors.torch import load_file

    stored = load_file(str(tmp_path / "part" / doc["weights"]["file"]))
    assert all(v.dtype.is_floating_point and v.element_size() == 2 for v in stored.values())
    assert not any("word_embeddings" in k for k in stored) and "head.weight" in stored
    texts = policy_docs()["text"].tolist()
    q = "乡村振兴的意见"
    for loaded in (load_cross_encoder(tmp_path / "part", enc, mid), load_cross_encoder(cfg, enc_dir)):
        assert np.array_equal(loaded.score(q, texts), ce.score(q, texts))
    other = save_tiny_bert(tmp_path / "other", seed=1)
    with pytest.raises(CrossEncoderMismatchError, match=model_id(other)):
        load_cross_encoder(cfg, BertEncoder.from_checkpoint(other), model_id(other))
    w = tmp_path / "part" / doc["weights"]["file"]
    w.write_bytes(w.read_bytes()[:-2] + b"\x00\x00")
    with pytest.raises(CrossEncoderPartError, match="changed since"):
        load_cross_encoder(cfg, enc, mid)


def test_settings_out_of_range_are_named():
    from retrieval.cross_encoder import CrossEncoderConfig, CrossEncoderPartError

    with pytest.raises(CrossEncoderPartError, match="max_len"):
        CrossEncoderConfig(max_len=4)
    with pytest.raises(CrossEncoderPartError, match="pooling"):
        CrossEncoderConfig(pooling="max")
    with pytest.raises(CrossEncoderPartError, match="weight"):
        CrossEncoderConfig(weight=1.5)


def test_lecoqa_split_keeps_gold_sets_and_texts_on_one_side():
    from retrieval.rerank_data import lecoqa_split

    path = QA / "lecoqa_train.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    q = pd.read_json(path, lines=True, dtype={"qid": str})
    split = lecoqa_split(q, 0.2, 13)
    assert split.equals(lecoqa_split(q, 0.2, 13)) and 0.15 < (split == "test").mean() < 0.3
    key = q["gold_article_ids"].map(lambda g: tuple(sorted(g)))
    assert not set(key[split == "train"]) & set(key[split == "test"])
    assert not set(q.loc[split == "train", "question"]) & set(q.loc[split == "test", "question"])


def test_lecoqa_dev_split_moves_training_questions_only_and_keeps_gold_sets_apart():
    from retrieval.rerank_data import lecoqa_dev_split, lecoqa_split

    path = QA / "lecoqa_train.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    q = pd.read_json(path, lines=True, dtype={"qid": str})
    q = q.assign(split=lecoqa_split(q, 0.2, 13))
    dev = lecoqa_dev_split(q, 0.2)
    assert (dev[q["split"] == "test"] == "test").all()  # the test split is left as it was
    moved = dev[q["split"] == "train"]
    assert set(moved) == {"train", "dev"} and 0.12 < (moved == "dev").mean() < 0.3
    key = q["gold_article_ids"].map(lambda g: tuple(sorted(g)))
    assert not set(key[dev == "train"]) & set(key[dev == "dev"])
    assert not set(q.loc[dev == "train", "question"]) & set(q.loc[dev == "dev", "question"])
    with pytest.raises(ValueError, match="test_share"):
        lecoqa_dev_split(q, 1.0)


def test_training_groups_never_hold_a_held_out_question_or_document():
    from retrieval.rerank_data import LeakError, check_no_leak, ncpqa_groups

    docs = policy_docs()
    chunks = pd.DataFrame([(d, a, a + 100, t[a:a + 100]) for d, t in zip(docs["doc_id"], docs["text"])
                           for a in range(0, len(t), 100)], columns=["doc_id", "start", "end", "text"])
    q = pd.DataFrame({"qid": ["q0", "q1", "q2"],
                      "question": ["数据要素流通如何推进？", "营商环境怎么优化？", "养老服务如何发展？"],
                      "answer": ["数据要素流通", "营商环境", "养老服务"], "doc_id": ["d0", "d2", "d5"],
                      "gold_start": [3, 3, 3], "gold_end": [9, 7, 7], "split": ["train", "train", "test"]})
    every = lambda query, k: [r._asdict() for r in chunks.itertuples(index=False)][:k]  # noqa: E731
    held_docs = set(q.loc[q["split"] == "test", "doc_id"])
    g = ncpqa_groups(q[q["split"] == "train"], chunks, every, held_docs, depth=1000, max_negatives=1000)
    assert list(g["qid"]) == ["q0", "q1"] and g["positive"][0].startswith("为推进数据要素")
    held_texts = set(chunks.loc[chunks["doc_id"] == "d5", "text"])
    assert not any(held_texts & set(n) for n in g["negatives"])  # no held-out document, even as a negative
    assert all(ans not in n for ans, negs in zip(["数据要素流通", "营商环境"], g["negatives"]) for n in negs)
    held = q[q["split"] == "test"]
    check_no_leak(g, held, held_docs)
    for leak in (ncpqa_groups(q, chunks, every), g.assign(qid=["q2", "q1"]),
                 g.assign(query=["养老服务如何发展？", "x"])):
        with pytest.raises(LeakError):
            check_no_leak(leak, held, held_docs)


def test_a_trained_cross_encoder_is_the_pinned_reranker_of_a_version(tmp_path, tiny, trained):
    """The rerank slot (SPEC §7): the part (JSON + fp16 weights beside it) is installed into the version at
    publication, the version's query pipeline reranks with it (typed hits, rerank_score = its score), a part
    trained on another encoder is refused at publication, and changed weights are refused at load."""
    from retrieval.bundle import load_bundle
    from retrieval.chunks import ChunkConfig
    from retrieval.cross_encoder import CrossEncoder
    from retrieval.hits import SearchHit
    from retrieval.stages import index_stage
    from tests.retrieval_builders import write_clean

    ckpt, _, _ = tiny
    ce, _ = trained
    part = ce.save(tmp_path / "part")
    clean = write_clean(policy_docs(), tmp_path / "data" / "documents_clean")
    res = index_stage(clean, ckpt, tmp_path / "data" / "index", ChunkConfig(120, 30), sparse=None, reranker=part)
    rec = res["serving_parts"]["reranker"]
    assert rec["file"] == "reranker.json" and set(rec["files"]) == {"reranker.safetensors"}
    b = load_bundle(tmp_path / "data" / "index")
    (rr,) = b.pipeline.rerankers
    assert isinstance(rr, CrossEncoder)
    q = TOPICS[1][1]
    hits = b.pipeline.search(q, 5, mode="hybrid")
    assert all(isinstance(h, SearchHit) for h in hits)
    s = rr.score(q, [h.text for h in hits])
    assert np.allclose(sorted(s.tolist(), reverse=True), [h.rerank_score for h in hits], atol=1e-6)
    other = save_tiny_bert(tmp_path / "other", seed=5)  # another encoder: the part is refused at publication
    res2 = index_stage(clean, other, tmp_path / "data" / "index", ChunkConfig(120, 30), sparse=None, reranker=part)
    assert "another encoder_model_id" in res2["serving_parts"]["reranker"]["refused"]
    vdir = tmp_path / "data" / "index" / res["version"]
    w = (vdir / "reranker.safetensors").read_bytes()
    (vdir / "reranker.safetensors").write_bytes(w[:-2] + bytes([w[-2] ^ 1, w[-1]]))
    with pytest.raises(ValueError, match="changed since"):
        load_bundle(tmp_path / "data" / "index", version=res["version"]).pipeline


def test_a_part_cannot_name_a_weights_file_that_is_not_its_own(tmp_path):
    """A JSON part's weights file is a plain ``<name>.safetensors`` beside it and never replaces a file of the
    version (its index, chunks, texts, manifest or another part's weights)."""
    from retrieval.parts import PartError, PartSource, install_part

    vdir = tmp_path / "v1"
    vdir.mkdir()
    (vdir / "index.faiss").write_bytes(b"FAISS")
    (vdir / "taken.safetensors").write_bytes(b"other part")
    src = tmp_path / "src"
    src.mkdir()
    for name in ("index.faiss", "../x.safetensors", "manifest.json", "taken.safetensors"):
        (src / "index.faiss").write_bytes(b"EVIL")
        (src / "taken.safetensors").write_bytes(b"EVIL")
        (src / "r.json").write_text(json.dumps({"kind": "cross-encoder", "weights": {"file": name}}))
        with pytest.raises(PartError):
            install_part(vdir, PartSource("reranker", "reranker.json", str(src / "r.json"), requires=()), {})
    assert (vdir / "index.faiss").read_bytes() == b"FAISS" and (vdir / "taken.safetensors").read_bytes() == b"other part"


def test_body_starts_from_a_policybert_checkpoints_char_layers(tiny, tmp_path):
    """``init`` = a fine-tuned PolicyBERT folder (SPEC §6): the cross-encoder's body takes its character/piece
    stream (layers, position/type embeddings), keeps the encoder's shared token embeddings, ignores the word side
    and the classifier, and differs from a plain-e5 start."""
    import torch
    from safetensors.torch import load_file

    from model import PolicyBertConfig, PolicyBertForSequenceClassification
    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig

    _, enc, mid = tiny
    e = enc.model.config
    torch.manual_seed(5)
    cfg = PolicyBertConfig(vocab_size=e.vocab_size, hidden_size=e.hidden_size, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=e.intermediate_size,
                           max_position_embeddings=e.max_position_embeddings, num_word_layers=1, word_vocab_size=12,
                           max_words=8, fusion="gate", num_labels=2)
    PolicyBertForSequenceClassification(cfg).save_pretrained(tmp_path / "pb")
    state = load_file(str(tmp_path / "pb" / "model.safetensors"))
    assert any(k.startswith("bert.encoder.word_layers.") for k in state)
    ce = CrossEncoder.from_encoder(enc, mid, CrossEncoderConfig(layers=2, max_len=48, max_query=16),
                                   init=tmp_path / "pb")
    plain = CrossEncoder.from_encoder(enc, mid, CrossEncoderConfig(layers=2, max_len=48, max_query=16))
    body = ce.module.body.state_dict()
    for name in ("encoder.layer.1.attention.self.query.weight", "encoder.layer.0.output.dense.bias",
                 "embeddings.position_embeddings.weight", "embeddings.LayerNorm.weight"):
        assert torch.equal(body[name], state["bert." + name].float()), name
        if name.endswith("s.weight") or "query" in name:  # random matrices (biases and LayerNorms start alike)
            assert not torch.equal(body[name], plain.module.body.state_dict()[name]), name
    assert ce.module.body.embeddings.word_embeddings is enc.model.embeddings.word_embeddings
    assert not any("word_layers" in k or "fusion" in k for k in body)
    texts = policy_docs()["text"].tolist()
    assert not np.allclose(ce.score("乡村振兴", texts), plain.score("乡村振兴", texts))


def test_bf16_training_and_scoring_follow_float32(tiny, tmp_path):
    """precision=bf16 (autocast; weights and optimiser float32) learns the same pairs, its scores stay within
    bf16 rounding of the float32 forward of the same weights, and the part keeps the setting."""
    import dataclasses

    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, TrainConfig, load_cross_encoder, train

    _, enc, mid = tiny
    ce = CrossEncoder.from_encoder(enc, mid, CrossEncoderConfig(layers=2, max_len=48, max_query=16, depth=6,
                                                                precision="bf16"))
    stats = train(ce, _groups(), TrainConfig(steps=30, batch=2, negatives=7, lr=3e-3, head_lr=3e-2, warmup=3,
                                             precision="bf16"), log=lambda m: None)
    assert stats["loss_last"] < 0.3 * stats["loss_first"]
    texts = policy_docs()["text"].tolist()
    assert [int(np.argmax(ce.score(q, texts))) for q, _, _ in _groups()] == [0, 1]
    s16 = ce.score(TOPICS[0][1], texts)
    ce32 = CrossEncoder(ce.module, ce.tokenizer, dataclasses.replace(ce.config, precision="fp32"), mid)
    s32 = ce32.score(TOPICS[0][1], texts)
    assert np.abs(s16 - s32).max() <= 0.05 * (np.abs(s32).max() + 1) and not np.array_equal(s16, s32)
    loaded = load_cross_encoder(ce.save(tmp_path / "p16"), enc, mid)
    assert loaded.config.precision == "bf16" and np.array_equal(loaded.score(TOPICS[0][1], texts),
                                                                ce.score(TOPICS[0][1], texts))
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp8")


def test_groups_in_one_forward_train_as_one_group_a_forward(tiny):
    """groups_per_forward pads several groups into one forward (a GPU's batch): the same loss and weights as one
    forward per group, within float32 rounding of the padding (dropout off: its masks follow the batch's shape)."""
    import torch

    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, TrainConfig, train

    _, enc, mid = tiny
    cfg = CrossEncoderConfig(layers=2, max_len=48, max_query=16, depth=6)
    out = []
    for gpf in (1, 2):
        ce = CrossEncoder.from_encoder(enc, mid, cfg)
        for m in ce.module.modules():
            if isinstance(m, torch.nn.Dropout):
                m.p = 0.0
        stats = train(ce, _groups(), TrainConfig(steps=3, batch=2, negatives=7, lr=3e-3, head_lr=3e-2, warmup=1,
                                                 groups_per_forward=gpf), log=lambda m: None)
        out.append((stats["loss_last"], ce.score(TOPICS[0][1], policy_docs()["text"].tolist())))
    # the head's bias is free under the listwise loss (a shift of every score), so Adam moves it on rounding noise
    a, b = out[0][1] - out[0][1].mean(), out[1][1] - out[1][1].mean()
    assert abs(out[0][0] - out[1][0]) < 1e-4 and np.allclose(a, b, atol=1e-4)
    assert out[0][0] != pytest.approx(2.0794, abs=1e-3)  # it trained (chance is ln 8)
    with pytest.raises(ValueError, match="groups_per_forward"):
        TrainConfig(groups_per_forward=0)


def test_training_is_seeded_and_ends_at_its_wall_clock_budget(tiny):
    """Training runs on the engine (model.training.train): the same seed gives the same losses and weights (group
    order, negatives and dropout seeded); max_seconds ends it after the step that spends the budget
    (model.training.TimeBudget); the examples cycle the groups, ``batch`` a step, each with its positive first."""
    import dataclasses

    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, StepGroups, TrainConfig, train

    _, enc, mid = tiny
    cfg = CrossEncoderConfig(layers=2, max_len=48, max_query=16, depth=6)
    tcfg = TrainConfig(steps=4, batch=2, negatives=3, lr=3e-3, head_lr=3e-2, warmup=1)
    texts, runs = policy_docs()["text"].tolist(), []
    for _ in range(2):
        ce = CrossEncoder.from_encoder(enc, mid, cfg)
        runs.append((train(ce, _groups(3), tcfg, log=lambda m: None), ce.score(TOPICS[0][1], texts)))
    assert runs[0][0]["steps"] == 4 and runs[0][0]["loss_first"] == runs[1][0]["loss_first"]
    assert np.array_equal(runs[0][1], runs[1][1]) and not ce.module.training
    stats = train(CrossEncoder.from_encoder(enc, mid, cfg), _groups(3), dataclasses.replace(tcfg, max_seconds=1e-9),
                  log=lambda m: None)
    assert stats["steps"] == 1
    groups = _groups(3)
    for shuffle in (True, False):
        data = StepGroups(groups, steps=4, batch=2, negatives=3, seed=5, shuffle=shuffle)
        queries = [data[i][0] for i in range(len(data))]
        assert len(data) == 8 and queries == queries[:3] * 2 + queries[:2]
        assert sorted(queries[:3]) == sorted(g[0] for g in groups)
        assert all(len(ps) == 4 and ps[0] == groups[[g[0] for g in groups].index(q)][1] for q, ps in
                   (data[i] for i in range(8)))
    assert queries[:3] == [g[0] for g in groups]  # shuffle=False: as given


def test_hybrid_negatives_fuse_the_dense_and_bm25_rankings(tiny):
    """retrieval.rerank_data.hybrid_search_rows: reciprocal-rank fusion of the encoder's exact dense top k and
    BM25's; with the dense ranking as the second list it is the dense ranking itself."""
    from retrieval.rerank_data import hybrid_search_rows
    from retrieval.sparse import SparseIndex

    _, enc, mid = tiny
    texts = policy_docs()["text"].tolist()
    queries = [t[1] for t in TOPICS[:3]]
    dense = np.argsort(-(enc.encode_queries(queries) @ enc.encode_corpus(texts).T), axis=1, kind="stable")
    same = hybrid_search_rows(texts, enc, mid, lambda qs, k: [d[:k].tolist() for d in dense])
    assert same(queries, 4) == [d[:4].tolist() for d in dense]
    sp = SparseIndex.build([list(t) for t in texts])
    bm25 = [sp.top(list(q), 4)[0].tolist() for q in queries]
    fused = hybrid_search_rows(texts, enc, mid, lambda qs, k: [sp.top(list(q), k)[0].tolist() for q in qs])(queries, 4)
    for f, d, b in zip(fused, dense, bm25):
        assert len(f) == 4 and set(f) <= set(d[:4].tolist()) | set(b)
        if d[0] == b[0]:
            assert f[0] == b[0]
    assert any(f != d[:4].tolist() for f, d in zip(fused, dense))  # BM25 moved something
    search = lambda qs, k: [sp.top(list(q), k)[0].tolist() for q in qs]  # noqa: E731
    five = hybrid_search_rows(texts, enc, mid, search)(queries, 5)
    assert hybrid_search_rows(texts, enc, mid, search, skip=1)(queries, 4) == [f[1:] for f in five]  # top left out
