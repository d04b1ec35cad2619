"""Answers with sources (SPEC §9): candidates and offsets, metrics, the JSON scorer, the answer API over a
small index, the CLI and the web page's input checks."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from answers.candidates import clause_offsets, clause_runs, document_spans, question_spans, sentence_offsets
from answers.metrics import char_f1, exact_match
from tests.answer_builders import build_data_dir, fit_test_scorer, questions
from tests.conftest import REPO


@pytest.fixture(scope="module")
def tok():
    from retrieval.sparse import make_tokenizer

    return make_tokenizer("auto")


@pytest.fixture(scope="module")
def data(tmp_path_factory, tok):
    return build_data_dir(tmp_path_factory.mktemp("answers"), tok)


@pytest.fixture(scope="module")
def answerer(data, tok):
    from answers import Answerer

    return Answerer(data, tokenizer=tok)


def test_candidates_are_offsets_into_the_text():
    text = "一、总体要求。\n坚持促进数据合规高效流通使用，赋能实体经济，保障安全。二、建立数据产权制度；探索分置运行机制！"
    sents = sentence_offsets(text)
    assert [text[s:e] for s, e in sents] == ["一、总体要求。", "坚持促进数据合规高效流通使用，赋能实体经济，保障安全。",
                                             "二、建立数据产权制度；", "探索分置运行机制！"]
    clauses = clause_offsets(text, *sents[1])
    assert [text[a:b] for a, b in clauses] == ["坚持促进数据合规高效流通使用", "赋能实体经济", "保障安全"]
    spans = document_spans(text, sents)
    assert {s.kind for s in spans} == {"sentence", "window", "clause", "run"}
    w = [s for s in spans if s.kind == "window" and s.first == 1 and s.last == 2][0]
    assert text[w.start:w.end].startswith("坚持") and text[w.start:w.end].endswith("制度；")
    runs = sorted(text[s.start:s.end] for s in spans if s.kind == "run")
    assert runs == ["坚持促进数据合规高效流通使用，赋能实体经济", "赋能实体经济，保障安全"]
    assert clause_runs([(0, 1), (2, 3)]) == [] and len(clause_runs([(i, i + 1) for i in range(9)])) == 0


def test_question_spans_find_factoids_and_the_words_beside_the_question_s_echo():
    text = ("多地对哄抬物价、造假等行为给予处罚和刑事拘留。可拨打区审批服务热线（86512345）或通过微信咨询。"
            "丰台区定于2月10日（星期一）起推行“零见面审批”工作。详见http://zwfw.safe.gov.cn/asone/。")
    sents = sentence_offsets(text)

    def cands(q):
        have = {(s.start, s.end) for s in document_spans(text, sents)}
        out = question_spans(text, sents, q, have)
        assert all((s.start, s.end) not in have for s in out) and len({(s.start, s.end) for s in out}) == len(out)
        return {(s.kind, text[s.start:s.end]) for s in out}

    got = cands("如何处置哄抬物价、造假等行为？")
    assert ("gap", "给予处罚和刑事拘留") in got
    assert {("entity", "86512345"), ("entity", "2月10日（星期一）"),
            ("entity", "http://zwfw.safe.gov.cn/asone/")} <= got
    assert not any(k == "gap" and "86512345" in t for k, t in got)  # nothing in that sentence echoes the question
    assert ("gap", "定于2月10日（星期一）起推行") in cands("丰台区的“零见面审批”何时开始？")


def test_span_ranker_exports_lightgbm_trees_that_rank_held_out_questions():
    from answers.scorer import AnswerScorer, TreeModel

    rng = np.random.default_rng(0)

    def groups(n):
        xs, gs, sizes = [], [], []
        for _ in range(n):
            x = rng.normal(size=(12, 3))
            xs.append(x)
            gs.append(np.clip(np.rint(5 + 4 * x[:, 1]), 0, 10))  # the grade follows feature 1
            sizes.append(12)
        return np.vstack(xs), np.concatenate(gs), sizes

    x, g, sizes = groups(60)
    model = TreeModel.fit_ranker(["a", "b", "c"], x, g, sizes)
    assert model.link == "rank" and model.trees
    again = AnswerScorer.from_json(AnswerScorer(model, model).to_json()).span
    hx, hg, _ = groups(30)
    s = again.predict(hx)
    assert np.allclose(s, model.predict(hx))
    top = [int(np.argmax(s[i:i + 12])) + i for i in range(0, len(s), 12)]
    best = [hg[i:i + 12].max() for i in range(0, len(s), 12)]
    assert np.mean([hg[t] == b for t, b in zip(top, best)]) > 0.7
    other = TreeModel.fit_ranker(["a", "b", "c"], x, np.clip(np.rint(5 - 4 * x[:, 0]), 0, 10), sizes)
    tampered = json.loads(AnswerScorer(model, model).to_json())
    tampered["span"]["lightgbm"] = other.lightgbm  # trees of one model, LightGBM text of another
    with pytest.raises(ValueError, match="does not score as its trees do"):
        AnswerScorer.from_json(json.dumps(tampered))
    with pytest.raises(ValueError, match="groups of"):
        TreeModel.fit_ranker(["a", "b", "c"], x, g, sizes[:-1])
    with pytest.raises(ValueError, match="two grades"):
        TreeModel.fit_ranker(["a", "b", "c"], x, np.zeros(len(x)), sizes)


def test_metrics():
    assert char_f1("北京北铃专用汽车有限公司。", "北京北铃专用汽车有限公司") == 1.0
    assert exact_match(" 北京北铃专用汽车有限公司 ", "北京北铃专用汽车有限公司") == 1.0
    assert 0 < char_f1("北京北铃公司", "北京北铃专用汽车有限公司") < 1
    assert char_f1("", "答案") == 0.0 and exact_match("", "") == 0.0


@pytest.mark.slow
def test_scorer_is_plain_json_pinned_in_the_version_and_a_refused_one_says_why(tmp_path, data, tok):
    from answers import Answerer
    from answers.backend import SearchBackend
    from answers.scorer import AnswerScorer, ScorerMissingError, parse_scorer
    from retrieval.parts import version_identity
    from tests.answer_builders import publish

    backend = SearchBackend(data / "index", tokenizer=tok)
    s = backend.scorer
    rec = backend.bundle.manifest["parts"]["answer_scorer"]
    assert rec["provenance"]["encoder_model_id"] == backend.model_id == version_identity(backend.bundle.manifest)[
        "encoder_model_id"]
    text = s.to_json()
    d = json.loads(text)
    assert d["format"] == 2 and d["span"]["kind"] == "trees" and d["span"]["trees"] and d["doc"]["link"] == "logistic"
    assert d["span"]["link"] == "rank" and d["combine"] == "rank" and d["info"]["span_model"] == "ranker"
    again = AnswerScorer.from_json(text)
    x = np.random.default_rng(0).normal(size=(4, len(s.doc.names)))
    y = np.random.default_rng(1).normal(size=(4, len(s.span.names)))
    assert np.allclose(again.doc.predict(x), s.doc.predict(x)) and np.allclose(again.span.predict(y), s.span.predict(y))
    assert np.allclose(again.calibrate([0.5, -2.0]), s.calibrate([0.5, -2.0]))
    # a scorer fitted over another encoder is refused at publication: the version says why, answers say it
    other = json.loads(text)
    other["info"]["provenance"]["encoder_model_id"] = "0123456789abcdef"
    (tmp_path / "other.json").write_text(json.dumps(other), encoding="utf-8")
    d2 = tmp_path / "d2"
    publish(d2, data.parent / "models" / "finetune", tok, tmp_path / "other.json")
    with pytest.raises(ScorerMissingError, match="fitted with another encoder_model_id '0123456789abcdef'"):
        Answerer(d2, tokenizer=tok).answer("职业教育工作现就哪些方面提出意见？", 1)
    with pytest.raises(ValueError, match="not a readable answer scorer"):
        parse_scorer('{"format": 2}')


@pytest.mark.slow
def test_answers_point_into_the_cleaned_text_one_per_document(answerer, data):
    from answers.documents import DocumentStore

    store = DocumentStore(data / "documents_clean")
    res = answerer.answer("职业教育工作现就哪些方面提出意见？", k=3)
    assert res["version"] == "v1" and res["answers"]
    docs = [a["doc_id"] for a in res["answers"]]
    assert len(docs) == len(set(docs)) and len(docs) <= 3
    for a in res["answers"]:
        text, _ = store.get(a["doc_id"])
        assert text[a["start"]:a["end"]] == a["text"]
        assert text[a["passage_start"]:a["passage_end"]] == a["passage"] and a["text"] in a["passage"]
        scorer = answerer.scorer()  # the score is the Platt-scaled raw score (combine "rank": the raw score itself)
        assert scorer.combine == "rank" and a["title"]
        assert a["score"] == pytest.approx(1 / (1 + np.exp(-(scorer.calib_a * a["raw_score"] + scorer.calib_b))))
    assert res["answers"][0]["doc_id"] == "d3" and "产教融合" in res["answers"][0]["text"]
    assert [a["score"] for a in res["answers"]] == sorted((a["score"] for a in res["answers"]), reverse=True)


@pytest.mark.slow
def test_prepare_segments_the_question_once_into_typed_candidates(data, tok):
    from dataclasses import replace as dc_replace

    from answers.answer import AnswerConfig, prepare
    from answers.backend import SearchBackend
    from answers.features import DOC_FEATURES, SPAN_FEATURES, DocCandidates

    calls = []

    def counting(texts):  # the segmenter itself: the answer side's calls and the search's BM25 side's
        calls.append(list(texts))
        return tok[0](texts)

    backend = SearchBackend(data / "index", tokenizer=(counting, tok[1]))
    q = "职业教育工作现就哪些方面提出意见？"
    cfg = dc_replace(AnswerConfig(), max_docs=3)
    prep = prepare(q, backend, backend.store, cfg, extra_doc="d0", cache=None)  # cold: every entry built here
    assert sum(q in texts for texts in calls) == 1 and calls[0] == [q]  # segmented once, before the search
    assert len(calls) == 1 + len(prep.docs)  # the question, then each document's sentences and title
    assert all(isinstance(d, DocCandidates) for d in prep.docs) and len(prep.docs) == 4
    assert [d.extra for d in prep.docs] == [False] * 3 + [True] and prep.docs[-1].doc_id == "d0"
    assert prep.docs[-1].hits == [] and prep.docs[-1].first_hit == cfg.search_k
    assert prep.doc_x.shape == (4, len(DOC_FEATURES)) and prep.span_x.shape == (len(prep.spans), len(SPAN_FEATURES))
    assert [d.first_hit for d in prep.docs[:3]] == sorted(d.first_hit for d in prep.docs[:3])
    for g, d in enumerate(prep.docs):
        assert len(d.bm) == len(d.dense) == len(d.sentences) and d.static.shape[0] == len(d.spans) > 0
        assert [prep.spans[i] for i in np.flatnonzero(prep.span_doc == g)] == d.spans
        assert all(0 <= sp.start < sp.end <= len(d.text) for sp in d.spans) and backend.store.get(d.doc_id)[0] == d.text
        assert all(r.hit.doc_id == d.doc_id and r.rank >= d.first_hit for r in d.hits)


@pytest.mark.slow
@pytest.mark.parametrize("q,k,match", [("", 3, "empty"), ("数" * 1_000_001, 3, "over the limit"),
                                       ("？？！，。", 3, "no letters or digits"), ("数据", 0, "between 1 and"),
                                       ("数据", 21, "between 1 and")])
def test_bad_questions_are_clear_errors(answerer, q, k, match):
    from answers import AnswerInputError

    with pytest.raises(AnswerInputError, match=match):
        answerer.answer(q, k)


def _ask(*args, data=None, input_file=None):
    cmd = [sys.executable, "-m", "flows.ask", *args, "--data-dir", str(data)]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args", [["", "-k", "3"], ["数据", "-k", "0"], ["？？？"], ["数" * 1001]])
def test_ask_cli_refuses_bad_input_before_loading(tmp_path, args):
    res = _ask(*args, data=tmp_path / "none")
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("error:") and len(res.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_ask_cli_batch_and_readable(tmp_path, data):
    f = tmp_path / "q.jsonl"
    with open(f, "wb") as fh:
        fh.write(json.dumps({"qid": "a", "question": "养老托育工作现就哪些方面提出意见？"}, ensure_ascii=False).encode() + b"\n")
        fh.write(b'{"qid": "b", "question": "\xff\xfe"}\n')
        fh.write(json.dumps({"qid": "c", "question": "？？"}).encode() + b"\n")
        fh.write(b"not json\n")
        fh.write(json.dumps({"qid": "e", "question": "乡村振兴第7项要完善什么？"}, ensure_ascii=False).encode() + b"\n")
    res = _ask("--questions", str(f), "--json", data=data)
    assert res.returncode == 0, res.stderr
    lines = [json.loads(x) for x in res.stdout.splitlines()]
    assert [x.get("qid") for x in lines] == ["a", None, "c", None, "e"]
    assert "UTF-8" in lines[1]["error"] and "letters or digits" in lines[2]["error"] and "error" in lines[3]
    for x in (lines[0], lines[4]):
        a = x["answers"][0]
        assert set(a) >= {"text", "score", "doc_id", "title", "url", "start", "end", "passage"}
    assert lines[0]["answers"][0]["doc_id"] == "d5"
    res = _ask("养老托育工作现就哪些方面提出意见？", "-k", "2", data=data)
    assert res.returncode == 0 and "【" in res.stdout and "index v1" in res.stdout


@pytest.mark.slow
def test_page_checks_input_keeps_serving_and_reads_current_per_request(data, answerer):
    from fastapi.testclient import TestClient

    from answers.web import create_app

    before = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}
    c = TestClient(create_app(answerer))
    assert c.get("/").status_code == 200
    bad = [("q=&k=3", "empty"), ("q=" + "a" * 1001 + "&k=3", "over the limit"),  # a bigger body: 413
           ("q=%EF%BC%9F%EF%BC%9F&k=3", "letters or digits"), ("q=%FF%FE&k=3", "UTF-8"), ("q=abc&k=0", "between 1"),
           ("q=abc&k=x", "integer")]
    for body, match in bad:
        r = c.post("/ask", content=body.encode(), headers={"content-type": "application/x-www-form-urlencoded"})
        assert r.status_code == 400 and match in r.text, (body[:30], r.text[-300:])
    r = c.post("/ask", content=b"q=\xff\xfe&k=3", headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 400 and "UTF-8" in r.text
    r = c.post("/ask", data={"q": "职业教育工作现就哪些方面提出意见？", "k": "3"})
    assert r.status_code == 200 and "<mark>" in r.text and "推动职业教育高质量发展" in r.text
    assert 'id="version">v1<' in r.text
    assert c.get("/api/answer", params={"q": "", "k": "3"}).status_code == 400
    # a second version published beside v1: the next request uses it, without a restart
    import shutil

    shutil.copytree(data / "index" / "v1", data / "index" / "v2")
    manifest = data / "index" / "v2" / "manifest.json"  # a version's manifest names that version
    manifest.write_text(json.dumps({**json.loads(manifest.read_text(encoding="utf-8")), "version": "v2"}),
                        encoding="utf-8")
    (data / "index" / "CURRENT").write_text("v2")
    try:
        assert c.get("/api/answer", params={"q": "养老服务体系", "k": "2"}).json()["version"] == "v2"
    finally:
        (data / "index" / "CURRENT").write_text("v1")
        shutil.rmtree(data / "index" / "v2")
    after = {p: p.stat().st_mtime_ns for p in data.rglob("*") if p.is_file()}
    assert {p: t for p, t in after.items() if "CURRENT" not in p.name} == \
        {p: t for p, t in before.items() if "CURRENT" not in p.name}


def test_answer_library_and_its_clis_do_not_import_prefect():
    mods = ["answers", "answers.web", "answers.evaluate", "answers.fit", "ops.answer_page", "flows.ask",
            "flows.serve", "flows.answer_eval"]
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n"
            "    importlib.import_module(m)\n"
            "print(sum(k == 'prefect' or k.startswith('prefect.') for k in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "0"


def test_a_scorer_fitted_on_other_features_is_refused():
    """A scorer file from code that computed other features would score garbage silently: it is refused."""
    from answers.features import DOC_FEATURES, SPAN_FEATURES
    from answers.scorer import AnswerScorer, LinearModel, parse_scorer

    def model(names):
        return LinearModel(list(names), [0.0] * len(names), [1.0] * len(names), [0.1] * len(names), 0.0)

    good = AnswerScorer(model(DOC_FEATURES), model(SPAN_FEATURES))
    assert parse_scorer(good.to_json()).span.names == list(SPAN_FEATURES)
    bad = AnswerScorer(model(DOC_FEATURES), model(SPAN_FEATURES[:-1] + ("novel",)))
    with pytest.raises(ValueError, match=r"span model was fitted on other features.*novel"):
        parse_scorer(bad.to_json())


@pytest.mark.slow
def test_cross_validation_by_document_answers_held_out_questions(data, tok):
    from dataclasses import replace as dc_replace

    from answers.answer import AnswerConfig
    from answers.backend import SearchBackend
    from answers.documents import DocumentStore
    from answers.evaluate import cross_validate
    from answers.fit import build_examples

    backend = SearchBackend(data / "index", tokenizer=tok)
    store = DocumentStore(data / "documents_clean")
    q = questions()
    fit_ex = build_examples(q, backend, store, dc_replace(AnswerConfig(), focus_sentences=0), log=lambda s: None)
    serve_ex = build_examples(q, backend, store, AnswerConfig(), with_gold_doc=False, log=lambda s: None)
    cv = cross_validate(fit_ex, serve_ex, folds=4, seeds=(0,), temperatures=(0.0, 0.25))
    assert set(cv) == {"0.0", "0.25"}
    from answers.evaluate import bm25_sentence_baseline, pool_sentences

    rows = list(q.itertuples(index=False))
    bm25 = bm25_sentence_baseline(rows, pool_sentences(store), backend.tokenize)
    for r in cv.values():  # beside the non-learning baseline on the same questions
        assert r["questions"] == len(q) and r["char_f1"] > bm25["char_f1"], (r, bm25)
    # questions about unseen documents are still answered from the right place more often than not
    assert cv["0.0"]["hit@1"] > 0.5, cv
    with pytest.raises(ValueError, match="same questions"):
        cross_validate(fit_ex, serve_ex[::-1], folds=4, seeds=(0,))
    with pytest.raises(ValueError, match="documents for"):
        cross_validate(fit_ex, serve_ex, folds=9, seeds=(0,))


@pytest.mark.slow
def test_scorer_lists_its_documents_refuses_to_score_them_and_is_refitted_on_every_question(tmp_path, data, tok):
    from dataclasses import replace as dc_replace

    from answers.answer import AnswerConfig
    from answers.backend import SearchBackend
    from answers.documents import DocumentStore
    from answers.evaluate import evaluate_scorer
    from answers.fit import build_examples, fit_scorer
    from answers.scorer import parse_scorer
    from flows.answer_eval import save_scorer

    backend = SearchBackend(data / "index", tokenizer=tok)
    store = DocumentStore(data / "documents_clean")
    q = questions()
    train, test = q[~q["doc_id"].isin(["d6", "d7"])], q[q["doc_id"].isin(["d6", "d7"])]
    fit_cfg = dc_replace(AnswerConfig(), focus_sentences=0)
    tr = build_examples(train, backend, store, fit_cfg, log=lambda s: None)
    scorer = fit_scorer(tr)
    assert scorer.info["fitted_documents"] == [f"d{i}" for i in range(6)]
    row, _ = evaluate_scorer(build_examples(test, backend, store, with_gold_doc=False, log=lambda s: None), scorer)
    assert row["questions"] == len(test)
    with pytest.raises(ValueError, match="fitted on by this scorer"):
        evaluate_scorer(build_examples(train.head(3), backend, store, with_gold_doc=False, log=lambda s: None), scorer)
    more = build_examples(test, backend, store, fit_cfg, log=lambda s: None)
    out = tmp_path / "release"
    saved = save_scorer(str(out), scorer, tr, more, {"seed": 13}, install=False, log=lambda s: None)
    assert saved["fitted_questions"] == len(q) and saved["refit"] and saved["fitted_documents"] == 8
    again = parse_scorer((out / "eval" / "answers" / "scorer.json").read_text(encoding="utf-8"))
    assert again.info["fitted_documents"] == [f"d{i}" for i in range(8)] and again.info["seed"] == 13
    kept = save_scorer(str(tmp_path / "train"), scorer, tr, None, {}, install=False, log=lambda s: None)
    assert kept["fitted_documents"] == 6 and not kept["refit"]


def test_split_by_document_keeps_a_cleaned_document_on_one_side():
    import pandas as pd

    from answers.ncpqa import split_by_document

    q = pd.DataFrame({"qid": [f"q{i}" for i in range(40)], "ext_doc": [f"e{i // 2}" for i in range(40)]})
    plain = split_by_document(q, 0.3, 13)
    assert set(plain) == {"train", "test"} and (q.groupby("ext_doc").apply(lambda g: plain[g.index].nunique()) == 1).all()
    # two shared documents on different sides that cleaning merged into one (d0): the test one moves to train
    test_doc = q.loc[plain == "test", "ext_doc"].iloc[0]
    train_doc = q.loc[plain == "train", "ext_doc"].iloc[0]
    q["doc_id"] = [("d0" if e in (test_doc, train_doc) else f"d-{e}") if i != 39 else float("nan")
                   for i, e in enumerate(q["ext_doc"])]
    q.loc[q.index[q["ext_doc"] == test_doc][1], "doc_id"] = float("nan")  # not located: moves with its document
    split = split_by_document(q, 0.3, 13)
    assert (split[q["ext_doc"] == test_doc] == "train").all() and (q["ext_doc"] == test_doc).sum() == 2
    assert (split[q["ext_doc"] != test_doc] == plain[q["ext_doc"] != test_doc]).all()
    assert not set(q.loc[split == "test", "doc_id"].dropna()) & set(q.loc[split == "train", "doc_id"].dropna())
    assert split_by_document(q.iloc[:0], 0.3, 13).empty


def test_find_span_compares_as_the_answer_metrics_do():
    """Cleaning turns punctuation full-width or half-width and drops spaces: the gold answer is still found,
    at its first and last counted character, the occurrence nearest the original offset."""
    from answers.metrics import normalize
    from answers.ncpqa import find_span

    text = "来信地址：北京市门头沟区新桥大街12号；信访办公室收；邮政编码：102300。另：新桥大街12号；信访办公室收。"
    s, e = find_span(text, "新桥大街12号;信访办公室收;", 10)
    assert text[s:e] == "新桥大街12号；信访办公室收" and s == text.index("新桥")
    s2, _ = find_span(text, " 新桥大街 12号 ; 信访办公室收", 60)
    assert s2 == text.rindex("新桥")
    assert normalize(text[s:e]) == normalize("新桥大街12号;信访办公室收;")
    assert find_span(text, "。；", 0) == (-1, -1) and find_span(text, "上海", 0) == (-1, -1)
    assert find_span("Ｗｗｗ　ＡＢＣ", "abc", 0) == (4, 7)  # NFKC and case as the metrics read them


def test_locate_gold_follows_the_duplicate_lineage_of_cleaning(tmp_path):
    """A question about a document that cleaning dropped as a duplicate gets the kept document as its gold,
    read from the data dir's ``rejects`` (as the clean stage writes them), even for a short answer found in
    several documents."""
    import json

    import pandas as pd

    from answers.documents import DocumentStore
    from answers.ncpqa import duplicate_targets, locate_gold
    from corpus import stages as S
    from corpus.clean import CleanConfig

    body = "各区要落实减免政策，小微企业房租减免25%，期限不超过5个月，请各单位认真执行。"
    docs = [{"id": "a", "title": "甲区通知", "text": "甲区通知。" + body},
            {"id": "b", "title": "甲区通知", "text": "甲区通知。" + body},
            {"id": "c", "title": "乙区通知", "text": "乙区通知。乙区对小微企业房租减免25%，同时提供贷款贴息支持，具体以各区公告为准。"}]
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in docs), encoding="utf-8")
    S.import_documents(src, tmp_path / "documents", columns={"id_column": "id"})
    S.clean_stage(tmp_path / "documents", tmp_path / "documents_clean", tmp_path / "rejects", CleanConfig())
    store = DocumentStore(tmp_path / "documents_clean")
    dup = duplicate_targets(tmp_path)
    kept = {m["external_id"]: d for d, m in store.meta.items()}
    assert set(kept) == {"a", "c"} and dup == {"b": kept["a"]}
    q = pd.DataFrame({"qid": ["1", "2"], "question": ["减免多少？", "期限多长？"], "answer": ["25%", "期限不超过5个月，请各单位认真执行。"],
                      "ext_doc": ["b", "b"], "answer_start": [26, 32], "answer_end": [29, 39]})
    got = locate_gold(q, store, dup)
    assert got["doc_id"].tolist() == [kept["a"], kept["a"]] and got["gold_via"].tolist() == ["duplicate"] * 2
    text = store.text[kept["a"]]
    assert text[got["gold_start"][0]:got["gold_end"][0]] == "25" and text[got["gold_start"][1]:got["gold_end"][1]] == "期限不超过5个月，请各单位认真执行"
    without = locate_gold(q, store)  # without the lineage: a long answer in one kept document places it, a 3-char one does not
    assert without["gold_via"].tolist() == ["none", "duplicate"] and without["gold_start"][0] == -1
    assert duplicate_targets(tmp_path / "nowhere") == {}


def test_answers_are_read_with_the_settings_pinned_in_the_version(data, tok, tmp_path):
    """The reader record's settings (answers.answer.READER_SETTINGS) are what a version is answered with; an
    AnswerConfig given to the Answerer wins over them; malformed pinned values are ignored."""
    import shutil

    from answers import Answerer
    from answers.answer import AnswerConfig

    copy = tmp_path / "data"
    shutil.copytree(data, copy, symlinks=True)
    manifest = next((copy / "index").glob("v*/manifest.json"))
    m = json.loads(manifest.read_text())
    m["parts"]["answer_scorer"]["settings"].update(passage_chars=4, max_docs="7")
    manifest.write_text(json.dumps(m, ensure_ascii=False))
    pinned = Answerer(copy, tokenizer=tok)
    assert pinned.reader_config().passage_chars == 4 and pinned.reader_config().max_docs == AnswerConfig().max_docs
    q = "职业教育工作现就哪些方面提出意见？"
    short = pinned.answer(q, k=1)["answers"][0]
    assert len(short["passage"]) <= len(short["text"]) + 8  # 4 chars each side at most
    wide = Answerer(copy, tokenizer=tok, cfg=AnswerConfig(passage_chars=60)).answer(q, k=1)["answers"][0]
    assert wide["text"] == short["text"] and len(wide["passage"]) > len(short["passage"])
