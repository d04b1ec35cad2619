"""The evaluation harness (evaluation/): every set behind one loader protocol, read from the real shared files
(NCPQA, LeCoQA over its statute pool, the public sets) or from a documents_clean table the test writes (known-item
titles), with the files' sha256 recorded; question files of the wrong shape refused by name; the one report
writer's mean ± std, difference to the reference and 2-std rule, written atomically."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from evaluation import loader, read_questions, set_names, write_report
from evaluation.report import long_rows, summary
from evaluation.sets import QA, QUESTION_COLUMNS
from storage.hashing import file_sha256


def _need(path):
    if not path.is_file():
        pytest.skip(f"shared file not found at {path}")


def test_question_sets_load_with_common_columns_and_sources():
    _need(QA / "ncpqa_questions.jsonl")
    _need(QA / "lecoqa_train.jsonl")
    nc = loader("ncpqa").load()
    assert nc.kind == "answers" and set(QUESTION_COLUMNS) <= set(nc.columns)
    q = nc.splits["all"]
    lines = sum(1 for ln in (QA / "ncpqa_questions.jsonl").read_text(encoding="utf-8").splitlines() if ln.strip())
    assert len(q) == lines and (q["gold"].map(len) == 1).all() and (q["gold"].str[0] == q["ext_doc"]).all()
    assert nc.sources == {str(QA / "ncpqa_questions.jsonl"): file_sha256(QA / "ncpqa_questions.jsonl")}

    lq = loader("lecoqa").load(test_share=0.2, seed=13)
    tr, te = lq.splits["train"], lq.splits["test"]
    assert len(tr) + len(te) == len(lq.splits["all"]) == 1234 and len(lq.pool) == 13003
    key = lambda df: set(df["gold"].map(lambda g: "|".join(sorted(g))))  # noqa: E731
    assert not key(tr) & key(te), "a gold-article set on both sides of the split"
    assert not set(tr["query"]) & set(te["query"])
    pool_ids = set(lq.pool["doc_id"])
    assert all(set(g) <= pool_ids for g in lq.splits["all"]["gold"]), "a gold article missing from the pool"
    assert len(lq.sources) == 2


def test_ncpqa_with_a_store_locates_gold_and_splits_by_document():
    _need(QA / "ncpqa_docs.jsonl")
    from answers.documents import DocumentStore

    docs = pd.read_json(QA / "ncpqa_docs.jsonl", lines=True, dtype={"doc_id": str})
    store = DocumentStore.from_frame(docs.assign(doc_id="p" + docs["doc_id"], external_id=docs["doc_id"]))
    s = loader("ncpqa").load(store=store, test_share=0.3, seed=13)
    q = s.splits["all"]
    assert (q["gold"].str[0] == "p" + q["ext_doc"]).all() and (q["gold_start"] >= 0).mean() > 0.95
    assert not set(s.splits["train"]["doc_id"]) & set(s.splits["test"]["doc_id"])
    assert 0.2 < len(s.splits["test"]) / len(q) < 0.4


def test_titles_and_public_sets_and_unknown_names(tmp_path):
    from storage.tables import write_table

    docs = pd.DataFrame({"doc_id": ["a", "b", "c"], "title": ["关于数据要素的意见", "关于数据要素的意见", "网络安全法"],
                         "citation": ["国发〔2022〕1号", None, ""]})
    write_table(docs, tmp_path / "documents_clean", name="documents_clean")
    t = loader("titles", clean_dir=tmp_path / "documents_clean").load()
    # the title two documents share names neither, so it is no known-item query; empty citations are none
    assert t.splits["test"][["query", "doc_id", "gold"]].values.tolist() == [["国发〔2022〕1号", "a", ["a"]],
                                                                            ["网络安全法", "c", ["c"]]]
    assert list(t.sources) == [str(tmp_path / "documents_clean" / "manifest.json")]
    if (QA.parent / "benchmarks" / "sa").is_dir():
        sa = loader("sa").load()
        assert sa.kind == "seq" and set(sa.splits) == {"train", "dev", "test"} and "dropped" in sa.note
        assert not set(sa.splits["train"]["text"]) & set(sa.splits["test"]["text"])
    with pytest.raises(ValueError, match="unknown evaluation set 'nope'"):
        loader("nope")
    with pytest.raises(ValueError, match="clean_dir"):
        loader("titles")
    assert set_names()[:3] == ("ncpqa", "lecoqa", "titles")


def test_read_questions_refuses_bad_files_by_name(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        read_questions(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match="bad.jsonl"):
        read_questions(bad)
    nogold = tmp_path / "nogold.jsonl"
    nogold.write_text(json.dumps({"qid": 1, "question": "怎么办"}, ensure_ascii=False) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="gold_article_ids or a doc_id"):
        read_questions(nogold)
    ok = tmp_path / "ok.jsonl"
    ok.write_text(json.dumps({"question": "怎么办", "doc_id": 7}, ensure_ascii=False) + "\n", encoding="utf-8")
    q = read_questions(ok)
    assert q[["qid", "query"]].values.tolist() == [["0", "怎么办"]] and q["gold"].iloc[0] == ["7"]
    from evaluation.sets import LecoqaLoader

    with pytest.raises(ValueError, match="gold_article_ids"):  # no gold-article sets to split a doc_id file by
        LecoqaLoader(ok, None).load(test_share=0.2)
    assert LecoqaLoader(ok, None).load(test_share=None).sizes() == {"all": 1}


def test_report_writer_mean_std_reference_and_two_std_rule(tmp_path):
    rows = []
    for seed, (p, g, a) in enumerate([(0.70, 0.71, 0.60), (0.72, 0.73, 0.61), (0.71, 0.72, 0.62)]):
        for model, v in (("plain", p), ("gate", g), ("attn", a)):
            rows += long_rows("policysm1", model, 13 + seed, {"accuracy": v}, train_rows=100, test_rows=50,
                              split="seeded", seconds=10)
    rows += long_rows("policysm1", "overlap-lr", None, {"accuracy": 0.66}, train_rows=100, test_rows=50)
    table = {r["model"]: r for r in summary(pd.DataFrame(rows), published={"policysm1": 0.9})}
    assert table["plain"]["mean ± std"] == "0.7100 ± 0.0100" and table["plain"]["seeds"] == 3
    assert table["gate"]["vs plain"] == "+0.0100" and table["gate"]["> 2 std"] == "no"
    assert table["attn"]["vs plain"] == "-0.1000" and table["attn"]["> 2 std"] == "yes"
    assert table["overlap-lr"]["seeds"] == "-" and table["overlap-lr"]["vs plain"] == ""
    assert table["plain"]["published"] == "0.9000"
    paths = write_report(rows, tmp_path / "rep", "PolicySM-1", sets=[{"set": "policysm1"}])
    assert len(paths["runs"].read_text().splitlines()) == len(rows)
    md = paths["report"].read_text()
    assert md.startswith("PolicySM-1") and "| policysm1 | accuracy | attn | 3 | 0.6100 ± 0.0100 |" in md
    assert "- policysm1: seeded" in md and not list((tmp_path / "rep").glob("*.tmp*"))
    with pytest.raises(ValueError, match="no rows"):
        write_report([], tmp_path / "empty", "x")
