"""crawler/records_import.py: JSON Lines (plain, gzip) and Parquet input with a column mapping."""
from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pandas as pd
import pytest

from corpus import stages as S
from crawler.csv_import import InputError
from crawler.records_import import ColumnMapping, read_records
from storage import read_manifest, read_table
from tests.conftest import REPO

STATUTES = [
    {"article_id": "art-1", "law_title": "中华人民共和国数据安全法", "text": "第一条 为了规范数据处理活动，保障数据安全，促进数据开发利用。"},
    {"article_id": "art-2", "law_title": "中华人民共和国个人信息保护法", "text": "第二条 自然人的个人信息受法律保护\x00。"},
]
MAPPING = ColumnMapping(id_column="article_id", text_column="text", title_column="law_title")


def _jsonl(path, lines):
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_jsonl_bad_lines_are_rejects_with_their_line_numbers(tmp_path):
    lines = [json.dumps(STATUTES[0], ensure_ascii=False), "{not json", "[1, 2]",
             json.dumps({"article_id": "art-3", "text": "  "}), json.dumps({"article_id": "art-4"}),
             json.dumps(STATUTES[0], ensure_ascii=False), json.dumps(STATUTES[1], ensure_ascii=False)]
    docs, report, rejects = read_records(_jsonl(tmp_path / "a.jsonl", lines), MAPPING)
    assert docs["external_id"].tolist() == ["art-1", "art-2"] and report.rows == 7
    assert [r["line"] for r in rejects] == [2, 3, 4, 5, 6]
    assert "not JSON" in rejects[0]["reason"] and "repeated id" in rejects[-1]["reason"]
    assert docs["title"].tolist() == ["中华人民共和国数据安全法", "中华人民共和国个人信息保护法"]
    assert "\x00" not in docs["text"].iloc[1] and docs["doc_id"].str.len().eq(16).all()


def test_gzip_and_parquet_give_the_same_documents(tmp_path):
    lines = [json.dumps(r, ensure_ascii=False) for r in STATUTES]
    with gzip.open(tmp_path / "a.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(lines))
    pd.DataFrame(STATUTES).to_parquet(tmp_path / "a.parquet")
    a, _, _ = read_records(tmp_path / "a.jsonl.gz", MAPPING)
    b, _, _ = read_records(tmp_path / "a.parquet", MAPPING)
    pd.testing.assert_frame_equal(a.drop(columns="raw_sha256"), b.drop(columns="raw_sha256"))


def test_no_document_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no document with text"):
        read_records(_jsonl(tmp_path / "a.jsonl", ['{"id": 1}']), ColumnMapping())
    with pytest.raises(InputError, match="not a JSON Lines or Parquet"):
        read_records(_jsonl(tmp_path / "a.txt", ['{"id": 1}']), ColumnMapping())


def test_import_stage_keeps_the_external_id_and_records_rejects(tmp_path):
    lines = [json.dumps(r, ensure_ascii=False) for r in STATUTES] + ["oops"]
    src = _jsonl(tmp_path / "pool.jsonl", lines)
    stats = S.import_documents(src, tmp_path / "documents", columns={"id_column": "article_id",
                                                                     "title_column": "law_title"})
    assert stats["documents"] == 2 and stats["rejects"] == [{"line": 3, "reason": stats["rejects"][0]["reason"]}]
    docs = read_table(tmp_path / "documents")
    assert docs["external_id"].tolist() == ["art-1", "art-2"]
    assert read_manifest(tmp_path / "documents")["stats"]["rejected_records"] == 1


def test_cli_names_a_mapping_that_finds_no_text(tmp_path):
    src = _jsonl(tmp_path / "pool.jsonl", [json.dumps(r, ensure_ascii=False) for r in STATUTES])
    res = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(src), "--data-dir",
                          str(tmp_path / "d"), "--text-column", "body", "--profile", "tiny"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stderr.strip().startswith("error:") and "'body'" in res.stderr
    assert not (tmp_path / "d" / "documents").exists()


def test_external_id_reaches_every_chunk_and_search_hit(tmp_path):
    """Documents with an external id (as a JSON Lines import gives them) keep it through chunking and
    the index into each search hit."""
    from retrieval.chunks import ChunkConfig
    from retrieval.retrievers import Retriever
    from retrieval.stages import index_stage
    from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

    docs = policy_docs()
    docs["external_id"] = [f"ext-{i}" for i in range(len(docs))]
    clean = write_clean(docs, tmp_path / "documents_clean")
    ckpt = save_tiny_policybert(tmp_path / "ckpt", seed=0)
    index_stage(clean, ckpt, tmp_path / "index", ChunkConfig(max_chars=200, overlap=40), sparse=None)
    hits = Retriever(tmp_path / "index").search("乡村振兴", k=5, mode="dense")
    assert len(hits) == 5
    by_doc = dict(zip(docs["doc_id"], docs["external_id"]))
    assert all(h.external_id == by_doc[h.doc_id] for h in hits)
