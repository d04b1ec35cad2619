"""Policy lookups on the serving side (SPEC §2 metadata, §7): a 文号 in any spelling finds its document, ``《X》第三条``
and ``国发〔2019〕5号第三条`` that article's text (retrieval.lookup, flows.lookup, GET /api/lookup behind the service's
key gate), same-titled regulations of two provinces both with their jurisdiction, not-found and hostile queries
as clean errors. The data dir is built as tests/test_scope_serving.py builds its own (policy records computed from
documents_clean), with documents that carry 文号 and articles."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from tests.retrieval_builders import policy_data_dir
from tests.test_scope_serving import docs as scope_docs

ARTICLES = ("第一条　为了规范{p}数据安全管理，制定本办法。\n"
            "第二条　本办法适用于{p}的数据处理活动；依照本办法第四条另有规定的除外。\n"
            "第三条　数据处理者应当建立数据安全管理制度，落实数据安全保护责任。\n"
            "第四条　违反本办法规定的，由有关主管部门责令改正。\n"
            "第五条　本办法自2020年1月1日起施行。")
ESTATE = ("第一条　为了规范{p}物业管理活动，制定本条例。\n第二条　本条例适用于{p}行政区域内的物业管理。\n"
          "第三条　{p}物业服务企业应当按照合同约定提供服务。\n第四条　本条例自2021年1月1日起施行。")


def docs() -> pd.DataFrame:
    """The scoped-search documents plus a 国发 document with articles, a notice issuing 办法 with articles, and
    two provinces' regulations titled exactly 物业管理条例."""
    rows = [
        {"doc_id": "gw0", "title": "数据安全管理办法", "text": ARTICLES.format(p="全国"), "doc_number": "国发〔2019〕5号",
         "issuer": "国务院", "level": "行政法规", "region": None, "source": "国务院", "pubtime": "2019-03-01",
         "external_id": "GF-2019-5"},
        {"doc_id": "gw1", "title": "国务院办公厅关于印发《政务数据共享管理办法》的通知", "doc_number": "国办发〔2020〕12号",
         "text": "各省、自治区、直辖市人民政府：现将《政务数据共享管理办法》印发给你们，请认真贯彻执行。\n"
                 + ARTICLES.format(p="政务"), "issuer": "国务院办公厅", "level": "规范性文件", "region": None,
         "source": "国务院", "pubtime": "2020-05-01", "external_id": "GBF-2020-12"},
    ]
    for prefix, prov in (("zjw", "浙江省"), ("jsw", "江苏省")):
        rows.append({"doc_id": prefix, "title": "物业管理条例", "text": ESTATE.format(p=prov), "doc_number": None,
                     "issuer": f"{prov}人民代表大会常务委员会", "level": "地方性法规", "region": prov, "source": prov,
                     "pubtime": "2021-01-01", "external_id": f"{prefix}-estate"})
    extra = pd.DataFrame(rows).assign(url=None)
    extra["n_chars"] = extra["text"].str.len()
    base = scope_docs().assign(doc_number=None, external_id=None)
    return pd.concat([base, extra], ignore_index=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data dir whose index (v1) holds the texts and the policy records part (computed from documents_clean)."""
    d, res = policy_data_dir(tmp_path_factory.mktemp("lookup") / "data", docs())
    assert res["serving_parts"]["policy_records"]["rows"] == 10
    return d


@pytest.fixture(scope="module")
def lookups(data):
    from retrieval.lookup import Lookups

    return Lookups(data / "index")


def run(capsys, *argv) -> tuple[int, str, str]:
    from flows.lookup import main

    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("spelling", ["国发〔2019〕5号", "国发[2019]5号", "国发（2019）第5号", "国发【２０１９】０５号"])
def test_a_doc_number_in_any_spelling_finds_its_document(lookups, spelling):
    r = lookups.lookup(spelling)
    assert r["found"] and r["reason"] is None and r["total"] == 1
    (d,) = r["documents"]
    assert d["doc_id"] == "gw0" and d["external_id"] == "GF-2019-5" and d["title"] == "数据安全管理办法"
    assert d["match"] == "doc_number" and d["doc_number"] == "国发〔2019〕5号" and d["issuer"] == "国务院"
    assert d["jurisdiction"]["code"] == "000000" and "article" not in d
    assert r["reference"] == {"title": None, "doc_number": "国发〔2019〕5号", "article": None}


@pytest.mark.parametrize("query", ["《数据安全管理办法》第三条", "国发〔2019〕5号第三条", "《 数据安全管理办法 》第3条",
                                   "数据安全管理办法第三条"])
def test_an_article_by_title_or_doc_number(lookups, query):
    r = lookups.lookup(query)
    assert r["found"], r
    (d,) = r["documents"]
    a = d["article"]
    assert d["doc_id"] == "gw0" and a["number"] == 3 and a["label"] == "第三条"
    assert a["text"].startswith("第三条") and "第四条" not in a["text"] and "数据安全管理制度" in a["text"]
    text = pd.read_parquet(next((lookups.root / "v1").glob("texts.parquet")))
    full = text.set_index("doc_id").loc["gw0", "text"]
    assert full[a["start"]:a["end"]] == a["text"]


def test_a_cross_reference_is_no_article_heading(lookups):
    """第二条 cites 第四条 inside its sentence: 第二条's text runs to the real 第三条."""
    a = lookups.lookup("《数据安全管理办法》第二条")["documents"][0]["article"]
    assert a["text"].startswith("第二条") and "依照本办法第四条" in a["text"] and "第三条" not in a["text"]


def test_a_notice_issuing_the_title_is_found(lookups):
    r = lookups.lookup("《政务数据共享管理办法》第五条")
    (d,) = r["documents"]
    assert r["found"] and d["doc_id"] == "gw1" and d["match"] == "issued"
    assert d["article"]["text"].startswith("第五条") and d["doc_number"] == "国办发〔2020〕12号"


def test_same_titled_documents_are_all_returned_with_their_jurisdiction(lookups):
    r = lookups.lookup("《物业管理条例》第三条")
    assert r["found"] and r["total"] == 2
    by_id = {d["doc_id"]: d for d in r["documents"]}
    assert set(by_id) == {"zjw", "jsw"} and {d["match"] for d in by_id.values()} == {"title"}
    assert by_id["zjw"]["jurisdiction"]["name"] == "浙江省" and by_id["jsw"]["jurisdiction"]["name"] == "江苏省"
    assert "浙江省物业服务企业" in by_id["zjw"]["article"]["text"]
    assert "江苏省物业服务企业" in by_id["jsw"]["article"]["text"]
    # the name without the place: both provinces' 公共数据条例; the place named: that province's only
    r = lookups.lookup("《公共数据条例》")
    assert {d["doc_id"] for d in r["documents"]} == {"zj0", "js0"} and {d["match"] for d in r["documents"]} == {"name"}
    assert {d["jurisdiction"]["name"] for d in r["documents"]} == {"浙江省", "江苏省"}
    assert [d["doc_id"] for d in lookups.lookup("《浙江省公共数据条例》")["documents"]] == ["zj0"]
    assert [d["doc_id"] for d in lookups.lookup("《浙江公共数据条例》")["documents"]] == ["zj0"]


def test_unknown_doc_number_title_or_article_is_not_found(lookups):
    r = lookups.lookup("国发〔2018〕99号")
    assert not r["found"] and r["documents"] == [] and "国发〔2018〕99号" in r["reason"] and "v1" in r["reason"]
    r = lookups.lookup("《不存在的条例》第三条")
    assert not r["found"] and r["documents"] == [] and "不存在的条例" in r["reason"]
    r = lookups.lookup("《数据安全管理办法》第九十九条")
    assert not r["found"] and r["documents"][0]["article"] is None and "第九十九条" in r["reason"]


@pytest.mark.parametrize("query", ["", "   ", "x" * 10_000, "《数据安全管理办法》\x00第三条", "国发\u202e〔2019〕5号",
                                   "第三条", "《》", "《数据安全管理办法》第0条", "a\nb"])
def test_hostile_queries_raise_a_clean_input_error(lookups, query):
    from retrieval.lookup import LookupInputError

    with pytest.raises(LookupInputError) as exc:
        lookups.lookup(query)
    assert len(str(exc.value)) < 200


def test_the_library_takes_a_loaded_serving_bundle_too(data):
    from retrieval.bundle import load_bundle
    from retrieval.lookup import Lookups, lookup

    r = lookup(load_bundle(data / "index"), "国发[2019]5号第三条")
    assert r == Lookups(data / "index").lookup("国发[2019]5号第三条")


def test_a_version_without_the_texts_part_reassembles_texts_from_its_chunks(data):
    from retrieval.lookup import Catalog, chunk_texts, open_version

    v = open_version(data / "index")
    assert chunk_texts(v.chunks)["gw0"].replace(" ", "").replace("\n", "") == \
        v.texts.set_index("doc_id").loc["gw0", "text"].replace(" ", "").replace("\n", "")
    v.manifest = {**v.manifest, "parts": {k: r for k, r in v.manifest["parts"].items() if k != "texts"}}
    cat = Catalog(v)
    assert cat.text_source == "chunks"
    a = cat.lookup("国发〔2019〕5号第三条")["documents"][0]["article"]
    assert a["text"].startswith("第三条") and "第四条" not in a["text"]


def test_cli_found_not_found_and_bad_input(data, capsys):
    code, out, err = run(capsys, "--data-dir", str(data), "国发[2019]5号第三条", "--json")
    assert code == 0 and err == ""
    r = json.loads(out)
    assert r["found"] and r["documents"][0]["article"]["text"].startswith("第三条")
    code, out, err = run(capsys, "--data-dir", str(data), "《物业管理条例》")
    assert code == 0 and "zjw" in out and "浙江省" in out and "jsw" in out and "江苏省" in out
    code, out, err = run(capsys, "--data-dir", str(data), "《不存在的条例》")
    assert code == 1 and out == "" and err.startswith("not found:") and "不存在的条例" in err
    code, out, err = run(capsys, "--data-dir", str(data), "《不存在的条例》", "--json")
    assert code == 1 and json.loads(out)["found"] is False
    for bad in ("x" * 10_000, "第三条", "《数据安全管理办法》\x07第三条", ""):
        code, out, err = run(capsys, "--data-dir", str(data), bad)
        assert code == 2 and out == "" and err.startswith("error:") and err.count("\n") == 1, bad
    code, out, err = run(capsys, "--data-dir", str(data.parent / "nowhere"), "国发〔2019〕5号")
    assert code == 2 and err.startswith("error:") and "Traceback" not in err


def test_api_lookup_returns_the_same_json_behind_the_key_gate(data, lookups):
    from fastapi.testclient import TestClient

    from answers import Answerer
    from answers.service.app import ServiceConfig, service_app
    from answers.web import create_app

    client = TestClient(create_app(Answerer(data)))
    for q in ("国发〔2019〕5号第三条", "《物业管理条例》"):
        r = client.get("/api/lookup", params={"q": q})
        assert r.status_code == 200 and r.json() == lookups.lookup(q)
        assert r.headers["x-content-type-options"] == "nosniff"
    r = client.get("/api/lookup", params={"q": "《不存在的条例》"})
    assert r.status_code == 404 and r.json() == lookups.lookup("《不存在的条例》")
    for bad in ("x" * 10_000, "", "第三条", "国发\x00〔2019〕5号"):
        r = client.get("/api/lookup", params={"q": bad})
        assert r.status_code == 400 and set(r.json()) == {"error"}, bad
    assert client.get("/api/lookup").status_code == 400
    gated = TestClient(service_app(Answerer(data), ServiceConfig(str(data), require_keys=True, rate_per_key="",
                                                                 rate_per_address="")))
    assert gated.get("/api/lookup", params={"q": "国发〔2019〕5号"}).status_code == 401
