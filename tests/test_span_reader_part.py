"""The neural span reader as a reader part (SPEC §9; answers.span_reader): a tiny reader trained here on the
test questions, exported without the token embeddings it shares with its encoder, installed from
``part_files.span_reader``, answering in place of the span scorer, reloaded exactly, and refused where it does
not belong (another encoder, changed weights)."""
from __future__ import annotations

import json
import math
import random

import pytest

from tests.answer_builders import questions
from tests.retrieval_builders import policy_docs, save_tiny_bert, write_clean


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A 2-layer span reader on a tiny BERT encoder, 40 steps on the test questions, exported as a part."""
    import torch

    from answers.span_reader import export_span_reader, reader_from_encoder
    from flows.train_reader import train_steps
    from model.span_reader import train_features
    from retrieval.encoders import BertEncoder
    from retrieval.pinning import model_id

    torch.set_num_threads(1)
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("span-reader")
    ckpt = save_tiny_bert(root / "ckpt", seed=0)
    encoder = BertEncoder.from_checkpoint(ckpt)
    model = reader_from_encoder(encoder, layers=2, max_len=64, doc_stride=16)
    texts = dict(zip(policy_docs()["doc_id"], policy_docs()["text"]))
    ex = [(r.question, texts[r.doc_id], int(r.gold_start), int(r.gold_end)) for r in questions().itertuples()]
    feats = train_features(model.tokenizer, ex, 64, 16, rng=random.Random(0))
    losses = train_steps(model, feats, steps=40, batch=8, lr=3e-3, seed=0, device="cpu")
    part = export_span_reader(model, encoder, model_id(ckpt), root / "part" / "span-reader.json", threshold=0.4)
    return {"root": root, "ckpt": ckpt, "encoder": encoder, "model": model, "part": part, "losses": losses}


def test_the_part_holds_every_tensor_but_the_shared_token_embeddings(trained):
    from safetensors.torch import load_file

    from answers.span_reader import TOKEN_EMBEDDINGS, export_span_reader
    from retrieval.encoders import BertEncoder

    losses = trained["losses"]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5  # it learned something from the questions
    d = json.loads(trained["part"].read_text(encoding="utf-8"))
    assert d["kind"] == "span_reader" and d["threshold"] == 0.4 and d["config"]["num_hidden_layers"] == 2
    stored = load_file(str(trained["part"].parent / d["weights"]["file"]))
    own = trained["model"].state_dict()
    assert TOKEN_EMBEDDINGS not in stored and set(stored) == set(own) - {TOKEN_EMBEDDINGS}
    assert all(v.dtype.is_floating_point and v.element_size() == 2 for v in stored.values())  # fp16
    other = BertEncoder.from_checkpoint(save_tiny_bert(trained["root"] / "other", seed=1))
    with pytest.raises(ValueError, match="token embeddings are not this encoder's"):
        export_span_reader(trained["model"], other, "other", trained["root"] / "x" / "span-reader.json")
    assert not (trained["root"] / "x" / "span-reader.json").exists()


def test_a_malformed_or_foreign_part_is_refused_with_its_name(trained, tmp_path):
    from types import SimpleNamespace

    from answers.span_reader import load_span_reader
    from retrieval.parts import PartError

    d = json.loads(trained["part"].read_text(encoding="utf-8"))
    bundle = SimpleNamespace(model_id=d["info"]["provenance"]["encoder_model_id"], version="v1", retriever=None)
    for broken in ({**d, "weights": None}, {**d, "threshold": "high"}, {**d, "kind": "scorer"}, ["not", "a", "part"]):
        f = tmp_path / "span-reader.json"
        f.write_text(json.dumps(broken), encoding="utf-8")
        with pytest.raises(PartError, match="span reader part .*(malformed|not a span_reader)"):
            load_span_reader(bundle, f)
    with pytest.raises(PartError, match="trained on encoder"):
        load_span_reader(SimpleNamespace(model_id="another", version="v1", retriever=None), trained["part"])


@pytest.mark.slow  # builds two tiny indexes (~20 s)
def test_a_version_with_the_span_reader_answers_through_it_and_reloads_it_exactly(trained, tmp_path):
    import torch

    from answers.answer import Answerer
    from answers.backend import SearchBackend
    from answers.span_reader import TOKEN_EMBEDDINGS, NeuralSpanReader
    from answers.stages import index_publish_stage
    from retrieval.chunks import ChunkConfig
    from retrieval.parts import PartError
    from retrieval.sparse import make_tokenizer
    from storage.hashing import file_sha256

    tok = make_tokenizer("auto")
    data = tmp_path / "data"
    clean = write_clean(policy_docs(), data / "documents_clean")
    res = index_publish_stage(clean, trained["ckpt"], data / "index", ChunkConfig(max_chars=120, overlap=30),
                              tokenizer=tok, span_reader=trained["part"])
    rec = res["serving_parts"]["span_reader"]
    assert rec["file"] == "span-reader.json" and rec["sha256"] == file_sha256(trained["part"])
    assert set(rec["files"]) == {"span-reader.safetensors"}
    backend = SearchBackend(data / "index", tokenizer=tok)
    reader = backend.reader()
    assert isinstance(reader, NeuralSpanReader) and reader.threshold == 0.4
    shared = backend.bundle.retriever.dense.encoder.model.embeddings.word_embeddings.weight
    assert reader.model.bert.embeddings.word_embeddings.weight is shared  # shared, not a copy
    stored = {k: v.half().float() for k, v in trained["model"].state_dict().items()}  # what the part holds
    for k, v in reader.model.state_dict().items():  # every other tensor as exported, to the fp16 rounding
        assert torch.equal(v, shared if k == TOKEN_EMBEDDINGS else stored[k]), k
    assert Answerer(data, tokenizer=tok).check()["version"] == "v1"  # a serving start: no scorer needed
    out = Answerer(data, tokenizer=tok).answer("数据要素第7项要完善什么？", k=3)
    texts = dict(zip(policy_docs()["doc_id"], policy_docs()["text"]))
    assert out["answers"] and out["version"] == "v1" and out["threshold"] == 0.4
    ranks = [a["doc_rank"] for a in out["answers"]]
    assert ranks == sorted(ranks)  # the search's order of the documents
    for a in out["answers"]:
        assert texts[a["doc_id"]][a["start"]:a["end"]] == a["text"] and a["text"]
        assert a["score"] == pytest.approx(1 / (1 + math.exp(-a["raw_score"])))
    assert out["found"] == (out["answers"][0]["score"] >= 0.4)
    # another encoder's version refuses the part at publication and answers with its span scorer
    other = tmp_path / "other"
    res2 = index_publish_stage(write_clean(policy_docs(), other / "documents_clean"),
                               save_tiny_bert(tmp_path / "ckpt2", seed=1), other / "index",
                               ChunkConfig(max_chars=120, overlap=30), tokenizer=tok, span_reader=trained["part"])
    assert "encoder_model_id" in res2["serving_parts"]["span_reader"]["refused"]
    assert SearchBackend(other / "index", tokenizer=tok).own_reader is None
    # weights changed after publication: refused at load, naming the part
    w = data / "index" / "v1" / "span-reader.safetensors"
    w.write_bytes(w.read_bytes()[:-8] + b"\0" * 8)
    with pytest.raises(PartError, match="span reader part .* changed"):
        SearchBackend(data / "index", tokenizer=tok).reader()
