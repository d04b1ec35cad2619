"""Policies as policies (SPEC §7 search filters): the policy records pinned in each index version as a serving
part (retrieval.policy_records), and the scoped search of flows.search over them (retrieval.scoped): filters, the scope
inferred from the question, the batch format, hostile filters, a version without the part."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from retrieval.chunks import ChunkConfig
from tests.retrieval_builders import policy_data_dir, save_tiny_policybert, write_clean

CHUNKS = ChunkConfig(max_chars=120, overlap=30)
BODY = ("为了加强{p}公共数据管理，促进公共数据开放和利用，保障数据安全，根据有关法律、行政法规，结合本省实际，制定本条例。"
        "公共数据主管部门负责统筹公共数据的收集、归集、共享和开放工作。"
        "县级以上人民政府应当建立公共数据平台，推动公共数据授权运营。")
ELDER = "为了规范{p}养老服务，发展居家社区养老和机构养老，保障老年人合法权益，制定本条例。养老服务设施应当统筹规划建设。"


def docs() -> pd.DataFrame:
    rows = []
    for prefix, prov in (("zj", "浙江省"), ("js", "江苏省")):
        for n, (name, body) in enumerate((("公共数据条例", BODY), ("养老服务条例", ELDER))):
            text = body.format(p=prov)
            rows.append({"doc_id": f"{prefix}{n}", "text": text, "title": f"{prov}{name}", "region": prov,
                         "issuer": f"{prov}人民代表大会常务委员会", "level": "地方性法规",
                         "source": prov, "url": None, "pubtime": "2022-01-21", "n_chars": len(text)})
    text = "为充分发挥公共数据要素作用，加快构建数据基础制度，现提出如下意见。推进公共数据开放共享和授权运营。"
    rows.append({"doc_id": "cn0", "text": text, "title": "国务院关于构建数据基础制度的意见", "region": None,
                 "issuer": "国务院", "level": "规范性文件", "source": "国务院", "url": None, "pubtime": "2022-12-02",
                 "n_chars": len(text)})
    text = "公共数据开放平台的使用说明。用户可以检索公共数据目录，申请公共数据的开放和利用。"
    rows.append({"doc_id": "un0", "text": text, "title": "公共数据开放平台使用说明", "region": None, "issuer": None,
                 "level": None, "source": "门户", "url": None, "pubtime": None, "n_chars": len(text)})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data dir whose index (v1) was published with the policy records part, computed from documents_clean
    (no policy stage ran)."""
    d, res = policy_data_dir(tmp_path_factory.mktemp("scoped") / "data", docs())
    assert res["serving_parts"]["policy_records"]["rows"] == 6
    return d


def run_search(capsys, *argv) -> tuple[int, str, str]:
    from flows.search import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_part_is_published_checked_and_loaded(data):
    from retrieval.policy_records import POLICY_PART
    from retrieval.bundle import load_bundle
    from retrieval.parts import PartError

    b = load_bundle(data / "index")
    assert "policy_records" in b.check_parts()
    recs = b.load(POLICY_PART)
    assert set(recs) == {"zj0", "zj1", "js0", "js1", "cn0", "un0"}
    assert recs["zj0"]["jurisdiction_name"] == "浙江省" and recs["js0"]["jurisdiction_name"] == "江苏省"
    assert recs["zj0"]["published_date"] == "2022-01-21"
    rec = b.manifest["parts"]["policy_records"]
    assert rec["source"] == {"computed": "documents_clean"} and len(rec["sha256"]) == 64
    (b.folder / "policy-records.jsonl").write_text(json.dumps({"doc_id": "zj0"}) + "\n", encoding="utf-8")
    try:
        with pytest.raises(PartError, match="policy_records"):
            load_bundle(data / "index").load(POLICY_PART)
    finally:  # restore the published bytes for the other tests
        from retrieval.policy_records import records_text

        (b.folder / "policy-records.jsonl").write_text(records_text(list(recs.values())), encoding="utf-8")
    assert load_bundle(data / "index").check_parts()


def test_the_fit_reads_the_policy_records_table_when_there_is_one(tmp_path, data):
    from retrieval.policy_records import records_fit, table_records
    from policy.stage import policy_records_stage

    policy_records_stage(data / "documents_clean", tmp_path / "policy_records", registry=None, as_of="2026-01-01")
    part = records_fit({"clean_dir": data / "documents_clean", "policy_dir": tmp_path / "policy_records"})
    text, fields = part.fit(data / "index", "v1")
    rows = [json.loads(x) for x in text.splitlines()]
    assert [r["doc_id"] for r in rows] == sorted(["zj0", "zj1", "js0", "js1", "cn0", "un0"])
    assert "table" in fields["source"] and fields["rows"] == 6
    assert rows == sorted(table_records(tmp_path / "policy_records", {r["doc_id"] for r in rows}),
                          key=lambda r: r["doc_id"])


def test_the_index_stage_reads_the_policy_records_table():
    from retrieval.contracts import INDEX

    assert "policy_records" in INDEX.reads and INDEX.args["policy_dir"] == "policy_records"


def test_batch_scoped_search(data, tmp_path, capsys):
    qs = tmp_path / "q.jsonl"
    lines = [{"qid": "a", "question": "公共数据条例", "region": "浙江省"},
             {"id": "b", "query": "浙江省公共数据条例的规定"},
             {"qid": "c", "question": "公共数据条例"},
             {"qid": "d", "question": "公共数据条例", "region": "火星省"},
             {"qid": "e", "question": "公共数据条例", "issuer": "x" * 10_000},
             {"qid": "f", "question": "公共数据条例", "from": "2022-13-45"},
             {"qid": "g", "question": "公共数据条例", "level": "地方性法规", "region": "江苏省", "in_force": True}]
    qs.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\nnot json\n", encoding="utf-8")
    code, out, err = run_search(capsys, "--questions", str(qs), "--data-dir", str(data), "--json", "-k", "8")
    assert code == 0 and "Traceback" not in err
    rows = [json.loads(x) for x in out.splitlines()]
    assert [r["qid"] for r in rows] == ["a", "b", "c", "d", "e", "f", "g", None]
    a, b, c = rows[0], rows[1], rows[2]
    # explicit region: never the other province's same-named regulation, nor a document of unknown place
    assert a["hits"] and {h["doc_id"] for h in a["hits"]} <= {"zj0", "zj1", "cn0"}
    assert a["scope"]["label"].startswith("范围：浙江省") and a["scope"]["inferred"] is False
    assert a["scope"]["region"] == ["330000"]
    hit = next(h for h in a["hits"] if h["doc_id"] == "zj0")
    assert hit["jurisdiction"] == {"code": "330000", "name": "浙江省", "level": "province"}
    assert hit["issuer"] and hit["level"] == "地方性法规" and hit["published_date"] == "2022-01-21"
    assert {"validity", "doc_number", "effective_date", "external_id", "score", "text"} <= set(hit)
    # inferred from the question: the other province excluded, a document of unknown place kept
    assert b["scope"]["inferred"] is True and "浙江省" in b["scope"]["label"]
    assert b["hits"] and not {h["doc_id"] for h in b["hits"]} & {"js0", "js1"}
    # no place named: unscoped, both provinces reachable
    assert c["scope"]["label"] == "范围：不限" and {"zj0", "js0"} <= {h["doc_id"] for h in c["hits"]}
    for r in rows[3:6]:  # hostile filters: an error line each, the batch goes on
        assert set(r) == {"qid", "line", "error"} and len(r["error"]) < 400
    assert "region" in rows[3]["error"] and "issuer" in rows[4]["error"] and "from" in rows[5]["error"]
    assert all(h["doc_id"] in {"js0", "js1"} for h in rows[6]["hits"])  # 现行有效 unknown -> maybe none
    assert "error" in rows[7]


def test_single_query_filters_and_hostile_flags(data, capsys):
    code, out, err = run_search(capsys, "公共数据条例", "--data-dir", str(data), "--region", "江苏省", "-k", "8")
    assert code == 0
    ids = [json.loads(x)["doc_id"] for x in out.splitlines()]
    assert ids and set(ids) <= {"js0", "js1", "cn0"} and "范围：江苏省" in err
    code, out, err = run_search(capsys, "公共数据条例", "--data-dir", str(data), "--json", "--no-infer-scope")
    assert code == 0 and json.loads(out)["scope"]["label"] == "范围：不限"
    for bad in (["--region", "火星省"], ["--issuer", "x" * 10_000], ["--to", "yesterday"],
                ["--from", "2023", "--to", "2020"]):
        code, out, err = run_search(capsys, "公共数据条例", "--data-dir", str(data), *bad)
        assert code == 2 and out == "" and err.startswith("error:") and err.count("\n") == 1, bad
        assert "Traceback" not in err


def test_a_version_without_the_part_searches_unscoped_and_refuses_filters(tmp_path, capsys):
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_stage

    d = tmp_path / "data"
    clean = write_clean(docs(), d / "documents_clean")
    index_stage(clean, save_tiny_policybert(tmp_path / "ckpt", seed=5), d / "index", CHUNKS,
                tokenizer=make_tokenizer("auto"))
    code, out, err = run_search(capsys, "浙江省公共数据条例", "--data-dir", str(d), "--json")
    assert code == 0 and json.loads(out)["hits"] and json.loads(out)["scope"]["label"] == "范围：不限"
    code, out, err = run_search(capsys, "公共数据条例", "--data-dir", str(d), "--region", "浙江省")
    assert code == 2 and "policy_records" in err and err.startswith("error:")


@pytest.mark.slow
def test_answers_flows_ask_and_the_api_take_the_same_filters(data, tmp_path, capsys):
    """Answers (Answerer, flows.ask's batch, GET /api/answer) scoped the same way, the scope in the result."""
    from fastapi.testclient import TestClient

    from answers.answer import AnswerInputError, Answerer
    from answers.scorer import parse_scorer
    from answers.web import create_app
    from flows.ask import _batch
    from retrieval.sparse import make_tokenizer
    from tests.answer_builders import scorer_file

    tok = make_tokenizer("auto")
    scorer = parse_scorer(scorer_file(tmp_path, tok).read_text(encoding="utf-8"), "test scorer")
    answerer = Answerer(data, scorer=scorer, tokenizer=tok)
    res = answerer.answer("公共数据条例对公共数据开放有何规定？", 5, filters={"region": "浙江省"})
    assert res["answers"] and {a["doc_id"] for a in res["answers"]} <= {"zj0", "zj1", "cn0"}
    assert res["scope"]["label"].startswith("范围：浙江省") and res["scope"]["inferred"] is False
    inferred = answerer.answer("江苏省公共数据条例对公共数据开放有何规定？", 5, infer_scope=True)
    assert inferred["scope"]["inferred"] and not {a["doc_id"] for a in inferred["answers"]} & {"zj0", "zj1"}
    assert "scope" not in answerer.answer("公共数据条例对公共数据开放有何规定？", 5)  # the library's default
    with pytest.raises(AnswerInputError, match="region"):
        answerer.answer("公共数据条例？", 3, filters={"region": "火星省"})

    qs = tmp_path / "ask.jsonl"
    qs.write_text(json.dumps({"qid": "x", "question": "公共数据条例有何规定？", "region": "江苏省"}, ensure_ascii=False)
                  + "\n" + json.dumps({"qid": "y", "question": "公共数据条例？", "to": "never"}) + "\n", encoding="utf-8")
    assert _batch(answerer, str(qs), 3, {}, True) == 0
    x, y = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert x["scope"]["label"].startswith("范围：江苏省") and {a["doc_id"] for a in x["answers"]} <= {"js0", "js1", "cn0"}
    assert y["qid"] == "y" and "to" in y["error"]

    client = TestClient(create_app(answerer))
    r = client.get("/api/answer", params={"q": "公共数据条例有何规定？", "region": "浙江省", "k": "3"})
    assert r.status_code == 200 and r.json()["scope"]["label"].startswith("范围：浙江省")
    assert {a["doc_id"] for a in r.json()["answers"]} <= {"zj0", "zj1", "cn0"}
    r = client.get("/api/answer", params={"q": "浙江省公共数据条例有何规定？", "infer_scope": "0"})
    assert r.status_code == 200 and "scope" not in r.json()
    for bad in ({"region": "火星省"}, {"issuer": "x" * 10_000}, {"from": "2022-13-45"}):
        r = client.get("/api/answer", params={"q": "公共数据条例有何规定？", **bad})
        assert r.status_code == 400 and next(iter(bad)) in r.json()["error"], bad
