"""The answer stage's sentence cross-encoder (SPEC §9; answers.rerank_features): its training groups
(question → the sentence holding the answer, the document's other sentences as negatives, held-out documents
never), the span features of its scores, and the part pinned in the index version beside the scorer fitted on
it: installed with it, refused without it, read when answering, rolled back with the version."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from tests.answer_builders import questions
from tests.retrieval_builders import policy_docs, save_tiny_bert, write_clean


def chars(texts):
    """Character tokens (a real, if crude, segmentation for BM25 over the test documents)."""
    return [[c for c in t if c.strip()] for t in texts]


def test_sentence_groups_hold_the_answer_sentence_against_its_documents_other_sentences():
    from answers.candidates import sentence_offsets
    from retrieval.rerank_data import ncpqa_sentence_groups

    docs = policy_docs()
    texts = dict(zip(docs["doc_id"], docs["text"]))
    q = questions()
    g = ncpqa_sentence_groups(q, texts, chars, sentence_offsets, excluded_docs=["d1"], max_negatives=5)
    assert len(g) == int((q["doc_id"] != "d1").sum()) and "d1" not in set(g["doc_id"])
    by_q = q.set_index("qid")
    for r in g.itertuples():
        gold = by_q.loc[r.qid]
        assert gold["answer"] in r.positive or r.positive in gold["answer"]  # the sentence holding the span
        assert r.positive in texts[r.doc_id]
        assert 1 <= len(r.negatives) <= 5 and all(gold["answer"] not in n for n in r.negatives)
        assert all(n in texts[r.doc_id] and n != r.positive for n in r.negatives)
    # hard negatives first: the first negative shares more of the question's characters than the last
    r = g.iloc[1]
    share = [len(set(r.query) & set(n)) for n in r.negatives]
    assert share[0] >= share[-1]


def test_span_features_read_the_score_of_the_sentence_a_span_starts_in():
    from answers.rerank_features import CE_FEATURES, ce_matrix

    class Doc:  # the two fields ce_matrix reads: each span's static row (first sentence) and nothing else
        def __init__(self, firsts):
            from answers.features import STATIC

            self.static = np.zeros((len(firsts), len(STATIC)))
            self.static[:, STATIC.index("first")] = firsts

    scores = [np.array([1.0, np.nan, 3.0]), np.array([2.0, 0.5])]
    m = ce_matrix([Doc([0, 1, 2, 2]), Doc([1, 0])], scores)
    assert m.shape == (6, len(CE_FEATURES))
    assert np.allclose(m[[0, 2, 3, 4, 5], 0], [-2.0, 0.0, 0.0, -2.5, -1.0])   # against the question's best (3.0)
    assert np.allclose(m[[0, 2, 4, 5], 1], [-2.0, 0.0, -1.5, 0.0])              # against its document's best
    assert np.allclose(m[[2, 5, 0, 4], 2], [math.log1p(r) for r in (0, 1, 2, 3)])  # rank among scored sentences
    assert np.isnan(m[1]).all()                                                  # its sentence was not scored


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """A data dir whose ``index/v1`` holds a tiny sentence cross-encoder trained on the test questions and the
    answer scorer fitted in the index stage on its scores (SPEC §9)."""
    import torch

    from answers.candidates import sentence_offsets
    from answers.stages import index_publish_stage
    from retrieval.chunks import ChunkConfig
    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, TrainConfig, train
    from retrieval.encoders import BertEncoder
    from retrieval.pinning import model_id
    from retrieval.rerank_data import ncpqa_sentence_groups, to_groups
    from retrieval.sparse import make_tokenizer

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("answer-reranker")
    ckpt = save_tiny_bert(root / "ckpt", seed=0)
    docs = policy_docs().assign(external_id=lambda d: "ext-" + d["doc_id"])
    q = questions()
    groups = ncpqa_sentence_groups(q, dict(zip(docs["doc_id"], docs["text"])), chars, sentence_offsets)
    ce = CrossEncoder.from_encoder(BertEncoder.from_checkpoint(ckpt), model_id(ckpt),
                                   CrossEncoderConfig(layers=2, max_len=64, max_query=16))
    stats = train(ce, to_groups(groups), TrainConfig(steps=20, batch=4, negatives=3, lr=3e-3, head_lr=3e-2,
                                                     warmup=2), log=lambda m: None)
    part = ce.save(root / "answer-reranker", weights_file="answer-reranker.safetensors")
    qfile = root / "questions.jsonl"
    qfile.write_text("".join(json.dumps({"qid": r.qid, "question": r.question, "answer": r.answer,
                                         "doc_id": f"ext-{r.doc_id}", "answer_start": int(r.gold_start),
                                         "answer_end": int(r.gold_end)}, ensure_ascii=False) + "\n"
                             for r in q.itertuples()), encoding="utf-8")
    data, tok = root / "data", make_tokenizer("auto")
    clean = write_clean(docs, data / "documents_clean")
    res = index_publish_stage(clean, ckpt, data / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tok,
                              answer_questions=qfile, answer_reranker=part)
    return {"data": data, "clean": clean, "ckpt": ckpt, "part": part, "result": res, "tok": tok, "stats": stats}


@pytest.mark.slow  # the fixture trains a tiny cross-encoder, builds an index and fits a scorer (~40 s on 2 cores)
def test_the_scorer_fitted_in_the_stage_reads_the_pinned_cross_encoder(published):
    from answers.answer import Answerer
    from answers.backend import SearchBackend
    from answers.fit import span_names
    from answers.rerank_features import CE_FEATURES
    from storage.hashing import file_sha256

    man = json.loads((published["data"] / "index" / "v1" / "manifest.json").read_text())
    rec = man["parts"]["answer_reranker"]
    assert rec["file"] == "answer-reranker.json" and set(rec["files"]) == {"answer-reranker.safetensors"}
    assert rec["sha256"] == file_sha256(published["part"])
    backend = SearchBackend(published["data"] / "index", tokenizer=published["tok"])
    scorer = backend.scorer
    assert tuple(scorer.span.names) == span_names(len(scorer.span.names)) and scorer.span.names[-3:] == \
        list(CE_FEATURES)
    assert scorer.info["provenance"]["answer_reranker"] == rec["sha256"]
    assert published["stats"]["loss_last"] < published["stats"]["loss_first"]
    out = Answerer(published["data"], tokenizer=published["tok"]).answer("数据要素第7项要完善什么？", k=2)
    assert out["answers"] and out["version"] == "v1"
    from flows.answer_eval import check_installable

    with pytest.raises(ValueError, match="does not ship"):  # refused from the manifest, before any fitting
        check_installable(published["data"])


@pytest.mark.slow  # shares the fixture above
def test_a_scorer_fitted_on_the_cross_encoder_is_refused_without_it_and_rolls_back_with_it(published, tmp_path):
    from answers.answer import Answerer
    from answers.backend import SearchBackend
    from answers.scorer import ScorerMissingError
    from retrieval.chunks import ChunkConfig
    from retrieval.stages import index_stage
    from retrieval.versions import rollback

    idx = published["data"] / "index"
    scorer_file = idx / "v1" / "answer-scorer.json"
    res = index_stage(published["clean"], published["ckpt"], idx, ChunkConfig(max_chars=120, overlap=30),
                      tokenizer=published["tok"], answer_scorer=scorer_file)  # no answer_reranker given
    assert "answer_reranker" in res["serving_parts"]["answer_scorer"]["refused"]
    from flows.answer_eval import check_installable

    check_installable(published["data"])  # v2 serves without a cross-encoder: a scorer fitted there may ship
    with pytest.raises(ScorerMissingError):
        SearchBackend(idx, res["version"], tokenizer=published["tok"]).scorer
    # a scorer given directly is checked against the version too: v2 (serving now) holds no cross-encoder
    scorer = SearchBackend(idx, "v1", tokenizer=published["tok"]).scorer
    with pytest.raises(ScorerMissingError, match="does not hold"):
        Answerer(published["data"], scorer=scorer, tokenizer=published["tok"]).answer("数据要素第7项要完善什么？")
    # and a version whose manifest lost its cross-encoder (edited by hand) refuses to serve its scorer
    man_path = idx / "v1" / "manifest.json"
    original = man_path.read_text(encoding="utf-8")
    man = json.loads(original)
    del man["parts"]["answer_reranker"]
    man_path.write_text(json.dumps(man), encoding="utf-8")
    with pytest.raises(ScorerMissingError, match="does not hold"):
        SearchBackend(idx, "v1", tokenizer=published["tok"]).scorer
    man_path.write_text(original, encoding="utf-8")
    rollback(idx, "v1")  # the rollback restores the scorer with its cross-encoder
    out = Answerer(published["data"], tokenizer=published["tok"]).answer("统一大市场第2项要完善什么？", k=1)
    assert out["version"] == "v1" and out["answers"]


def test_training_sources_are_checked_before_any_work(tmp_path, capsys):
    from flows.train_reranker import main

    assert main(["--data-dir", str(tmp_path / "none"), "--sources", "ncpqa,bogus"]) == 2
    assert "bogus" in capsys.readouterr().err
    assert main(["--data-dir", str(tmp_path / "none"), "--sources", ","]) == 2
    assert "(none)" in capsys.readouterr().err


def test_sentence_picks_compare_bm25_and_the_cross_encoder_inside_the_gold_document():
    """bench/answer_ce_bench.py's diagnosis: in the gold document, whose best sentence holds the gold span."""
    import sys
    from types import SimpleNamespace

    from answers.candidates import sentence_offsets

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
    from answer_ce_bench import sentence_picks

    text = "关于展会的支持政策。对暂停举办的展会给予补助，金额不超过50万元。其他事项另行通知。"
    sents = sentence_offsets(text)
    assert len(sents) == 3
    question = "暂停举办的展会有何支持政策？"
    overlap = [len(set(question) & set(text[s:e])) for s, e in sents]
    doc = SimpleNamespace(doc_id="d1", text=text, sentences=sents, bm=np.asarray(overlap, dtype=np.float32),
                          entry=SimpleNamespace(asks=np.zeros(3, dtype=bool)))
    start = text.index("给予补助")
    gold = SimpleNamespace(doc_id="d1", gold_start=start, gold_end=start + 4)
    digits = lambda q, ts: np.asarray([sum(c.isdigit() for c in t) for t in ts], float)  # noqa: E731
    prep = SimpleNamespace(question=question, docs=[doc])
    missing = SimpleNamespace(doc_id="d9", gold_start=0, gold_end=2)   # gold document not among the candidates
    no_span = SimpleNamespace(doc_id="d1", gold_start=-1, gold_end=-1)  # answer not found in the cleaned text
    out = sentence_picks([(gold, prep), (missing, prep), (no_span, prep)], digits)
    assert int(np.argmax(overlap)) != 1  # BM25's stand-in prefers the heading that echoes the question
    assert out == {"questions": 1, "bm25": 0.0, "cross_encoder": 1.0}
    assert sentence_picks([(missing, prep)], digits) == {"questions": 0, "bm25": 0.0, "cross_encoder": 0.0}
