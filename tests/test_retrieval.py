import numpy as np
import pandas as pd
import pytest

from retrieval.chunks import ChunkConfig, build_chunks, chunk_id, chunk_text
from retrieval.index import build_flat_index, current_version, load_index, publish_index, search


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
    chunks = pd.DataFrame({"chunk_id": ids, "doc_id": list("abcde"), "text": list("vwxyz")})
    assert current_version(tmp_path) is None
    with pytest.raises(FileNotFoundError):
        load_index(tmp_path)
    assert publish_index(tmp_path, build_flat_index(vecs, ids), chunks, {"model_id": "m1"}) == "v1"
    assert publish_index(tmp_path, build_flat_index(vecs[:2], ids[:2]), chunks[:2], {"model_id": "m2"}) == "v2"
    index, ch, manifest = load_index(tmp_path)
    assert manifest["version"] == "v2" and index.ntotal == 2 and (tmp_path / "v1" / "index.faiss").is_file()
    (tmp_path / "CURRENT").write_text("v1")  # rollback = switch the pointer back
    index, ch, _ = load_index(tmp_path)
    hits = search(index, ch, vecs[3:4], k=3)[0]
    assert hits[0]["chunk_id"] == 44 and hits[0]["doc_id"] == "d" and hits[0]["score"] == pytest.approx(1.0, abs=1e-5)
    assert all(h["score"] >= 0.5 for h in search(index, ch, vecs[3:4], k=5, min_score=0.5)[0])
