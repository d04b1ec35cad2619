"""The order of a place-scoped search (SPEC §7 search filters, retrieval.scope_order): the document a question
quotes first, then the asked place's own regulation ahead of its parents' and children's copies within a window;
an unscoped search keeps its order. Unit cases on hits of real chunk rows, then flows.search end to end over a
data dir holding a national regulation and a province's and a city's copies of it."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from retrieval.hits import SearchHit
from retrieval.scope_order import ScopeOrder, longest_shared_run, strip_places

SHARED = "县级以上人民政府应当将安全生产工作纳入国民经济和社会发展规划，建立健全安全生产工作协调机制。"
NATIONAL = "第一条 为了加强安全生产工作，制定本条例。第二条 " + SHARED + "第三条 " + SHARED.replace("应当", "必须")
PROVINCE = "第一条 为了加强本省安全生产工作，制定本条例。第二条 " + SHARED + "第三条 生产经营单位应当每季度开展一次隐患排查。"
CITY = "第一条 为了加强本市安全生产工作，制定本条例。第二条 " + SHARED + "第三条 生产经营单位应当每半年开展一次隐患排查。"


def hit(doc_id: str, text: str, pos: int) -> SearchHit:
    row = {"chunk_id": pos, "doc_id": doc_id, "start": 0, "end": len(text), "text": text, "title": doc_id}
    return SearchHit.of_chunk(row, score=1.0 / (pos + 1), mode="sparse")


JURISDICTION = {"cn": "000000", "zj": "330000", "hz": "330100"}.get


def test_longest_shared_run_and_places_cut_out():
    assert longest_shared_run("浙江省：生产经营单位应当每季度开展", PROVINCE) == len("生产经营单位应当每季度开展")
    assert longest_shared_run("火星文", PROVINCE) == 0
    assert longest_shared_run("", PROVINCE) == 0
    assert strip_places("浙江省杭州市 生产经营单位").strip() == "生产经营单位"
    bare = strip_places("浙江省 生产经营单位应当")
    assert "浙江" not in bare and "生产经营单位应当" in bare


def test_the_asked_place_moves_up_within_the_window_only():
    order = ScopeOrder(frozenset({"330000"}), JURISDICTION, window=3)
    q = "浙江省 安全生产工作协调机制"  # 12 chars after the place: every copy shares them, no quote decides
    near = [hit("cn", NATIONAL, 0), hit("hz", CITY, 1), hit("zj", PROVINCE, 2)]
    assert [h.doc_id for h in order(q, near)] == ["zj", "cn", "hz"]
    far = [hit(f"cn{i}", NATIONAL, i) for i in range(4)] + [hit("zj", PROVINCE, 4)]
    got = order(q, far)
    assert got[0].doc_id == "cn0" and got[1].doc_id == "zj"  # moved up 3, not past the 4-ahead national hit
    assert sorted(h.chunk_id for h in got) == [0, 1, 2, 3, 4] and all(isinstance(h, SearchHit) for h in got)


def test_the_quoted_copy_goes_first_wherever_it_ranked():
    order = ScopeOrder(frozenset({"330100"}), JURISDICTION)
    q = "杭州市 生产经营单位应当每半年开展一次隐患排查"  # quotes the city's own clause
    hits = [hit("zj", PROVINCE, 0), hit("cn", NATIONAL, 1), hit("x", "无关的文字", 2), hit("hz", CITY, 3)]
    assert order(q, hits)[0].doc_id == "hz"
    # a shorter shared run than quote_min is no quote: the window rule alone decides
    short = ScopeOrder(frozenset({"330000"}), JURISDICTION, quote_min=40)
    assert [h.doc_id for h in short(q, hits)][:2] == ["zj", "cn"]


def test_among_equal_quotes_the_asked_place_goes_first_past_the_window():
    order = ScopeOrder(frozenset({"330000"}), JURISDICTION, window=3)
    q = "浙江省 " + SHARED[:20]  # every copy quotes these 20 chars verbatim
    hits = [hit(f"cn{i}", NATIONAL, i) for i in range(6)] + [hit("hz", CITY, 6), hit("zj", PROVINCE, 7)]
    got = [h.doc_id for h in order(q, hits)]
    assert got[0] == "zj" and got[1:] == [f"cn{i}" for i in range(6)] + ["hz"]
    # a longer quote still wins over the asked place: the city's own clause quoted whole
    q2 = "浙江省 生产经营单位应当每半年开展一次隐患排查"
    assert order(q2, hits)[0].doc_id == "hz"


def docs() -> pd.DataFrame:
    rows = []
    for doc_id, title, text, region in (("cn0", "安全生产条例", NATIONAL, None),
                                        ("zj0", "浙江省安全生产条例", PROVINCE, "浙江省"),
                                        ("hz0", "杭州市安全生产条例", CITY, "浙江省")):
        rows.append({"doc_id": doc_id, "text": text, "title": title, "region": region,
                     "issuer": None, "level": "地方性法规" if region else "行政法规", "source": title, "url": None,
                     "pubtime": "2022-01-01", "n_chars": len(text)})
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from tests.retrieval_builders import policy_data_dir

    d, _ = policy_data_dir(tmp_path_factory.mktemp("order") / "data", docs(), max_chars=400, overlap=0)
    return d


def first_docs(capsys, data, question: str, *flags: str) -> list[str]:
    from flows.search import main

    assert main([question, "--data-dir", str(data), "--json", "--mode", "sparse", "-k", "3", *flags]) == 0
    return [h["doc_id"] for h in json.loads(capsys.readouterr().out)["hits"]]


def test_flows_search_orders_a_scoped_search(data, capsys):
    shared = "浙江省 " + SHARED[:30]
    plain = first_docs(capsys, data, shared, "--no-infer-scope")
    assert plain[0] == "cn0"  # BM25 alone: the national text repeats the clause, so it leads
    assert first_docs(capsys, data, shared)[0] == "zj0"  # inferred 浙江省: its own copy first
    assert first_docs(capsys, data, "杭州市 生产经营单位应当每半年开展一次隐患排查")[0] == "hz0"  # the quoted copy
    assert first_docs(capsys, data, "生产经营单位应当每半年开展一次隐患排查", "--region", "浙江省")[0] == "hz0"
