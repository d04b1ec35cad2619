"""Policies as policies on the answer page (SPEC §2 metadata, §7 search filters, §9): each source's jurisdiction,
level, 文号, date and validity; the form's facets (place, level, year range, in force) wired to the scope fields of
/api/answer, the scope shown with the answer, facet counts of the sources shown; typed links (implements /
repeals / repealed by / cites) beside the related policies; the allowed-documents cache per scope.

The version is built as tests/test_scope_serving.py builds it: two provinces with same-named regulations, a
national opinion, and a document the 浙江省 regulation repeals (``《…》同时废止``)."""
from __future__ import annotations

import html
import re

import pandas as pd
import pytest

from tests.retrieval_builders import policy_data_dir

BODY = ("为了加强{p}公共数据管理，促进公共数据开放和利用，保障数据安全，根据《中华人民共和国数据安全法》等法律、行政法规，"
        "结合本省实际，制定本条例。公共数据主管部门负责统筹公共数据的收集、归集、共享和开放工作。"
        "县级以上人民政府应当建立公共数据平台，推动公共数据授权运营。")
ZJ_TAIL = ("为实施《国务院关于构建数据基础制度的意见》，推进公共数据开放。"
           "本条例自2022年3月1日起施行，《浙江省公共数据开放与安全管理暂行办法》同时废止。")
ELDER = "为了规范{p}养老服务，发展居家社区养老和机构养老，保障老年人合法权益，制定本条例。养老服务设施应当统筹规划建设。"
OLD = "为了规范公共数据开放与安全管理，推动公共数据开放利用，制定本办法。公共数据开放主体应当编制公共数据开放目录。"
QUESTION = "公共数据条例对公共数据开放有何规定？"


def _row(doc_id, title, text, region, issuer, level, pubtime, doc_number=None, validity=None) -> dict:
    return {"doc_id": doc_id, "text": text, "title": title, "region": region, "issuer": issuer, "level": level,
            "source": region or "门户", "url": f"https://www.example.gov.cn/{doc_id}.html", "pubtime": pubtime,
            "doc_number": doc_number, "validity": validity, "n_chars": len(text)}


def docs() -> pd.DataFrame:
    """Same-named regulations of two provinces, a national opinion, and 浙江省's repealed 暂行办法."""
    rows = []
    for prefix, prov in (("zj", "浙江省"), ("js", "江苏省")):
        people = f"{prov}人民代表大会常务委员会"
        body = BODY.format(p=prov) + (ZJ_TAIL if prefix == "zj" else "")
        rows.append(_row(f"{prefix}0", f"{prov}公共数据条例", body, prov, people, "地方性法规", "2022-01-21",
                         f"{'浙' if prefix == 'zj' else '苏'}人大常〔2022〕{71 if prefix == 'zj' else 12}号", "有效"))
        rows.append(_row(f"{prefix}1", f"{prov}养老服务条例", ELDER.format(p=prov), prov, people, "地方性法规",
                         "2021-09-29", None, "有效"))
    rows.append(_row("zjold", "浙江省公共数据开放与安全管理暂行办法", OLD, "浙江省", "浙江省人民政府", "地方政府规章",
                     "2020-06-12", "浙政令〔2020〕381号"))
    text = "为充分发挥公共数据要素作用，加快构建数据基础制度，现提出如下意见。推进公共数据开放共享和授权运营。"
    rows.append(_row("cn0", "国务院关于构建数据基础制度的意见", text, None, "国务院", "规范性文件", "2021-12-02",
                     "国发〔2021〕1号", "有效"))
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A data dir whose index (v1) holds the policy records part (computed from documents_clean)."""
    d, res = policy_data_dir(tmp_path_factory.mktemp("policy-page") / "data", docs())
    assert res["serving_parts"]["policy_records"]["rows"] == 6
    return d


@pytest.fixture(scope="module")
def client(data, tmp_path_factory):
    from fastapi.testclient import TestClient

    from answers.answer import Answerer
    from answers.scorer import parse_scorer
    from answers.web import create_app
    from retrieval.sparse import make_tokenizer
    from tests.answer_builders import scorer_file

    tok = make_tokenizer("auto")
    root = tmp_path_factory.mktemp("policy-page-scorer")
    scorer = parse_scorer(scorer_file(root, tok).read_text(encoding="utf-8"), "test scorer")
    return TestClient(create_app(Answerer(data, scorer=scorer, tokenizer=tok)), raise_server_exceptions=False)


def _section(page: str, start: str, end: str) -> str:
    i = page.find(start)
    return page[i:page.find(end, i)] if i >= 0 else ""


def _answers_html(page: str) -> str:
    """The answer block and the other documents' list (sources, their fields and links), not the form."""
    return _section(page, '<div class="answer" id="answer">', "</div>\n") + _section(page, '<ol id="others">', "</ol>")


def test_policy_records_links_and_the_repeal(data):
    """The 同时废止《…》 clause resolves to the repealed document, which is 废止 and knows who repealed it."""
    from retrieval.bundle import load_bundle
    from retrieval.policy_records import POLICY_PART
    from retrieval.scoped import policy_links

    b = load_bundle(data / "index")
    recs = b.load(POLICY_PART)
    assert recs["zjold"]["validity"] == "废止" and recs["zj0"]["validity"] == "有效"
    links = {(x["type"], x["doc_id"]) for x in policy_links(b, "zj0")}
    assert {("repeals", "zjold"), ("implements", "cn0"), ("cites", None)} <= links
    assert policy_links(b, "zjold") == [{"type": "repealed_by", "title": None, "doc_id": "zj0"}]
    assert policy_links(b, "js1") == [] and recs.levels == ("地方性法规", "地方政府规章", "规范性文件")


def test_policy_fields_are_escaped_and_absent_ones_omitted():
    from answers.related_view import render_links
    from answers.render import facet_counts, policy_html, source_html

    unknown = {"jurisdiction": {"code": None, "name": None, "level": None}, "level": "其他", "issuer": None,
               "doc_number": None, "written_date": None, "published_date": None, "effective_date": "2023-05-01",
               "expiry_date": None, "validity": "未知", "links": []}
    assert policy_html(unknown) == '<span class="policy"><span class="date">施行 2023-05-01</span></span>'
    assert policy_html({**unknown, "effective_date": None}) == "" and policy_html(None) == ""
    hostile = {**unknown, "doc_number": "<script>alert(1)</script>", "validity": "废止"}
    out = policy_html(hostile)
    assert "<script>" not in out and "&lt;script&gt;" in out and "废止" in out and "None" not in out
    a = {"text": "x", "score": 0.5, "doc_id": "d", "title": "t", "url": None, "source": None, "pubtime": None,
         "start": 0, "end": 1, "passage": "x", "passage_start": 0}
    assert source_html(a) == source_html({**a, "policy": None}) and "policy" not in source_html(a)
    counts = facet_counts([{**a, "policy": unknown}, {**a, "policy": unknown}, {**a, "doc_id": "e", "policy": hostile}])
    assert counts["place"] == [{"value": "未知", "count": 2, "filter": None}]
    assert counts["year"] == [{"value": "2023", "count": 2, "filter": {"from": "2023", "to": "2023"}}]
    assert facet_counts([a]) == {}
    links = render_links([{"type": "cites", "title": "《x》<b>", "doc_id": None, "url": "javascript:alert(1)"}])
    assert "<b>" not in links and "<a " not in links and "库外" in links


@pytest.mark.slow
def test_the_page_shows_policy_fields_facet_controls_scope_and_counts(client):
    q = "浙江省" + QUESTION
    r = client.get("/", params={"q": q, "k": "5"})
    assert r.status_code == 200, r.text
    page = r.text
    # the form's facets, the level select holding the levels of the served records
    for control in ('name="region"', '<select name="level">', 'name="from"', 'name="to"',
                    'type="checkbox" name="in_force"', 'type="checkbox" name="infer_scope" value="1" checked'):
        assert control in page, control
    levels = re.findall(r'<option value="([^"]*)"', _section(page, '<select name="level">', "</select>"))
    assert levels == ["", "地方性法规", "地方政府规章", "规范性文件"]
    # the scope inferred from the question, shown with the answer, with a link that widens it
    scope = _section(page, '<p class="scope" id="scope">', "</p>")
    assert "范围：浙江省 + 国家" in scope and "由问题推断" in scope and "infer_scope=0" in scope
    # each source's policy fields (as the JSON gives them), escaped, none shown as None
    res = client.get("/api/answer", params={"q": q, "k": "5"}).json()
    assert res["answers"] and all(a["policy"] for a in res["answers"])
    assert not {a["doc_id"] for a in res["answers"]} & {"js0", "js1"}
    from answers.render import policy_html

    shown = _answers_html(page)
    for a in res["answers"]:
        assert policy_html(a["policy"]) in shown, a["doc_id"]
    zj0 = next((a for a in res["answers"] if a["doc_id"] == "zj0"), None)
    assert zj0 is not None
    assert ('<span class="jurisdiction">浙江省</span> · <span class="level">地方性法规</span> · '
            '<span class="doc-number">浙人大常〔2022〕71号</span> · '
            '<span class="date">发布 2022-01-21</span> · <span class="validity">有效</span>') in shown
    assert "None" not in page and "Traceback" not in page
    # facet counts over the sources shown: each document once
    facets = _section(page, '<div class="facets" id="facets">', "</div>")
    docs_shown = {a["doc_id"]: a["policy"] for a in res["answers"]}
    places: dict = {}
    for p in docs_shown.values():
        name = p["jurisdiction"]["name"] or "未知"
        places[name] = places.get(name, 0) + 1
    for name, n in places.items():
        assert f"{name} ({n})" in facets, (name, n, facets)
    assert "层级：" in facets and "年份：" in facets and "有效性：" in facets
    assert "region=330000" in html.unescape(facets) and "from=2022&amp;to=2022" in facets
    assert "region=000000" not in facets  # 全国 is counted, not a narrowing link
    # a facet link narrows the question to its value (and keeps the other provinces out)
    link = html.unescape(re.search(r'<a class="facet" href="([^"]*region=330000[^"]*)"', facets).group(1))
    narrowed = client.get(link)
    assert narrowed.status_code == 200 and "范围：浙江省 + 国家" in narrowed.text
    assert "江苏省" not in _answers_html(narrowed.text)


@pytest.mark.slow
def test_typed_links_beside_the_related_ones(client):
    r = client.post("/ask", data={"q": QUESTION, "k": "5", "region": "浙江省", "level": "", "from": "", "to": "",
                                  "infer_scope": "0"})
    assert r.status_code == 200, r.text
    shown = _answers_html(r.text)
    assert '<li class="link-repeals"><span class="link-type">废止</span>' in shown
    assert "浙江省公共数据开放与安全管理暂行办法" in _section(shown, '<li class="link-repeals">', "</li>")
    assert "国务院关于构建数据基础制度的意见" in _section(shown, '<li class="link-implements">', "</li>")
    cites = _section(shown, '<li class="link-cites">', "</li>")
    assert "中华人民共和国数据安全法" in cites and "库外" in cites and "<a " not in cites
    # the repealed document, when shown, says who repealed it and is 废止
    api = client.get("/api/answer", params={"q": QUESTION, "k": "5", "region": "浙江省", "infer_scope": "0"}).json()
    old = next(a for a in api["answers"] if a["doc_id"] == "zjold")
    assert old["policy"]["validity"] == "废止"
    assert old["policy"]["links"] == [{"type": "repealed_by", "title": "浙江省公共数据条例", "doc_id": "zj0",
                                       "url": "https://www.example.gov.cn/zj0.html"}]
    assert '<li class="link-repealed_by"><span class="link-type">被废止于</span>' in shown
    assert '<span class="validity">废止</span>' in shown


@pytest.mark.slow
@pytest.mark.parametrize("question", [QUESTION, "浙江省" + QUESTION, "浙江省养老服务条例有何规定？"])
def test_a_region_facet_submitted_through_the_form_never_returns_the_other_province(client, question):
    form = {"q": question, "k": "5", "region": "江苏省", "level": "", "from": "", "to": "", "infer_scope": "0"}
    for extra in ({}, {"infer_scope": "1"}, {"in_force": "1"}, {"from": "2021", "to": "2022"}):
        r = client.post("/ask", data={**form, **extra})
        assert r.status_code == 200, (extra, r.text)
        shown = _answers_html(r.text)
        assert shown and "浙江省" not in shown, (extra, shown)
        assert "范围：江苏省 + 国家" in r.text and 'name="region" value="江苏省"' in r.text
        res = client.get("/api/answer", params={**form, **extra}).json()
        assert res["answers"] and {a["doc_id"] for a in res["answers"]} <= {"js0", "js1", "cn0"}


@pytest.mark.slow
@pytest.mark.parametrize("field,value,named", [
    ("region", "火星省", "region"), ("region", "<script>alert(1)</script>", "region"), ("region", "x" * 10_000, "region"),
    ("level", "<b>法规</b>", "level"), ("from", "2022-13-45", "from"), ("to", "yesterday", "to"),
    ("in_force", "maybe", "in_force")])
def test_a_hostile_facet_value_is_a_400_page_with_the_message(client, field, value, named):
    form = {"q": QUESTION, "k": "3", "region": "", "level": "", "from": "", "to": "", "infer_scope": "1", field: value}
    for r in (client.post("/ask", data=form), client.get("/", params=form)):
        assert r.status_code == 400, (field, r.status_code)
        err = _section(r.text, '<p class="error" id="error">', "</p>")
        assert "输入有误" in err and named in err, err
        assert "Traceback" not in r.text and "<script>alert" not in r.text and "<b>法规" not in r.text
        assert 'name="q"' in r.text and "<select name=\"level\">" in r.text  # the form is still there
    assert client.post("/ask", data={**form, field: ""}).status_code == 200  # and the server keeps serving


def test_the_scope_cache_returns_what_an_uncached_call_does(data):
    from retrieval.bundle import load_bundle
    from retrieval.policy_records import POLICY_PART
    from retrieval.scope import AllowedCache, allowed_docs, parse_filters
    from retrieval.scoped import request_scope, scoped_docs

    b = load_bundle(data / "index")
    recs = b.load(POLICY_PART)
    scopes = [request_scope(QUESTION, {"region": "浙江省"}), request_scope("江苏省" + QUESTION),
              request_scope(QUESTION, {"level": "地方性法规", "in_force": True}),
              request_scope(QUESTION, {"from": "2021", "to": "2021"}), request_scope(QUESTION, {}, infer=False)]
    for scope in scopes:
        expect = allowed_docs(scope, list(recs.values()), keep_unknown_place=scope.inferred)
        applied, first = scoped_docs(b, scope)
        again = scoped_docs(b, scope)[1]
        assert applied == scope and first == expect and again is first, scope
        assert first is None or isinstance(first, frozenset)
    assert scoped_docs(b, scopes[0])[1] == {"zj0", "zj1", "zjold", "cn0"}
    cache = recs.scope_cache
    assert cache.hits >= 4 and len(cache) == 4  # the unscoped request is not cached: it restricts nothing
    # a bounded cache: the least recently used scope goes first, and what it returns stays the uncached set
    small = AllowedCache(list(recs.values()), maxsize=2)
    keys = [parse_filters({"region": p}) for p in ("浙江省", "江苏省", "全国")]
    for s in keys + keys:
        assert small.allowed(s) == allowed_docs(s, list(recs.values()))
    assert len(small) == 2 and small.misses == 6
    # a fresh bundle (a new loaded version) starts a fresh cache
    assert load_bundle(data / "index").load(POLICY_PART).scope_cache is not cache
    # the chunk mask of a cached set is computed once too, read-only, and is the uncached mask
    allowed = scoped_docs(b, scopes[0])[1]
    mask = b.retriever.doc_mask(allowed)
    assert b.retriever.doc_mask(allowed) is mask and not mask.flags.writeable
    assert (mask == b.retriever.doc_mask(set(allowed))).all() and mask.sum() > 0
    assert {b.retriever.chunk(i)["doc_id"] for i in mask.nonzero()[0]} == allowed
