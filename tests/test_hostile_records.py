"""Hostile record imports, second round (crawler/records_import.py, crawler/csv_import.py): every bad
record is a reject with its line/row number and reason, or the file is one clear InputError; no traceback."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tracemalloc

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from crawler.csv_import import InputError, read_corpus_csv
from crawler.records_import import ColumnMapping, read_records
from tests.conftest import REPO, write_corpus

GOOD = {"id": "a", "title": "数据安全法", "text": "第一条 为了规范数据处理活动，保障数据安全。"}


def _write(path, lines: list[bytes]):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_hostile_lines_are_rejects_with_their_line_numbers(tmp_path):
    lines = [json.dumps(GOOD, ensure_ascii=False).encode(),
             b"[" * 100_000 + b"]" * 100_000,                                   # 2: nested 100k levels
             b'{"id": "b", "text": "x", "n": ' + b"9" * 5000 + b"}",            # 3: a 5,000-digit integer
             b'{"id": "c", "text": "bad \\ud800 surrogate"}',                   # 4: a lone surrogate
             b'{"id": "d", "text": "bad \xff byte"}',                           # 5: invalid UTF-8
             b'{"id": "e", "text": {"nested": "dict"}}',                        # 6: text is a dict
             b'{"id": "f", "text": "ok", "title": ["a", "list"]}',              # 7: title is a list
             b'{"id": 1, "text": "number id"}',
             b'{"id": "1", "text": "string id"}',                               # 9: "1" vs 1
             b'{"id": {"x": 1}, "text": "dict id"}',                            # 10
             json.dumps({**GOOD, "id": "z"}, ensure_ascii=False).encode()]
    docs, report, rejects = read_records(_write(tmp_path / "h.jsonl", lines), ColumnMapping())
    assert docs["external_id"].tolist() == ["a", "1", "z"] and report.rows == 11
    got = {r["line"]: r["reason"] for r in rejects}
    assert sorted(got) == [2, 3, 4, 5, 6, 7, 9, 10]
    assert "nested too deep" in got[2] and "not JSON" in got[3] and "surrogate" in got[4]
    assert "not UTF-8" in got[5] and "'text' is dict" in got[6] and "'title' is list" in got[7]
    assert "a string here, a number on line 8" in got[9] and "'id' is dict" in got[10]
    assert not any("{" in t or "[" in t for t in docs["text"].tolist() + docs["title"].tolist())


def test_gzip_bomb_is_read_in_bounded_memory(tmp_path):
    bomb = tmp_path / "bomb.jsonl.gz"
    with gzip.open(bomb, "wb", compresslevel=9) as fh:
        fh.write(json.dumps(GOOD, ensure_ascii=False).encode() + b"\n")
        for _ in range(48):
            fh.write(b" " * (1 << 20))   # 48 MiB without a newline
        fh.write(b"\n" + json.dumps({**GOOD, "id": "b"}, ensure_ascii=False).encode() + b"\n")
    assert bomb.stat().st_size < 200_000
    tracemalloc.start()
    docs, _, rejects = read_records(bomb, ColumnMapping(), max_line_bytes=4 << 20)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert docs["external_id"].tolist() == ["a", "b"] and rejects == [{"line": 2, "reason": f"line over {4 << 20} bytes"}]
    assert peak < 32 << 20
    with pytest.raises(InputError, match="more than 16777216 bytes after decompression"):
        read_records(bomb, ColumnMapping(), max_line_bytes=4 << 20, max_inflated_bytes=16 << 20)


@pytest.mark.parametrize("column", [pa.array([b"a", b"b"], pa.binary()), pa.array([["a"], ["b"]]),
                                    pa.array([{"x": "a"}, {"x": "b"}])], ids=["binary", "list", "struct"])
def test_parquet_text_column_of_the_wrong_type_is_one_clear_error(tmp_path, column):
    pq.write_table(pa.table({"id": ["1", "2"], "text": column}), tmp_path / "t.parquet")
    with pytest.raises(InputError, match=r"column 'text' \(text\) is of type .*, not string"):
        read_records(tmp_path / "t.parquet", ColumnMapping())


def test_parquet_integer_ids_with_nulls_still_import(tmp_path):
    pd.DataFrame({"id": pd.array([1, None, 3], "Int64"), "text": ["一", "二", "三"]}).to_parquet(tmp_path / "i.parquet")
    docs, _, rejects = read_records(tmp_path / "i.parquet", ColumnMapping(title_column=None))
    assert docs["external_id"].tolist() == ["1", "3"] and rejects == [{"line": 2, "reason": "no 'id' field"}]


def test_csv_with_an_invalid_byte_names_its_line(tmp_path):
    p = write_corpus(tmp_path / "c.csv", [{"title": f"t{i}", "pubtime": "2023-01-01", "contentText": "正文" * 20}
                                         for i in range(4)])
    data = p.read_bytes().split(b"\n")
    data[3] = data[3].replace("正文".encode(), b"\xff", 1)
    p.write_bytes(b"\n".join(data))
    with pytest.raises(InputError, match=r"line 4, byte \d+: not UTF-8"):
        read_corpus_csv(p)


def test_cli_check_of_a_hostile_file_reads_it_as_rejects_not_a_traceback(tmp_path):
    """The start-up check reads the whole file: hostile lines are rejects there too (the run then stops at
    the next check, a bad --set, with its one error line: nothing ran)."""
    lines = [json.dumps(GOOD, ensure_ascii=False).encode(), b"[" * 100_000 + b"]" * 100_000,
             b'{"id": "b", "text": "x", "n": ' + b"9" * 5000 + b"}"]
    src = _write(tmp_path / "h.jsonl", lines)
    r = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(src), "--data-dir",
                        str(tmp_path / "data"), "--profile", "tiny", "--set", "no_such.setting=1"],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stderr.strip().startswith("error:") and "no_such" in r.stderr
