"""The answer scorer fitted inside the pipeline (SPEC §9): with a question set configured, the index stage fits
the scorer on those questions against the version it stages (its own encoder, BM25 side and texts, before
``CURRENT`` switches) and pins it as the version's ``answer_scorer`` part; the question file's content is in the
stage's cache key; a file with no usable question stops the publication with an error naming it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.answer_builders import questions
from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

CHUNKS = dict(max_chars=120, overlap=30)


@pytest.fixture(scope="module")
def tok():
    from retrieval.sparse import make_tokenizer

    return make_tokenizer("auto")


def _docs():
    """The 8 policy documents with the ids a shared question file names them by (``external_id``)."""
    return policy_docs().assign(external_id=lambda d: "ext-" + d["doc_id"])


def write_questions(path: Path, extra_missing: int = 2, only_missing: bool = False) -> Path:
    """NCPQA JSON Lines over :func:`_docs` (offsets into each document's text), plus ``extra_missing``
    questions about a document the index does not hold; ``only_missing``: only those."""
    rows = [] if only_missing else [
        {"qid": r.qid, "question": r.question, "answer": r.answer, "doc_id": f"ext-{r.doc_id}",
         "answer_start": int(r.gold_start), "answer_end": int(r.gold_end)} for r in questions().itertuples()]
    rows += [{"qid": f"m{i}", "question": "口岸防疫物资通关有何便利措施？", "answer": "优先查验",
              "doc_id": "ext-elsewhere", "answer_start": 0, "answer_end": 4} for i in range(extra_missing)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory, tok):
    """A data dir whose ``index/v1`` was published by the index stage with the questions configured."""
    from answers.stages import index_publish_stage
    from retrieval.chunks import ChunkConfig

    root = tmp_path_factory.mktemp("scorer-stage")
    data = root / "data"
    clean = write_clean(_docs(), data / "documents_clean")
    ckpt = save_tiny_policybert(root / "ckpt", seed=1)
    qfile = write_questions(root / "questions.jsonl")
    res = index_publish_stage(clean, ckpt, data / "index", ChunkConfig(**CHUNKS), tokenizer=tok,
                              answer_questions=qfile, answer_scorer=Path("answers/data/scorer.json"))
    return {"data": data, "clean": clean, "ckpt": ckpt, "questions": qfile, "result": res}


@pytest.mark.slow  # the fixture builds an index and fits a scorer (~25 s on 2 cores)
def test_the_version_holds_a_scorer_fitted_on_the_questions_over_itself(fitted, tok):
    from answers.scorer import parse_scorer
    from retrieval.bundle import load_bundle
    from retrieval.parts import ANSWER_SCORER, version_identity

    res = fitted["result"]
    assert res["version"] == "v1"
    b = load_bundle(fitted["data"] / "index", tokenizer=tok)
    assert b.version == "v1"
    rec = b.manifest["parts"][ANSWER_SCORER]
    ident = version_identity(b.manifest)
    assert {k: rec["provenance"][k] for k in ident} == ident  # fitted with this version's encoder and segmenter
    assert rec["provenance"]["span_features"] and rec["provenance"]["doc_features"]
    fit = res["serving_parts"][ANSWER_SCORER]["fit"]
    assert (fit["questions"], fit["used"], fit["skipped_not_in_index"]) == (34, 32, 2)
    assert fit["without_gold_span"] == 0 and fit["file"] == "questions.jsonl" and len(fit["sha256"]) == 64
    assert 0 < fit["in_sample_top1_hit"] and fit["fitted_documents"] == 8
    scorer = parse_scorer(b.part_text(ANSWER_SCORER))
    assert scorer.info["fitted_documents"] == [f"d{i}" for i in range(8)]
    assert scorer.info["index_version"] == "v1" and scorer.info["fitted_questions"] == 32
    assert scorer.info["provenance"] == rec["provenance"]
    assert "staged" not in b.manifest["build_id"]  # the final manifest, not the one the fit loaded


@pytest.mark.slow  # the fixture builds an index and fits a scorer (~25 s on 2 cores)
def test_answering_reads_the_fitted_scorer(fitted, tok, capsys):
    from answers import Answerer
    from flows.ask import main

    res = Answerer(fitted["data"], tokenizer=tok).answer("职业教育工作现就哪些方面提出意见？", 3)
    assert res["version"] == "v1" and res["answers"]
    top = res["answers"][0]
    texts = dict(zip(_docs()["doc_id"], _docs()["text"]))
    assert texts[top["doc_id"]][top["start"]:top["end"]] == top["text"]
    assert main(["职业教育第7项要完善什么？", "--data-dir", str(fitted["data"]), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["version"] == "v1" and out["answers"] and out["answers"][0]["text"]


@pytest.mark.slow  # the fixture builds an index and fits a scorer (~25 s on 2 cores)
def test_no_usable_question_is_an_error_naming_the_file_and_publishes_nothing(fitted, tok, tmp_path):
    from answers.stages import index_publish_stage
    from retrieval.chunks import ChunkConfig

    index = fitted["data"] / "index"
    bad = write_questions(tmp_path / "elsewhere.jsonl", extra_missing=3, only_missing=True)
    with pytest.raises(ValueError, match=r"elsewhere\.jsonl.*no usable question"):
        index_publish_stage(fitted["clean"], fitted["ckpt"], index, ChunkConfig(**CHUNKS), tokenizer=tok,
                            answer_questions=bad)
    assert (index / "CURRENT").read_text() == "v1" and not (index / "v2").exists()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError, match="empty.jsonl holds no question"):
        index_publish_stage(fitted["clean"], fitted["ckpt"], index, ChunkConfig(**CHUNKS), tokenizer=tok,
                            answer_questions=empty)
    (tmp_path / "fields.jsonl").write_text('{"question": "x"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match="fields.jsonl: no field qid, answer, doc_id"):
        index_publish_stage(fitted["clean"], fitted["ckpt"], index, ChunkConfig(**CHUNKS), tokenizer=tok,
                            answer_questions=tmp_path / "fields.jsonl")
    assert (index / "CURRENT").read_text() == "v1"


def test_the_question_file_is_a_flow_input_whose_content_is_in_the_cache_key(tmp_path):
    from flows.profiles import get_profile, with_settings
    from flows.registry import PIPELINE
    from flows.stages import Run, serving_part_files
    from tasks.caching import stage_cache_key

    stage = PIPELINE.named("index")
    if "answer_questions" not in stage.files:
        pytest.skip("retrieval/contracts.py: the index stage does not declare the answer_questions file yet")
    qfile = write_questions(tmp_path / "q.jsonl")
    cfg = with_settings(get_profile("tiny"), [f"answer_questions={qfile}"])
    run = Run(cfg, str(tmp_path / "data"))
    serving_part_files(run)
    kw = run.kwargs(stage, {"plan": None, "parts": None})
    assert kw["answer_questions"] == str(qfile) and not kw.get("answer_scorer")
    key = stage_cache_key(stage, "task source")
    k1 = key(None, {"data_dir": str(tmp_path / "data"), **kw})
    assert key(None, {"data_dir": str(tmp_path / "data"), **kw}) == k1
    write_questions(qfile, extra_missing=3)
    assert key(None, {"data_dir": str(tmp_path / "data"), **kw}) != k1
    with pytest.raises(FileNotFoundError, match="nowhere.jsonl not found"):
        serving_part_files(Run(with_settings(cfg, [f"answer_questions={tmp_path / 'nowhere.jsonl'}"]),
                               str(tmp_path / "data")))
