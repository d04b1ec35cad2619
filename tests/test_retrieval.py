import os

import numpy as np
import pandas as pd
import pytest

from retrieval.chunks import ChunkConfig, build_chunks, chunk_id, chunk_text
from retrieval.dense import build_flat_index
from retrieval.retrievers import search
from retrieval.versions import current_version, load_version, publish_version


def test_chunks_bounded_overlapping_at_sentence_ends():
    sentences = [f"第{i}条规定的内容是关于数据要素市场建设的若干具体要求。" for i in range(60)]
    text = "".join(sentences)
    spans = chunk_text(text, ChunkConfig(max_chars=200, overlap=60))
    assert spans[0][0] == 0 and spans[-1][1] == len(text)
    for (s, e), (s2, e2) in zip(spans, spans[1:]):
        assert e - s <= 200 and text[e - 1] == "。"
        assert 0 < e - s2 <= 60  # overlap with the previous chunk, never more than 60 chars
        assert s2 > s
    covered = set()
    for s, e in spans:
        covered.update(range(s, e))
    assert covered == set(range(len(text)))


def test_long_sentence_is_cut():
    spans = chunk_text("字" * 1700, ChunkConfig(max_chars=750, overlap=150))
    assert all(e - s <= 750 for s, e in spans) and spans[-1][1] == 1700


def test_chunk_ids_stable_int64():
    a = chunk_id("d1", "文本")
    assert a == chunk_id("d1", "文本") and a != chunk_id("d2", "文本") and 0 <= a < 2**63
    docs = pd.DataFrame({"doc_id": ["d1"], "text": ["一句话。" * 10], "title": ["t"], "source": ["s"], "url": [None]})
    ch = build_chunks(docs)
    assert ch["chunk_id"].dtype == np.int64 and ch["start"].tolist() == [0]


def test_publish_search_and_switch(tmp_path):
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(5, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = np.array([11, 22, 33, 44, 55], dtype=np.int64)
    chunks = pd.DataFrame({"chunk_id": ids, "doc_id": list("abcde"), "start": [0] * 5, "end": [1] * 5,
                           "text": list("vwxyz")})
    assert current_version(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        load_version(tmp_path)
    assert publish_version(tmp_path, build_flat_index(vecs, ids), chunks, {"model_id": "m1"}, vecs) == "v1"
    assert publish_version(tmp_path, build_flat_index(vecs[:2], ids[:2]), chunks[:2], {"model_id": "m2"}) == "v2"
    index, ch, manifest = load_version(tmp_path)
    assert manifest["version"] == "v2" and index.ntotal == 2 and (tmp_path / "v1" / "index.faiss").is_file()
    (tmp_path / "CURRENT").write_text("v1")  # rollback = switch the pointer back
    index, ch, _ = load_version(tmp_path)
    hits = search(index, ch, vecs[3:4], k=3)[0]
    assert hits[0].chunk_id == 44 and hits[0].doc_id == "d" and hits[0].score == pytest.approx(1.0, abs=1e-5)
    assert hits[0].dense_score == hits[0].score and hits[0].dense_rank == 1 and hits[0].mode == "dense"
    assert all(h.score >= 0.5 for h in search(index, ch, vecs[3:4], k=5, min_score=0.5)[0])
    with pytest.raises(ValueError, match=r"lacks column\(s\) \['start', 'end'\]"):
        search(index, ch.drop(columns=["start", "end"]), vecs[3:4], k=1)


# -- incremental refresh with a real (tiny, randomly initialised) PolicyBERT encoder ------------------

@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    import torch

    from model import PolicyBertConfig, PolicyBertModel
    from model.features import CharEncoder, WordMatcher, build_char_vocab, save_char_tokenizer
    from retrieval.encoders import Encoder

    texts = [DOC_A, DOC_B, DOC_C, "数据要素市场化配置改革"]
    tok = save_char_tokenizer(build_char_vocab(texts), tmp_path_factory.mktemp("tok"))
    enc = CharEncoder(tok.get_vocab())
    matcher = WordMatcher(["数据", "要素", "市场", "制度", "平台"])
    torch.manual_seed(0)
    cfg = PolicyBertConfig(vocab_size=enc.size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=128, num_word_layers=1,
                           word_vocab_size=matcher.size, max_words=8)
    return Encoder(PolicyBertModel(cfg), enc, matcher)


DOC_A = "".join(f"第{i}条数据要素市场建设要求明确。" for i in range(40))
DOC_B = "".join(f"平台第{i}项制度安排逐步完善。" for i in range(40))
DOC_C = "".join(f"关于公共数据开放的第{i}点说明。" for i in range(40))


class Counting:
    def __init__(self, fn, fail=False):
        self.fn, self.fail, self.texts = fn, fail, 0

    def __call__(self, texts):
        if self.fail:
            raise RuntimeError("embedding crashed")
        self.texts += len(texts)
        return self.fn(texts)


def _docs(a=DOC_A):
    return pd.DataFrame({"doc_id": ["a", "b", "c"], "text": [a, DOC_B, DOC_C], "title": ["A", "B", "C"],
                         "source": ["s"] * 3, "url": [None] * 3})


def test_refresh_embeds_only_changed_chunks(tmp_path, tiny_encoder):
    from retrieval.build import refresh_index
    from retrieval.dense import IndexConfig

    cfg = ChunkConfig(max_chars=120, overlap=30)
    ch1 = build_chunks(_docs(), cfg)
    e1 = Counting(tiny_encoder.encode_corpus)
    s1 = refresh_index(tmp_path, ch1, e1, "m1")
    assert s1["full_rebuild"] and s1["embedded"] == len(ch1) == e1.texts and s1["version"] == "v1"
    changed = DOC_A.replace("第39条", "第三十九条")  # the last chunk(s) of document a change
    ch2 = build_chunks(_docs(changed), cfg)
    e2 = Counting(tiny_encoder.encode_corpus)
    s2 = refresh_index(tmp_path, ch2, e2, "m1")
    new_ids = set(ch2.chunk_id) - set(ch1.chunk_id)
    assert not s2["full_rebuild"] and s2["version"] == "v2" and s2["previous"] == "v1"
    assert 0 < s2["embedded"] == e2.texts == len(new_ids) < len(ch2) // 3
    assert s2["removed"] == len(set(ch1.chunk_id) - set(ch2.chunk_id)) and s2["reused"] == len(ch2) - len(new_ids)
    v1 = dict(zip(pd.read_parquet(tmp_path / "v1" / "chunks.parquet").chunk_id, np.load(tmp_path / "v1" / "embeddings.npy")))
    v2 = dict(zip(pd.read_parquet(tmp_path / "v2" / "chunks.parquet").chunk_id, np.load(tmp_path / "v2" / "embeddings.npy")))
    for cid in set(v1) & set(v2):
        assert np.array_equal(v1[cid], v2[cid])
    fresh = tiny_encoder.encode_corpus([ch2.set_index("chunk_id").loc[next(iter(new_ids)), "text"]])[0]
    assert np.allclose(v2[next(iter(new_ids))], fresh, atol=1e-5)
    # a crash mid-refresh leaves v2 serving and no v3
    with pytest.raises(RuntimeError):
        refresh_index(tmp_path, build_chunks(_docs(DOC_A + "新增一句。"), cfg),
                      Counting(tiny_encoder.encode_corpus, fail=True), "m1")
    assert current_version(tmp_path) == "v2" and not (tmp_path / "v3").exists()
    # another embedding model -> full rebuild; an HNSW index answers too
    e3 = Counting(tiny_encoder.encode_corpus)
    s3 = refresh_index(tmp_path, ch2, e3, "m2", IndexConfig(kind="hnsw"))
    assert s3["full_rebuild"] and e3.texts == len(ch2)
    index, chunks, manifest = load_version(tmp_path)
    assert manifest["index"]["kind"] == "hnsw" and index.ntotal == len(ch2)
    hit = search(index, chunks, tiny_encoder.encode_corpus([chunks.text.iloc[5]]), k=1)[0][0]
    assert hit.score > 0.99  # HNSW is approximate: the chunk itself or a near-identical twin


def test_rank_metrics_and_queries():
    from retrieval.evaluate import make_queries
    from retrieval.metrics import doc_metrics

    m = doc_metrics([["a", "b"], ["x", "y", "z", "b"], ["q"]], ["a", "b", "c"])
    assert m["recall@1"] == pytest.approx(1 / 3) and m["recall@5"] == pytest.approx(2 / 3)
    assert m["mrr@10"] == pytest.approx((1 + 0.25) / 3) and m["queries"] == 3
    docs = pd.DataFrame({"doc_id": ["a", "b", "c"], "title": ["甲", "乙", "甲"], "citation": ["[1] 甲文", None, ""]})
    q = make_queries(docs)
    assert q.to_dict("records") == [{"query": "[1] 甲文", "doc_id": "a", "kind": "citation"},
                                    {"query": "乙", "doc_id": "b", "kind": "title"}]


def test_ann_recall_counts_misses_and_ties():
    from retrieval.dense import IndexConfig, build_index
    from retrieval.metrics import ann_recall

    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(400, 16)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    ids = np.arange(400, dtype=np.int64) * 7
    q = vecs[:50] + 0.05 * rng.normal(size=(50, 16)).astype(np.float32)
    assert ann_recall(build_index(vecs, ids), vecs, ids, q, 10) == 1.0  # exact finds the exact top-10
    half = build_index(vecs[::2], ids[::2])  # an index missing half of the vectors
    assert 0.3 < ann_recall(half, vecs, ids, q, 10) < 0.7
    twins = np.repeat(vecs[:20], 2, axis=0)  # duplicates: either twin is right
    tid = np.arange(40, dtype=np.int64)
    one_each = build_index(twins[::2], tid[::2])
    assert ann_recall(one_each, twins, tid, twins[::2], 1) == 1.0
    assert ann_recall(build_index(vecs, ids, IndexConfig(kind="ivf", nprobe=1)), vecs, ids, q, 10) < 1.0


def test_evaluation_reads_the_version_and_skips_untrained_above_its_size(tmp_path):
    from retrieval.evaluate import EvalConfig
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import evaluate_stage, index_stage
    from storage import read_table
    from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

    tok = make_tokenizer("hanlp-dict")
    docs = policy_docs().assign(citation=[f"《{t}》" for t in policy_docs()["title"]])
    clean = write_clean(docs, tmp_path / "clean")
    ckpt = save_tiny_policybert(tmp_path / "ft", seed=2)
    s = index_stage(clean, ckpt, tmp_path / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tok)
    res = evaluate_stage(clean, tmp_path / "index", tmp_path / "eval", tokenizer=tok)
    t = pd.DataFrame(res["table"]).set_index("system")
    assert list(t.index) == ["policybert", "untrained", "bm25-hanlp", "hybrid"] and res["queries"] == 16
    assert t.loc["bm25-hanlp", "recall@1"] == 1.0  # titles share their document's words
    assert (t["queries"] == 16).all() and t.loc["hybrid", "recall@5"] >= t.loc["policybert", "recall@5"]
    # under 78 chunks IVF gets one inverted list (at most n // 39, each list ~39 training points), which
    # nprobe >= 1 searches whole: the same top 10 as exact search
    assert s["chunks"] < 78 and res["ivf_recall@10_vs_exact"] == 1.0 and res["hnsw_recall@10_vs_exact"] > 0.5
    assert read_table(tmp_path / "eval").equals(pd.DataFrame(res["table"]))
    small = evaluate_stage(clean, tmp_path / "index", tmp_path / "eval2", tokenizer=tok,
                           cfg=EvalConfig(untrained_max_chunks=s["chunks"] - 1))
    assert "untrained" not in {r["system"] for r in small["table"]} and small["untrained_skipped"]
    # above the cap, a document sample: the untrained row and the version's own vectors over the same sample
    half = s["chunks"] // 2
    sampled = evaluate_stage(clean, tmp_path / "index", tmp_path / "eval3", tokenizer=tok,
                             cfg=EvalConfig(untrained_max_chunks=s["chunks"] - 1, untrained_sample_chunks=half))
    st = pd.DataFrame(sampled["table"]).set_index("system")
    assert list(st.index) == ["policybert", "untrained@sample", "policybert@sample", "bm25-hanlp", "hybrid"]
    assert sampled["untrained_sampled"] and not sampled["untrained_skipped"]
    n_sample = st.loc["untrained@sample", "queries"]
    assert 0 < n_sample < 16 and st.loc["policybert@sample", "queries"] == n_sample
    # the untrained baseline embeds under the index's autocast (the stage's precision setting), same sample
    bf16 = evaluate_stage(clean, tmp_path / "index", tmp_path / "eval4", tokenizer=tok, precision="bf16",
                          cfg=EvalConfig(untrained_max_chunks=s["chunks"] - 1, untrained_sample_chunks=half))
    bt = pd.DataFrame(bf16["table"]).set_index("system")
    assert bt.loc["untrained@sample", "queries"] == n_sample
    assert abs(bt.loc["untrained@sample", "mrr@10"] - st.loc["untrained@sample", "mrr@10"]) <= 0.2
    from retrieval.encoders import Encoder
    assert Encoder.untrained_like(ckpt, precision="bf16").precision == "bf16"
    assert Encoder.untrained_like(ckpt).precision == "auto"
    with pytest.raises(ValueError):
        EvalConfig(untrained_max_chunks=-1)
    with pytest.raises(ValueError):
        EvalConfig(untrained_sample_chunks=-1)


def test_sample_rows_keeps_whole_documents_under_the_cap():
    from retrieval.evaluate import sample_rows

    chunks = pd.DataFrame({"doc_id": ["a"] * 3 + ["b"] * 2 + ["c"] * 4 + ["d"]})
    queries = pd.DataFrame({"query": ["qa", "qb", "qc"], "doc_id": ["a", "b", "c"]})  # d has no query
    for seed in range(5):
        rows = sample_rows(chunks, queries, 5, seed)
        docs = chunks["doc_id"].to_numpy()[rows]
        assert len(rows) <= 5 and "d" not in docs
        for d in set(docs):  # whole documents only
            assert (docs == d).sum() == (chunks["doc_id"] == d).sum()
        assert list(rows) == sorted(rows)
    assert len(sample_rows(chunks, queries, 0, 0)) == 0


def _publish(root, n, model):
    from retrieval.versions import publish_version

    rng = np.random.default_rng(n)
    vecs = rng.normal(size=(4, 8)).astype(np.float32)
    ids = np.arange(4, dtype=np.int64) + 10 * n
    (root / "models" / model).mkdir(parents=True, exist_ok=True)
    (root / "models" / model / "config.json").write_text("{}")
    chunks = pd.DataFrame({"chunk_id": ids, "doc_id": list("abcd"), "text": list("wxyz")})
    return publish_version(root, build_flat_index(vecs, ids), chunks, {"encoder_dir": f"models/{model}"}, vecs)


def test_retention_keeps_the_newest_the_serving_and_the_pinned_versions(tmp_path):
    from retrieval.versions import kept_versions, list_versions, pin_version, retire_versions, rollback
    from storage import path_fingerprint

    for n, model in enumerate(["m-old", "m-mid", "m-mid", "m-new", "m-new"], start=1):
        _publish(tmp_path, n, model)
    pin_version(tmp_path, "v1")
    key = path_fingerprint(tmp_path)  # what the evaluation's cache key hashes for the index
    out = retire_versions(tmp_path, keep=2)
    assert out["retired"] == ["v2", "v3"] and list_versions(tmp_path) == ["v1", "v4", "v5"]
    assert out["encoders_removed"] == ["m-mid"] and sorted(os.listdir(tmp_path / "models")) == ["m-new", "m-old"]
    assert current_version(tmp_path) == "v5" and load_version(tmp_path)[2]["version"] == "v5"
    hidden = sorted(p.split(".")[1] for p in os.listdir(tmp_path) if p.startswith("."))
    assert hidden == ["v1", "v4", "v5"]  # the kept versions' folders only: nothing of v2, v3 left behind
    assert path_fingerprint(tmp_path) == key  # retiring old versions leaves the key alone
    rollback(tmp_path, "v1")  # the pinned version serves again, with its own encoder kept
    assert load_version(tmp_path)[2]["version"] == "v1" and path_fingerprint(tmp_path) != key
    assert kept_versions(tmp_path, 1) == ["v1", "v5"]  # serving (and pinned) v1 plus the newest
    with pytest.raises(FileNotFoundError):
        rollback(tmp_path, "v2")
    with pytest.raises(ValueError):
        retire_versions(tmp_path, keep=0)
    pin_version(tmp_path, "v1", pinned=False)
    rollback(tmp_path, "v5")
    assert retire_versions(tmp_path, keep=1)["retired"] == ["v1", "v4"] and list_versions(tmp_path) == ["v5"]


def test_refresh_retires_versions_past_keep(tmp_path, tiny_encoder):
    from retrieval.build import refresh_index
    from retrieval.dense import IndexConfig
    from retrieval.versions import list_versions

    with pytest.raises(ValueError, match="keep_versions"):
        IndexConfig(keep_versions=0)
    cfg = IndexConfig(keep_versions=2)
    for i in range(4):
        s = refresh_index(tmp_path, build_chunks(_docs(DOC_A + "补充" * i + "。"), ChunkConfig(120, 30)),
                          tiny_encoder.encode_corpus, "m1", cfg)
    assert s["version"] == "v4" and s["retired"] == ["v2"] and list_versions(tmp_path) == ["v3", "v4"]
    assert s["reused"] > 0  # the refresh still reused the serving version's vectors
