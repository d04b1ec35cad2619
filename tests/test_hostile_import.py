"""Bad import CSVs: an unbalanced quote must not merge rows silently; it is one
``error:`` line naming the line. Control characters (NUL …) leave every field."""
import csv
import subprocess
import sys

import pytest

from crawler.csv_import import InputError, read_corpus_csv
from tests.conftest import REPO

HEADER = ["title", "pubtime", "channel", "describes", "contentText"]
BODY = "数据作为新型生产要素，是数字化、网络化、智能化的基础。已快速融入生产、分配、流通、消费和社会服务管理等各环节。"


def rows(n=5, body_len=40):
    return [[f"关于推进数据要素发展的通知{i}", f"2023-01-0{i}", "中国政府网", f"[{i}] 来源{i}", (BODY * body_len)[: 400 + i]]
            for i in range(1, n + 1)]


def write(path, records, quoting=csv.QUOTE_MINIMAL):
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, quoting=quoting)
        w.writerow(HEADER)
        w.writerows(records)
    return path


def corrupt_line(path, lineno, fn):
    with open(path, encoding="utf-8", newline="") as fh:
        lines = fh.read().split("\r\n")
    lines[lineno - 1] = fn(lines[lineno - 1])
    with open(path, "w", encoding="utf-8", newline="") as fh:
        fh.write("\r\n".join(lines))
    return path


def test_unbalanced_quote_swallowing_rows_is_an_error_naming_the_line(tmp_path):
    recs = rows()
    recs[3][4] = "正文，含逗号，所以被引号括起"  # row 5 has a quoted field: the stray quote closes there
    p = corrupt_line(write(tmp_path / "a.csv", recs), 3, lambda ln: '"' + ln)  # row 2 is physical line 3
    with pytest.raises(InputError, match=r"line 3: ") as e:
        read_corpus_csv(p)
    assert "\n" not in str(e.value)
    # a stray quote that closes legally further down (the strict parse passes): the title holds 4 records
    lines = [",".join(HEADER)] + [",".join(r) for r in rows()]
    lines[2], lines[5] = '"' + lines[2], lines[5].replace(",", '",', 1)
    p = tmp_path / "b.csv"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"line 3: title is [\d,]+ chars, over 500 \(record spans lines 3-6"):
        read_corpus_csv(p)


def test_wrong_field_count_and_outlier_fields_name_their_line(tmp_path):
    p = corrupt_line(write(tmp_path / "c.csv", rows()), 4, lambda ln: ln + ",extra")
    with pytest.raises(InputError, match=r"line 4: record has 6 fields, the header 5"):
        read_corpus_csv(p)
    recs = rows()
    recs[2][3] = "来源" * 300  # 600 chars among ~6-char citations
    with pytest.raises(InputError, match=r"line 4: describes is 600 chars, \d+x its column's median"):
        read_corpus_csv(write(tmp_path / "d.csv", recs))
    recs = rows()
    recs[1][0] = "标题" * 400
    with pytest.raises(InputError, match=r"line 3: title is 800 chars, over 500"):
        read_corpus_csv(write(tmp_path / "e.csv", recs))


def test_cli_reports_one_error_line_and_exit_2(tmp_path):
    recs = rows()
    recs[3][4] = "正文，含逗号"
    p = corrupt_line(write(tmp_path / "f.csv", recs), 3, lambda ln: '"' + ln)
    res = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(p), "--data-dir",
                          str(tmp_path / "data"), "--profile", "tiny"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    err = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2 and len(err) == 1 and err[0].startswith("error: ") and "line 3" in err[0], err


def test_good_csv_keeps_every_row_and_loses_control_characters(tmp_path):
    recs = rows()
    recs[0][0] = "关于\x00数据\x07要素的\x1b通知"
    recs[1][2] = "中国\x00政府网"
    recs[2][4] = "正文\x00含有\x0c控制字符。" + BODY
    recs[3][0] = "多行\n标题"  # a title over two lines is legitimate (the real corpus has them)
    docs, rep = read_corpus_csv(write(tmp_path / "g.csv", recs, quoting=csv.QUOTE_ALL))
    assert len(docs) == 5 and rep.rows == 5
    for col in ("title", "source", "text", "citation"):
        for value in docs[col]:
            assert not any(ord(c) < 32 and c not in "\n\t\r" for c in value), (col, repr(value))
    assert docs["title"][0] == "关于数据要素的通知" and docs["source"][1] == "中国政府网"
    assert docs["title"][3] == "多行 标题"


def test_real_corpus_passes_the_structure_checks(real_corpus):
    docs, rep = read_corpus_csv(real_corpus)
    assert len(docs) == rep.rows == 99
