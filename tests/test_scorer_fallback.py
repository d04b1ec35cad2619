"""The encoder-free answer scorer and the reader's fallback (SPEC §9): a scorer fitted with the encoder's
features read as 0 (answers.features.ENCODER_FEATURES) pins only the segmenter, and a version whose encoder the
shipped scorer was not fitted with installs it instead (PipelineConfig.answer_scorer_fallback), so it answers."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tests.answer_builders import publish, questions, scorer_file


@pytest.fixture(scope="module")
def tok():
    from retrieval.sparse import make_tokenizer

    return make_tokenizer("auto")


@pytest.fixture(scope="module")
def scorers(tmp_path_factory, tok):
    """(root, the encoder's scorer file, the encoder-free scorer file), both fitted over ``root/fit``."""
    from answers.backend import SearchBackend
    from answers.documents import DocumentStore
    from answers.features import ENCODER_FEATURES
    from answers.fit import build_examples, fit_scorer
    from answers.scorer import provenance
    from retrieval.parts import version_identity

    root = tmp_path_factory.mktemp("fallback")
    plain = scorer_file(root, tok)  # fits over root/fit (tiny PolicyBERT of seed 1)
    backend = SearchBackend(root / "fit" / "index", tokenizer=tok)
    prov = provenance(None, version_identity(backend.bundle.manifest)["segmenter"], "test questions")
    free = fit_scorer(build_examples(questions(), backend, DocumentStore(root / "fit" / "documents_clean"),
                                     log=lambda s: None), info={"test": True, "provenance": prov},
                      ignore=ENCODER_FEATURES)
    return root, plain, free.save(root / "scorer-encoder-free.json")


def test_an_encoder_free_scorer_reads_none_of_the_encoder_features(scorers):
    from answers.features import DOC_FEATURES, ENCODER_FEATURES, SPAN_FEATURES
    from answers.scorer import parse_scorer

    _, _, free_path = scorers
    free = parse_scorer(free_path.read_text(encoding="utf-8"))
    assert free.ignores == ENCODER_FEATURES and "encoder_model_id" not in free.info["provenance"]
    rng = np.random.default_rng(0)
    doc_x, span_x = rng.normal(size=(4, len(DOC_FEATURES))), rng.normal(size=(30, len(SPAN_FEATURES)))
    span_doc = rng.integers(0, 4, size=30)
    moved_doc, moved_span = doc_x.copy(), span_x.copy()
    for x, names in ((moved_doc, DOC_FEATURES), (moved_span, SPAN_FEATURES)):
        for i, n in enumerate(names):
            if n in ENCODER_FEATURES:
                x[:, i] += rng.normal(scale=5.0, size=len(x))
    p1, s1 = free.raw_scores(doc_x, span_x, span_doc)
    p2, s2 = free.raw_scores(moved_doc, moved_span, span_doc)
    assert np.allclose(p1, p2) and np.allclose(s1, s2)
    # the other features still decide: the scores move with them
    p3, s3 = free.raw_scores(doc_x + 1.0, span_x + 1.0, span_doc)
    assert not (np.allclose(p1, p3) and np.allclose(s1, s3))


def test_a_scorer_refuses_to_ignore_a_feature_it_does_not_read(scorers):
    from dataclasses import replace

    from answers.scorer import parse_scorer

    free = parse_scorer(scorers[2].read_text(encoding="utf-8"))
    with pytest.raises(ValueError, match="no_such_feature"):
        replace(free, ignores=("no_such_feature",))


def test_another_encoders_version_installs_the_fallback_and_answers(scorers, tok):
    from answers import Answerer
    from retrieval.chunks import ChunkConfig
    from retrieval.stages import index_stage
    from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

    root, plain, free = scorers
    other = root / "models" / "other"
    save_tiny_policybert(other, seed=2)  # another encoder: the plain scorer was not fitted with it
    data = root / "other-data"
    clean = write_clean(policy_docs(), data / "documents_clean")
    only = index_stage(clean, other, data / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tok,
                       answer_scorer=plain)
    assert "refused" in only["serving_parts"]["answer_scorer"]  # the encoder's scorer alone: refused
    res = index_stage(clean, other, data / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tok,
                      answer_scorer=plain, answer_scorer_fallback=free)
    manifest = json.loads((data / "index" / res["version"] / "manifest.json").read_text(encoding="utf-8"))
    rec = manifest["parts"]["answer_scorer"]
    assert "refused" not in rec and "encoder_model_id" in rec["fallback_for"]
    assert "encoder_model_id" not in rec["provenance"]
    got = Answerer(data, tokenizer=tok).answer("职业教育工作现就哪些方面提出意见？", 3)
    assert got["answers"] and got["version"] == res["version"]


def test_the_encoders_own_scorer_wins_where_it_fits(scorers, tok):
    root, plain, free = scorers
    res = publish(root / "same-data", root / "models" / "finetune", tok, plain)
    assert "fallback_for" not in res["serving_parts"]["answer_scorer"]
    from retrieval.chunks import ChunkConfig
    from retrieval.stages import index_stage

    res = index_stage(root / "same-data" / "documents_clean", root / "models" / "finetune",
                      root / "same-data" / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tok,
                      answer_scorer=plain, answer_scorer_fallback=free)
    rec = res["serving_parts"]["answer_scorer"]
    assert "refused" not in rec and "fallback_for" not in rec


def test_a_fallback_of_another_segmenter_is_refused_with_both_reasons(scorers, tok, tmp_path):
    from retrieval.chunks import ChunkConfig
    from retrieval.stages import index_stage
    from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

    root, plain, free = scorers
    d = json.loads(free.read_text(encoding="utf-8"))
    d["info"]["provenance"]["segmenter"] = "another:segmenter"
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(d, ensure_ascii=False), encoding="utf-8")
    other = tmp_path / "other"
    save_tiny_policybert(other, seed=3)
    clean = write_clean(policy_docs(), tmp_path / "data" / "documents_clean")
    res = index_stage(clean, other, tmp_path / "data" / "index", ChunkConfig(max_chars=120, overlap=30),
                      tokenizer=tok, answer_scorer=plain, answer_scorer_fallback=wrong)
    reason = res["serving_parts"]["answer_scorer"]["refused"]
    assert "encoder_model_id" in reason and "its fallback" in reason and "another:segmenter" in reason
