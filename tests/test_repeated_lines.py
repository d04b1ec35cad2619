"""The clean stage's repeated-line rule (C4 / CCNet, per source; SPEC §3): a line in more than
``repeat_share`` of one source's distinct documents is site chrome, in sources of at least
``repeat_min_docs`` documents; document structure (table rows, numbered headings, the addressee line,
the signature above the date) is never removed; counts per source in the stage's stats and the report."""
import pandas as pd
import pytest

from corpus import stages as S
from corpus.clean import CleanConfig, countable_lines
from corpus.report import repeated_lines_section
from storage import read_table, write_table

FOOTER = "本网站由示范市大数据中心维护，联系电话12345"


def _doc(i: int, source: str, lines: list[str]) -> dict:
    body = f"为推进第{i}项数据要素工作，现将有关事项通知如下。第{i}项工作由市数据局牵头负责，各区配合落实。"
    return {"doc_id": f"{source}-{i:03d}", "source_id": source, "source": source, "text": "\n".join(lines[:3] + [body] + lines[3:])}


def _corpus() -> pd.DataFrame:
    rows = []
    for i in range(24):  # source A: a footer on every page; structure and a formula on many
        tail = ["特此通知。"] if i < 10 else []
        rows.append(_doc(i, "A", ["各区人民政府，市政府各委、办、局：", "第一章 总则", "序号\t名称\t责任单位"]
                         + tail + ["示范市人民政府办公厅", f"2024年{i % 12 + 1}月{i + 1}日", FOOTER]))
    for i in range(20):  # source B: one page cited 25 times (exact copies count once)
        rows += [_doc(i, "B", ["B源第0篇独有的一句话说明"] if i == 0 else [])] * (26 if i == 0 else 1)
    for i in range(10):  # source C: a shared footer, but too few documents to judge
        rows.append(_doc(i, "C", [FOOTER]))
    docs = pd.DataFrame(rows)
    docs["doc_id"] = [f"{d}-{k}" for k, d in enumerate(docs["doc_id"])]
    docs = docs.reindex(columns=S.DOCUMENTS_SCHEMA.names)
    for col in ("pubtime", "written_date", "fetched_at"):
        docs[col] = pd.Series([None] * len(docs), dtype=object)
    return docs


def _clean(tmp_path, cfg: CleanConfig) -> tuple[dict, pd.DataFrame]:
    write_table(_corpus(), tmp_path / "documents", name="documents", schema=S.DOCUMENTS_SCHEMA)
    st = S.clean_stage(tmp_path / "documents", tmp_path / "clean", tmp_path / "rejects", cfg)
    return st, read_table(tmp_path / "clean")


def test_repeated_lines_go_per_source_and_structure_stays(tmp_path):
    st, clean = _clean(tmp_path, CleanConfig(shard_docs=7, near_dup_threshold=0))
    assert st["repeated_lines"] == {"A": {"documents": 24, "lines_removed": 24, "distinct_lines": 1,
                                          "examples": [FOOTER]}}
    assert st["rule_matches"]["repeated_lines"] == 24
    a = clean[clean["source_id"] == "A"]["text"]
    assert not a.str.contains(FOOTER).any()
    for kept in ("各区人民政府", "第一章总则", "序号", "示范市人民政府办公厅", "为推进第"):  # structure and text stay
        assert a.str.replace(" ", "").str.contains(kept).all(), kept
    assert a.str.contains("特此通知").sum() == 10  # on 10 of 24 pages: under the share, kept
    assert clean[clean["source_id"] == "C"]["text"].str.contains("大数据中心维护").all()  # 10 < repeat_min_docs
    assert clean[clean["source_id"] == "B"]["text"].str.contains("B源第0篇独有").any()  # 1 of 20 distinct pages
    md = repeated_lines_section(tmp_path / "clean")
    assert "| A | 24 | 24 | 1 | 本网站由示范市大数据中心维护" in md and "more than 0.5 of a source" in md


def test_repeated_line_rule_off_and_bounds(tmp_path):
    st, clean = _clean(tmp_path, CleanConfig(repeat_share=1.0, near_dup_threshold=0))
    assert st["repeated_lines"] == {} and clean["text"].str.contains("大数据中心维护").sum() == 34
    assert "None removed" in repeated_lines_section(tmp_path / "clean")
    for bad in ({"repeat_share": 0.0}, {"repeat_share": 1.5}, {"repeat_min_docs": 1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            CleanConfig(**bad)


def test_countable_lines_skip_document_structure():
    text = "各省、自治区人民政府：\n一、总体要求\n序号\t名称\n正文一句。\n国务院办公厅\n2024年3月1日\n（完）"
    assert [k for _, k in countable_lines(text)] == ["正文一句。", "2024年3月1日", "（完）"]
