from datetime import date

import pandas as pd
import pytest

from corpus import clean as C
from corpus.dedup import find_duplicates
from corpus.documents import clean_corpus
from crawler.csv_import import InputError, parse_pubtime, read_corpus_csv
from tests.conftest import write_corpus

BODY = "数据作为新型生产要素，是数字化、网络化、智能化的基础。已快速融入生产、分配、流通、消费和社会服务管理等各环节。"


def test_parse_pubtime_malformed():
    assert parse_pubtime("2022-12-19") == date(2022, 12, 19)
    assert parse_pubtime("\t2023-01-05") == date(2023, 1, 5)
    assert parse_pubtime("2023年1月5日") == date(2023, 1, 5)
    assert parse_pubtime("") is None and parse_pubtime("soon") is None and parse_pubtime("2023-13-40") is None


def test_import_csv(tmp_path):
    src = tmp_path / "policy_sources.csv"
    src.write_text('"url","describes","code"\n"https://www.gov.cn/a.htm","[1] A","1"\n'
                   '"https://x.cn/b.pdf","[2] B","1"\n"not a url","[3] C","1"\n', encoding="utf-8")
    rows = [{"title": "甲", "pubtime": "\t2023-02-01", "channel": "中国政府网", "describes": "[1] A", "contentText": BODY},
            {"title": "乙", "pubtime": "", "channel": "研究院", "describes": "[2] B", "contentText": BODY},
            {"title": "乙", "pubtime": "", "channel": "研究院", "describes": "[2] B", "contentText": BODY},
            {"title": "丙", "pubtime": "x", "channel": "研究院", "describes": "[1] A[2] B", "contentText": BODY}]
    docs, rep = read_corpus_csv(write_corpus(tmp_path / "c.csv", rows), src)
    assert len(docs) == 4 and docs["doc_id"].is_unique
    assert docs["doc_id"][2] == docs["doc_id"][1] + "-2"
    assert docs["url"].tolist()[:2] == ["https://www.gov.cn/a.htm", "https://x.cn/b.pdf"]
    assert docs["content_type"].tolist()[:2] == ["html", "pdf"] and pd.isna(docs["url"][3])
    assert docs["pubtime"][0] == date(2023, 2, 1) and docs["pubtime"][1] is None
    assert rep.warnings["pubtime_missing"] == 2 and rep.warnings["pubtime_unparsed"] == 1
    assert rep.warnings["citation_without_url"] == 1
    assert docs["source_id"][1] == docs["source_id"][3]


def test_import_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        read_corpus_csv(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("title,text\na,b\n", encoding="utf-8")
    with pytest.raises(InputError, match="lacks required column"):
        read_corpus_csv(bad)
    with pytest.raises(InputError, match="empty corpus"):
        read_corpus_csv(write_corpus(tmp_path / "e.csv", [{"title": "t", "contentText": "  "}]))


@pytest.mark.parametrize("rule,raw,expected", [
    (C.remove_control_chars, "数据\x0c要素\u200b", "数据要素"),
    (C.join_broken_lines, "数据要素\n是基础。\n\n第二段", "数据要素是基础。\n第二段"),
    (C.remove_urls, "详见https://www.gov.cn/a.htm和www.ndrc.gov.cn以及abc.com。", "详见和以及。"),
    (C.remove_table_residue, "如下|名称|数量|单位|表格后", "如下表格后"),
    (C.remove_table_residue, "序号——名称——类型——数量。后文", "。后文"),
    (C.remove_page_footers, "正文第 3 页 共 10 页继续- 4 -完", "正文继续完"),
    (C.remove_page_footers, "正文\n第 12 页\n继续", "正文\n\n继续"),
    (C.remove_reference_marks, "数据要素[1]很重要[图 2]，见文献(3)", "数据要素很重要，见文献"),
    (C.normalize_punctuation, "总体要求:加快发展,推进改革;是否?是!(试行)", "总体要求：加快发展，推进改革；是否？是！（试行）"),
    (C.remove_cjk_spaces, "数据 基础 制度  and   more", "数据基础制度 and more"),
    (C.remove_mojibake, "数据\ufffd要素\ue000", "数据要素"),
])
def test_rules(rule, raw, expected):
    text, n = rule(raw)
    assert text == expected and n > 0


def test_footer_rule_keeps_citation_pages():
    text = "见《数字经济》，浙江人民出版社，第71页。"
    assert C.remove_page_footers(text) == (text, 0)


def test_punctuation_leaves_numbers_and_latin():
    assert C.normalize_punctuation("增长1,000.5 and a,b") == ("增长1,000.5 and a,b", 0)


def test_clean_text_counts_rules():
    text, counts = C.clean_text("数据 要素, 见 https://a.cn/x 第 1 页")
    assert text == "数据要素，见" and set(counts) >= {"urls", "page_footers", "punctuation", "cjk_spaces"}


def _docs(texts, pubs=None):
    pubs = pubs or [None] * len(texts)
    return pd.DataFrame({"doc_id": [f"d{i}" for i in range(len(texts))], "pubtime": pubs, "text": texts})


def test_exact_and_near_duplicates_keep_earliest():
    long = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(600))
    near = long[:-3] + "新增句"
    docs = _docs([long, long + " ", near, "完全不同的另一篇文档。" * 30],
                 [date(2023, 5, 1), date(2022, 1, 1), None, None])
    dups = {d.doc_id: (d.kept_id, d.kind) for d in find_duplicates(docs, near_threshold=0.8)}
    assert dups["d0"] == ("d1", "exact")  # d1 is the earliest copy
    assert dups["d2"] == ("d1", "near")
    assert "d3" not in dups and "d1" not in dups


def test_clean_corpus_rejects_with_reasons():
    docs = _docs([BODY * 3, BODY * 3, "http://only.a.url/x", "English only text " * 10, "短"])
    out, rej, stats = clean_corpus(docs)
    reasons = dict(zip(rej["doc_id"], rej["reason"]))
    assert reasons == {"d1": "exact_duplicate", "d2": "empty", "d3": "non_chinese", "d4": "too_short"}
    assert out["doc_id"].tolist() == ["d0"] and stats["documents_out"] == 1
    assert set(out.columns) >= {"n_chars", "rules_applied"}


def test_brackets_convert_as_pairs():
    assert C.normalize_punctuation("白皮书(2023年)中国") == ("白皮书（2023年）中国", 1)
    assert C.normalize_punctuation("科大讯飞(002230，买入)，建议")[0] == "科大讯飞（002230，买入），建议"
    assert C.normalize_punctuation("f(x) and g(y)") == ("f(x) and g(y)", 0)


def test_near_duplicate_candidates_are_verified_and_bands_partition():
    """With one-row bands every pair sharing a single MinHash value is a candidate; only pairs whose
    Jaccard estimate reaches the threshold are duplicates, and bands processed apart give the same pairs."""
    from corpus.dedup import band_candidates, near_duplicates, signatures

    base = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(400))
    other = base[:200] + "".join(chr(0x4E00 + (i * 104729) % 20000) for i in range(200))  # Jaccard ~0.33
    texts = [base, base[:-2] + "新句", other]
    sigs = signatures(texts)
    loose = (128, 1)
    cands = band_candidates(sigs, loose)
    assert (0, 2) in cands and (0, 1) in cands  # the half-different text is a candidate ...
    assert near_duplicates(sigs, 0.8, loose) == {1: 0}  # ... but not a duplicate
    halves = band_candidates(sigs, loose, range(0, 64)) | band_candidates(sigs, loose, range(64, 128))
    assert halves == cands


def test_near_duplicate_keeps_the_earliest_copy_not_the_smallest_id():
    long = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(600))
    docs = pd.DataFrame({"doc_id": ["a-late", "z-early"], "pubtime": [date(2024, 1, 1), date(2020, 1, 1)],
                         "text": [long + "尾巴", long]})
    dups = find_duplicates(docs, near_threshold=0.8)
    assert [(d.doc_id, d.kept_id, d.kind) for d in dups] == [("a-late", "z-early", "near")]


def test_policies_of_different_places_are_never_duplicates():
    """Two cities adopting one rule word for word keep both rules (their titles name the place); a repost with
    the same place (or none) is still a duplicate; an import region names the place before the title."""
    from corpus.dedup import place_keys

    long = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(600))
    docs = pd.DataFrame({
        "doc_id": ["jn", "lw", "lw-repost", "jn-exact", "plain", "plain-copy"],
        "title": ["济南市既有多层住宅增设电梯规定", "莱芜市既有多层住宅增设电梯规定", "莱芜市既有多层住宅增设电梯规定",
                  "莱芜市既有多层住宅增设电梯规定（转载）", "关于增设电梯的规定", "关于增设电梯的规定"],
        "pubtime": [date(2019, 2, 12), date(2017, 12, 1), date(2018, 1, 1), date(2018, 2, 1), None, None],
        "text": [long, long[:-3] + "新增句", long[:-3] + "新增句", long, long + "另", long + "另"]})
    assert place_keys(docs["title"].tolist()) == ["370100", "371200", "371200", "371200", "", ""]
    assert place_keys(["关于增设电梯的规定"], ["山东省济南市"]) == ["370100"]  # the import region first
    dups = {d.doc_id: (d.kept_id, d.kind) for d in find_duplicates(docs, near_threshold=0.8)}
    assert dups == {"lw-repost": ("lw", "exact"), "jn-exact": ("lw", "near"), "plain-copy": ("plain", "exact")}
    # the streaming stage decides from the same keys: no region column means the title decides
    out, rej, _ = clean_corpus(docs.assign(text=docs["text"] + "。"))
    assert {"jn", "lw", "plain"} <= set(out["doc_id"]) and set(rej["doc_id"]) == {"lw-repost", "jn-exact", "plain-copy"}
