"""Policy records (policy/): divisions, 文号, record fields with evidence, links, lookups, the stage, and the
jurisdiction figure on a slice of LawRefBook's local regulations."""
from __future__ import annotations

import gzip
import json
from datetime import date
from itertools import islice
from pathlib import Path

import pandas as pd
import pytest

from corpus.divisions import NATIONAL, ancestors, contains, find_places, load_divisions, province_of
from policy.docnumber import find_doc_numbers, normalize_doc_number
from policy.lookup import find_article, find_by_doc_number, parse_reference
from policy.record import extract_record, normalize_validity
from policy.stage import build_records, policy_records_stage
from storage import read_table, write_table

LAWREFBOOK = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "lawrefbook.jsonl.gz"


def test_divisions_parent_chain_and_short_names():
    divs = load_divisions()
    assert divs[NATIONAL].name == "全国"
    assert ancestors("370200") == ["370000", NATIONAL]
    assert ancestors("110101") == ["110000", NATIONAL]  # 东城区: the 市辖区 placeholder is skipped
    assert contains("370000", "370202") and contains(NATIONAL, "330100") and not contains("330000", "370200")
    assert divs["222400"].short == ("延边",) and divs["450000"].short == ("广西",)
    places = find_places("浙江省人民政府关于青岛、杭州西湖的通知")
    assert [(p.code, p.surface) for p in places] == [("330000", "浙江省"), ("370200", "青岛"), ("330100", "杭州")]
    assert [p.surface for p in find_places("选举全国人民代表大会和县级以上地方各级人民代表大会代表")] == []


def test_shared_county_name_resolves_inside_the_named_city():
    assert [p.code for p in find_places("长春市朝阳区")] == ["220100", "220104"]
    assert [p.code for p in find_places("北京市朝阳区")] == ["110000", "110105"]
    assert province_of("220104") == "220000"


@pytest.mark.parametrize("spelling", ["国发〔2019〕5号", "国发[2019]5号", "国发〔2019〕第5号", "国发(2019)5号",
                                      "国发（２０１９）０５号", "国发【2019】5号", "国发 〔2019〕 5 号"])
def test_doc_number_spellings_have_one_normal_form(spelling):
    assert normalize_doc_number(spelling) == "国发〔2019〕5号"


def test_doc_numbers_found_in_text_with_offsets():
    text = "现将《方案》印发给你们（桂政办发〔2023〕51号），并废止国务院令第588号。"
    found = find_doc_numbers(text)
    assert [n for n, _, _ in found] == ["桂政办发〔2023〕51号", "国务院令第588号"]
    n, s, e = found[0]
    assert text[s:e] == "桂政办发〔2023〕51号"


@pytest.mark.parametrize("text, number", [
    # a flattened header: the title closes right before the 机关代字
    ("广东省人民政府办公厅关于印发“数字湾区”建设三年行动方案的通知粤办函〔2023〕297号", "粤办函〔2023〕297号"),
    ("国务院关于印发《中国（新疆）自由贸易试验区总体方案》的通知国发〔2023〕17号", "国发〔2023〕17号"),
    ("国务院办公厅关于进一步优化营商环境降低市场主体制度性交易成本的意见国办发〔2022〕33号", "国办发〔2022〕33号"),
    ("财政部 税务总局关于实施小微企业普惠性税收减免政策的通知财税〔2019〕13号", "财税〔2019〕13号"),
    ("国家发展改革委关于印发《国家数字经济创新发展试验区实施方案》的通知发改高技〔2019〕1976号",
     "发改高技〔2019〕1976号"),
    ("工业和信息化部等七部门关于推动未来产业创新发展的实施意见工信部联科〔2024〕12号", "工信部联科〔2024〕12号"),
    ("宁夏回族自治区数字经济发展“十四五”规划的通知宁政办发〔2021〕69号", "宁政办发〔2021〕69号"),
    ("1985年11月30日市人民政府京政发〔1985〕167号", "京政发〔1985〕167号"),
    ("按照天津市卫健委津卫医政【2020】100号", "津卫医政〔2020〕100号"),
    ("关于做好家庭医生签约服务的通知 国卫基层家医便函〔2020〕2号", "国卫基层家医便函〔2020〕2号"),  # 8 characters
    ("国卫规划发〔2020〕1号", "国卫规划发〔2020〕1号"),  # 规划 is part of this code
    ("根据国发[2019]5号", "国发〔2019〕5号"),
    ("国发〔2019〕第5号", "国发〔2019〕5号"),
])
def test_doc_number_code_is_the_agency_code_not_the_title_before_it(text, number):
    found = find_doc_numbers(text)
    assert [n for n, _, _ in found] == [number]
    _, s, e = found[0]
    assert text[s:e].replace(" ", "").startswith(number.split("〔")[0])


def test_a_bracketed_year_after_words_names_no_agency():
    assert find_doc_numbers("与此同时，国家税务总局还出台了[2020]4号公告") == []
    assert normalize_doc_number("建设三年行动方案的通知粤办函〔2023〕297号") == "粤办函〔2023〕297号"


def test_record_doc_number_from_a_flattened_header():
    doc = {"doc_id": "gd", "title": "广东省人民政府办公厅关于印发“数字湾区”建设三年行动方案的通知",
           "text": "广东省人民政府办公厅关于印发“数字湾区”建设三年行动方案的通知粤办函〔2023〕297号各地级以上市人民政府，"
                   "省政府各部门、各直属机构：现将《“数字湾区”建设三年行动方案》印发给你们，请认真组织实施。"}
    r = extract_record(doc)
    assert (r.doc_number, r.evidence["doc_number"]) == ("粤办函〔2023〕297号", "text")


def test_record_from_title_and_text_with_evidence():
    doc = {"doc_id": "d1", "title": "浙江省生活垃圾管理条例", "pubtime": date(2020, 12, 24),
           "text": "第一条 为了加强生活垃圾管理，根据《中华人民共和国固体废物污染环境防治法》，结合本省实际，制定本条例。\n"
                   "第二条 本省行政区域内生活垃圾的管理，适用本条例。\n第三条 本条例自2021年5月1日起施行。"
                   "2011年通过的《浙江省城市市容和环境卫生管理条例》同时废止。"}
    r = extract_record(doc)
    assert (r.jurisdiction_code, r.jurisdiction_level, r.evidence["jurisdiction"]) == ("330000", "province", "title")
    assert r.level == "地方性法规" and r.effective_date == date(2021, 5, 1)
    assert r.evidence["effective_date"] == "text:自2021年5月1日起施行"
    assert [(link["type"], link["title"]) for link in r.links] == [
        ("cites", "中华人民共和国固体废物污染环境防治法"), ("repeals", "浙江省城市市容和环境卫生管理条例")]


def test_city_title_and_central_issuer():
    assert extract_record({"doc_id": "q", "title": "青岛市轨道交通条例", "text": ""}).jurisdiction_code == "370200"
    r = extract_record({"doc_id": "g", "title": "工业和信息化部关于印发“十四五”大数据产业发展规划的通知", "text": ""})
    assert (r.jurisdiction_code, r.issuer, r.level, r.evidence["jurisdiction"]) == (
        NATIONAL, "工业和信息化部", "规范性文件", "title:issuer")
    law = extract_record({"doc_id": "l", "title": "中华人民共和国数据安全法", "text": ""}, source_owner="内蒙古自治区通信管理局")
    assert (law.jurisdiction_code, law.level) == (NATIONAL, "法律")  # a reposting site is not the issuer


def test_column_outranks_header_outranks_owner_and_title():
    doc = {"doc_id": "c", "title": "青岛市某某办法", "text": "", "region": "浙江", "validity": "现行有效"}
    r = extract_record(doc, columns={"region_column": "region", "validity_column": "validity"})
    assert (r.jurisdiction_code, r.evidence["jurisdiction"]) == ("330000", "column:region")
    assert (r.validity, r.evidence["validity"]) == ("有效", "column:validity")
    h = extract_record({"doc_id": "h", "title": "关于做好数据工作的通知", "text": ""}, source_owner="北京市人民政府",
                       header={"发文机关": "山东省人民政府办公厅", "发文字号": "鲁政办字[2023]12号", "有效性": "失效"})
    assert (h.jurisdiction_code, h.evidence["jurisdiction"]) == ("370000", "header:发文机关")
    assert (h.doc_number, h.validity, h.evidence["validity"]) == ("鲁政办字〔2023〕12号", "失效", "header:有效性")
    o = extract_record({"doc_id": "o", "title": "关于做好数据工作的通知", "text": ""}, source_owner="北京市人民政府")
    assert (o.jurisdiction_code, o.evidence["jurisdiction"]) == ("110000", "registry:owner")


def test_a_law_or_regulation_naming_no_place_is_national():
    for title in ("城市房地产开发经营管理条例", "民法典", "数据出境安全评估条例（试行）"):
        r = extract_record({"doc_id": "n", "title": title, "text": "第一条 为了规范……"})
        assert (r.jurisdiction_code, r.evidence["jurisdiction"]) == (NATIONAL, "title:法/条例"), title
    assert extract_record({"doc_id": "m", "title": "数据出境安全评估办法", "text": ""}).jurisdiction_code is None


def test_ben_sheng_resolved_from_the_text():
    r = extract_record({"doc_id": "t", "title": "关于促进数据要素发展的若干措施",
                        "text": "为推动河南省数字经济发展，结合本省实际，制定以下措施。"})
    assert (r.jurisdiction_code, r.evidence["jurisdiction"]) == ("410000", "text:本省→河南省")


def test_expiry_from_effective_date_and_validity():
    text = "本办法自2019年1月1日起施行，有效期5年。"
    r = extract_record({"doc_id": "e", "title": "山东省某某管理办法", "text": text}, as_of=date(2026, 1, 1))
    assert (r.effective_date, r.expiry_date, r.validity) == (date(2019, 1, 1), date(2023, 12, 31), "失效")
    r = extract_record({"doc_id": "e", "title": "山东省某某管理办法", "text": text}, as_of=date(2023, 6, 1))
    assert r.validity == "有效" and r.evidence["validity"] == "expiry:2023-12-31"
    assert normalize_validity(True) == "失效" and normalize_validity("已被修订") == "已修订"
    other = extract_record({"doc_id": "x", "title": "数据出境安全评估办法",
                            "text": "数据出境评估结果有效期为2年。本办法自2022年9月1日起施行。"}, as_of=date(2026, 1, 1))
    assert (other.expiry_date, other.validity) == (None, "未知")  # the 有效期 of an assessment, not of the rule


def test_repeal_links_resolve_and_same_title_revision_is_not_a_repeal():
    docs = [{"doc_id": "old", "title": "上海市房地产登记条例", "text": "第一条 为了规范本市房地产登记……"},
            {"doc_id": "new", "title": "上海市不动产登记若干规定",
             "text": "本规定自2016年3月1日起施行。2008年通过的《上海市房地产登记条例》同时废止。"},
            {"doc_id": "v1", "title": "上海市禁毒条例", "text": "第一条 ……", "pubtime": date(2015, 6, 18)},
            {"doc_id": "v2", "title": "上海市禁毒条例（2022年修订）", "pubtime": date(2022, 10, 28),
             "text": "本条例自2023年1月1日起施行。2015年通过的《上海市禁毒条例》同时废止。"}]
    recs, counts = build_records(docs, as_of=date(2026, 1, 1))
    by = {r.doc_id: r for r in recs}
    assert by["new"].links == [{"type": "repeals", "title": "上海市房地产登记条例", "doc_id": "old"}]
    assert (by["old"].validity, by["old"].evidence["validity"]) == ("废止", "repealed_by:new")
    assert by["v2"].links[0]["doc_id"] == "v1" and by["v1"].validity == "已修订" and by["v2"].validity == "未知"
    assert counts == {"links": 2, "resolved": 2, "repealed": 1, "revised": 1}
    # undated same-title versions cannot be ordered: the repeal stays unresolved, neither is marked
    undated = [{**d, "pubtime": None} for d in docs[2:]]
    recs, counts = build_records(undated)
    assert recs[1].links[0]["doc_id"] is None and {r.validity for r in recs} == {"未知"}


def test_find_by_doc_number_and_article():
    recs = [extract_record({"doc_id": "a", "title": "国务院关于X的通知", "text": "国发〔2019〕5号\n第一条 甲"}),
            extract_record({"doc_id": "b", "title": "国务院关于Y的通知", "text": "国发〔2019〕6号"})]
    assert [r.doc_id for r in find_by_doc_number(recs, "国发[2019]第５号第三条")] == ["a"]
    text = "第一条 为了规范，制定本条例。\n第二条 依照本条例第一条执行。\n第十条 罚则。\n第十一条 施行。"
    art = find_article(text, "第十条")
    assert (art.number, art.text, text[art.start:art.end]) == (10, "第十条 罚则。", "第十条 罚则。")
    assert find_article(text, "第三条") is None
    assert parse_reference("《X条例》第十条") == {"title": "X条例", "doc_number": None, "article": 10}
    assert parse_reference("国发〔2019〕5号第三条")["doc_number"] == "国发〔2019〕5号"


_CN = "零一二三四五六七八九"


def _cn(n: int) -> str:
    """1..99 in Chinese numerals (十一, 二十, 二十一)."""
    tens, ones = divmod(n, 10)
    return (("" if tens == 1 else _CN[tens]) + "十" if tens else "") + (_CN[ones] if ones else "")


# a statute as the main job's cleaned texts hold it: no line breaks, headings glued to the articles after them,
# cross references inside articles (依照本法第二十一条, 第十条第二款, 前款, 。第十三条规定的…, 。第二十七条所称…)
_BODIES = {
    1: "为了规范数据处理活动，保障数据安全，制定本法。",
    2: "在中华人民共和国境内开展数据处理活动，适用本法。",
    3: "本法所称数据，是指任何以电子或者其他方式对信息的记录。第二十七条所称重要数据，由国家网信部门会同有关部门认定。",
    4: "维护数据安全，应当坚持总体国家安全观。",
    5: "各地区、各部门对本地区、本部门工作中收集和产生的数据负责。",
    6: "国家统筹发展和安全，依照本法第二十一条的规定实行分类分级保护。",
    7: "国家实施大数据战略。第十三条规定的制度，由国务院有关部门组织实施。",
    8: "省级以上人民政府应当将数字经济发展纳入本级规划。",
    9: "与数据有关的行业组织应当加强行业自律。",
    10: "国家支持数据开发利用。前款规定的数据，不包括国家秘密。",
    11: "国家推进数据安全标准体系建设，第十条第二款所列标准除外。",
    12: "国家促进数据安全检测评估服务的发展。",
    13: "国家建立数据分类分级保护制度。",
    14: "国家建立数据安全风险评估机制，第十三条、第十四条所称制度由国务院制定。",
    15: "国家建立数据安全应急处置机制。",
    16: "国家建立数据安全审查制度。",
    17: "国家对属于管制物项的数据依法实施出口管制。",
    18: "国家建立数据交易管理制度，依照本法第三章数据安全制度的规定执行。",
    19: "重要数据的处理者应当明确数据安全负责人。",
    20: "开展数据处理活动应当加强风险监测；发现风险时，应当立即采取补救措施。",
    21: "开展数据处理活动的组织、个人不履行本法第十九条、第二十条规定的数据安全保护义务的，由有关主管部门责令改正。",
    22: "违反本法第十七条规定，向境外提供重要数据的，处十万元以上一百万元以下罚款。",
    23: "违反本法第十三条第一款规定的，依照有关法律的规定处罚。",
    24: "国家机关不履行本法规定的数据安全保护义务的，对直接负责的主管人员依法给予处分。",
    25: "窃取或者以其他非法方式获取数据的，依照有关法律、行政法规的规定处罚。",
    26: "违反本法规定，给他人造成损害的，依法承担民事责任。",
    27: "开展涉及国家秘密的数据处理活动，适用有关法律的规定。",
    28: "本法自2021年9月1日起施行。",
}
_HEADINGS = {1: "第一章总则", 6: "第二章数据安全与发展第一节一般规定", 10: "第二节促进措施", 13: "第三章数据安全制度",
             19: "第四章数据安全保护义务", 21: "第五章法律责任", 27: "第六章附则"}


def _statute(sep: str = "") -> str:
    toc = "目录第一章总则第二章数据安全与发展第三章数据安全制度第四章数据安全保护义务第五章法律责任第六章附则"
    return "中华人民共和国示例数据法" + toc + "".join(
        (_HEADINGS[n] + sep if n in _HEADINGS else "") + f"第{_cn(n)}条" + _BODIES[n] + sep for n in _BODIES)


@pytest.mark.parametrize("sep", ["", "\n", " "])
def test_every_article_of_a_flattened_statute_with_its_text_up_to_the_next_heading(sep):
    text = _statute(sep)
    for n, body in _BODIES.items():
        art = find_article(text, n)
        assert art is not None, n
        assert art.text == f"第{_cn(n)}条{body}", n  # ends before the next article or chapter/section heading
        assert text[art.start:art.end] == art.text
    assert find_article(text, 29) is None
    assert find_article(text, "第二十一条").text.startswith("第二十一条开展数据处理活动的组织")


def test_glued_article_headings_beyond_chapters():
    # 第一条 glued to the title after a signature, an unnumbered heading after a sentence end, 总则/附则 alone
    text = ("国家互联网信息办公室主任某某2022年7月7日数据出境评估办法第一条为了规范数据出境活动，制定本办法。"
            "第二条本办法适用于数据出境。养护管理第三条县级人民政府负责养护。有第三条情形的，依照前款处理。"
            "附则第四条本办法自公布之日起施行。")
    assert [find_article(text, n).text for n in (1, 2, 3, 4)] == [
        "第一条为了规范数据出境活动，制定本办法。", "第二条本办法适用于数据出境。",
        "第三条县级人民政府负责养护。有第三条情形的，依照前款处理。", "第四条本办法自公布之日起施行。"]
    # a cross reference at a sentence start is no article, nor is a 第一条 with no 第二条 after it
    assert find_article("第一条甲。第五条规定的乙。第二条丙。", 5) is None
    assert find_article("将本规定第一条修改为：“……”", 1) is None
    # a chapter cited with its article is no heading
    cite = "第一条甲。第二条依照本法第三章第五条执行。第三条丙。"
    assert find_article(cite, 5) is None and find_article(cite, 2).text == "第二条依照本法第三章第五条执行。"


def test_stage_writes_the_policy_records_table(tmp_path):
    docs = pd.DataFrame([{"doc_id": "d1", "source_id": "s", "title": "浙江省数据条例", "text": "本条例自2022年3月1日起施行。",
                          "pubtime": date(2022, 1, 1)}])
    write_table(docs, tmp_path / "clean", name="documents_clean")
    stats = policy_records_stage(tmp_path / "clean", tmp_path / "out", registry=None, as_of="2026-01-01")
    t = read_table(tmp_path / "out")
    assert stats["rows"] == 1 and t.loc[0, "jurisdiction_name"] == "浙江省" and t.loc[0, "level"] == "地方性法规"
    assert json.loads(t.loc[0, "evidence"])["jurisdiction"] == "title" and json.loads(t.loc[0, "links"]) == []


@pytest.mark.skipif(not LAWREFBOOK.is_file(), reason="shared LawRefBook corpus not present")
def test_jurisdiction_without_columns_on_lawrefbook_local_regulations():
    """The first 400 local regulations of LawRefBook: the province of the jurisdiction inferred from title and
    text alone matches their ``region`` for at least 98 %."""
    divs = load_divisions()
    with gzip.open(LAWREFBOOK, "rt", encoding="utf-8") as fh:
        rows = list(islice((r for r in map(json.loads, fh) if r["level"] == "地方性法规"), 400))
    hits = 0
    for r in rows:
        code = extract_record({"doc_id": r["id"], "title": r["title"], "text": r["text"]}).jurisdiction_code
        prov = province_of(code) if code else None
        hits += prov is not None and divs[prov].short[0] == r["region"]
    assert hits / len(rows) >= 0.98, hits / len(rows)


def test_records_import_keeps_metadata_columns_and_the_record_uses_them(tmp_path):
    from crawler.records_import import ColumnMapping, read_records

    f = tmp_path / "laws.jsonl"
    f.write_text(json.dumps({"id": 7, "title": "青岛市某某条例", "text": "第一条 ……", "region": "山东", "expired": True,
                             "valid_from": "2020-01-01", "date": "2019-11-30"}, ensure_ascii=False) + "\n",
                 encoding="utf-8")
    m = ColumnMapping(region_column="region", validity_column="expired", effective_column="valid_from",
                      published_column="date")
    docs, _, rejects = read_records(f, m)
    row = docs.iloc[0].to_dict()
    assert not rejects and (row["region"], row["validity"]) == ("山东", "true")
    assert (row["effective_date"], row["pubtime"]) == (date(2020, 1, 1), date(2019, 11, 30))
    r = extract_record(row, columns=m.metadata())
    assert (r.jurisdiction_code, r.evidence["jurisdiction"]) == ("370200", "column:region+title")  # 青岛 ⊂ 山东
    assert (r.validity, r.evidence["validity"], r.evidence["effective_date"]) == ("失效", "column:expired",
                                                                                  "column:valid_from")


def test_csv_import_maps_extra_metadata_columns(tmp_path):
    from crawler.csv_import import InputError, read_corpus_csv

    f = tmp_path / "c.csv"
    f.write_text("title,pubtime,channel,describes,contentText,地区,有效性,文号\n"
                 "关于数据工作的通知,2023-01-05,某网站,x,正文内容,浙江省,已废止,浙政发[2023]1号\n", encoding="utf-8")
    docs, _ = read_corpus_csv(f, metadata={"region_column": "地区", "validity_column": "有效性",
                                           "doc_number_column": "文号"})
    row = docs.iloc[0].to_dict()
    assert (row["region"], row["validity"], row["doc_number"]) == ("浙江省", "已废止", "浙政发[2023]1号")
    r = extract_record(row, columns={"region_column": "地区", "validity_column": "有效性", "doc_number_column": "文号"})
    assert (r.jurisdiction_code, r.validity, r.doc_number, r.evidence["doc_number"]) == (
        "330000", "废止", "浙政发〔2023〕1号", "column:文号")
    with pytest.raises(InputError, match="no column '省份'"):
        read_corpus_csv(f, metadata={"region_column": "省份"})


def test_header_table_of_a_page_gives_issuer_number_and_validity():
    from bs4 import BeautifulSoup

    from crawler.html_header import read_header

    html = ("<html><body><table>"
            "<tr><td>索 引 号：</td><td>11330000002482870R/2023-00123</td><td>发文机关：</td><td>浙江省人民政府</td></tr>"
            "<tr><td>发文字号：</td><td>浙政发〔2023〕5号</td><td>成文日期：</td><td>2023年3月1日</td></tr>"
            "<tr><td>有效性：</td><td>已失效</td><td>发布日期：</td><td>2023-03-05</td></tr>"
            "</table><div>各市、县人民政府：现将有关事项通知如下……</div></body></html>")
    header = read_header(BeautifulSoup(html, "lxml"))
    assert header.fields["validity"] == "已失效"
    r = extract_record({"doc_id": "p", "title": "关于数据工作的通知", "text": "现将有关事项通知如下"}, header=header,
                       source_owner="杭州市人民政府")
    assert (r.jurisdiction_code, r.evidence["jurisdiction"]) == ("330000", "header:发文机关")
    assert (r.doc_number, r.written_date, r.published_date) == ("浙政发〔2023〕5号", date(2023, 3, 1), date(2023, 3, 5))
    assert (r.validity, r.evidence["validity"]) == ("失效", "header:有效性")


@pytest.mark.slow  # validate() loads the profiles (model imports): ~25 s
def test_cli_metadata_flags_reach_a_csv_and_plain_flags_do_not(tmp_path):
    from crawler.csv_import import InputError
    from flows.cli import column_mapping, parser, validate

    f = tmp_path / "c.csv"
    f.write_text("title,pubtime,channel,describes,contentText,地区\n通知,2023-01-05,站,x,正文,浙江\n", encoding="utf-8")
    base = ["--input", str(f), "--data-dir", str(tmp_path / "d")]
    args = parser().parse_args([*base, "--region-column", "地区", "--doc-number-column", "文号"])
    assert column_mapping(args) == {"region_column": "地区", "doc_number_column": "文号"}
    with pytest.raises(InputError, match="no column '文号'"):
        validate(args)
    validate(parser().parse_args([*base, "--region-column", "地区"]))
    with pytest.raises(ValueError, match="--title-column applies to JSON Lines"):
        validate(parser().parse_args([*base, "--title-column", "t"]))


def test_metadata_columns_travel_from_import_through_clean_to_the_record(tmp_path):
    from corpus.clean import CleanConfig
    from corpus.stages import clean_stage, import_documents

    f = tmp_path / "laws.jsonl"
    rows = [{"id": i, "title": t, "region": reg, "expired": exp, "date": "2020-05-14",
             "text": f"第一条 为了规范{t}相关工作，结合本地实际，制定本条例。\n第二条 本条例自2020年6月1日起施行。" * 3}
            for i, (t, reg, exp) in enumerate([("上海市口岸条例", "上海", False), ("某某管理条例", None, True)])]
    f.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    cols = {"id_column": "id", "region_column": "region", "published_column": "date", "validity_column": "expired"}
    import_documents(f, tmp_path / "documents", columns=cols)
    clean_stage(tmp_path / "documents", tmp_path / "clean", tmp_path / "rejects", CleanConfig())
    region = read_table(tmp_path / "clean")["region"]
    assert region.iloc[0] == "上海" and pd.isna(region.iloc[1])
    policy_records_stage(tmp_path / "clean", tmp_path / "out", columns=cols, registry=None, as_of="2026-01-01")
    t = read_table(tmp_path / "out")
    t = t.astype(object).where(t.notna(), None)
    ev = [json.loads(e) for e in t["evidence"]]
    assert t["jurisdiction_name"].tolist() == ["上海市", "全国"] and t["validity"].tolist() == ["有效", "失效"]
    assert [e.get("jurisdiction") for e in ev] == ["column:region", "title:法/条例"]
    assert [e["validity"] for e in ev] == ["column:expired", "column:expired"]
    assert t["effective_date"].tolist() == [date(2020, 6, 1)] * 2
