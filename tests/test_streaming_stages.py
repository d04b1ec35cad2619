"""Streaming text stages (SPEC §1): shard by shard, the same bytes whatever the shard size.

A corpus of a few hundred small documents (sentences of the real policy corpus, with exact and near
duplicates published earlier than their originals) goes through every text stage twice: with tiny
groups (7 documents, 50-row batches and parts, many dedup buckets) and in one piece. Every output table
must have the same shards (sha256) and content fingerprint.
"""
import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from corpus import shards as SH
from corpus import stages as S
from corpus.clean import CleanConfig
from corpus.pairs import PairConfig, build_pairs
from corpus.sentences import SentenceConfig, split_sentences
from corpus.vocab import VocabConfig, build_vocab, load_stopwords
from storage import manifest_fingerprint, read_manifest, read_table, write_table
from storage.tables import TableWriter, iter_table, write_table_stream
from tests.conftest import SHARED_CORPUS

OUTPUTS = ("documents_clean", "rejects", "sentences", "segments", "vocab", "policysm1", "policysm2")


@pytest.fixture(scope="module")
def corpus_file(real_corpus, tmp_path_factory):
    """~300 documents of 6-14 real sentences each; every 25th is followed by an exact copy and every 20th
    by a near copy (one sentence cut), both dated a year *earlier* than the original."""
    from crawler.csv_import import read_corpus_csv

    docs, _ = read_corpus_csv(real_corpus)
    sents = [s for t in docs["text"].head(40) for s in split_sentences(t.replace("\n", ""))]
    rng = np.random.default_rng(5)
    recs, i, n = [], 0, 0
    while n < 300 and i + 14 < len(sents):
        k = int(rng.integers(6, 15))
        text = "".join(sents[i:i + k])
        i += k
        recs.append({"id": f"d{n:04d}", "title": f"文件{n}", "text": text, "date": "2021-06-01"})
        if n % 25 == 3:
            recs.append({"id": f"d{n:04d}-copy", "title": "副本", "text": text + " ", "date": "2020-06-01"})
        if n % 20 == 7 and k > 8:
            recs.append({"id": f"d{n:04d}-near", "title": "近似", "text": text[:-12], "date": "2020-06-01"})
        n += 1
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in recs), encoding="utf-8")
    return path


def _run(corpus_file, d, shard_docs: int, tiny: bool, monkeypatch) -> None:
    if tiny:
        monkeypatch.setattr(SH, "READ_BATCH_ROWS", 50)
        monkeypatch.setattr(S, "BUCKET_PAIRS", 3000)  # ~20 key ranges
    else:
        monkeypatch.setattr(SH, "READ_BATCH_ROWS", 10**9)
        monkeypatch.setattr(S, "BUCKET_PAIRS", 10**9)
    cols = {"id_column": "id", "title_column": "title", "pubtime_column": "date"}
    S.import_documents(corpus_file, d / "documents", columns=cols, rows_per_shard=50 if tiny else 50_000)
    S.clean_stage(d / "documents", d / "documents_clean", d / "rejects",
                  CleanConfig(near_dup_threshold=0.8, shard_docs=shard_docs))
    S.sentences_stage(d / "documents_clean", d / "sentences", SentenceConfig(shard_docs=shard_docs))
    plan = S.segment_plan(d / "sentences", 3 if tiny else 1)
    parts = [S.segment_part(d / "sentences", plan, i, d / f"part-{i}.parquet", "hanlp-dict", cache_root=d / "cache",
                            chunk_rows=50 if tiny else 10**9) for i in range(len(plan["ranges"]))]
    S.merge_segments(d / "sentences", parts, d / "segments", "hanlp-dict", cache_root=d / "cache")
    S.vocab_stage(d / "segments", d / "vocab", str(SHARED_CORPUS / "stopwords.txt"),
                  VocabConfig(min_freq=2, shard_docs=shard_docs))
    S.datasets_stage(d / "sentences", d / "documents_clean", S.DATASETS.write_paths(d),
                     PairConfig(group_docs=16, shard_docs=shard_docs), rows_per_shard=500)


@pytest.fixture(scope="module")
def runs(corpus_file, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        tiny, whole = tmp_path_factory.mktemp("tiny"), tmp_path_factory.mktemp("whole")
        _run(corpus_file, tiny, 7, True, mp)
        _run(corpus_file, whole, 100_000, False, mp)
    finally:
        mp.undo()
    return tiny, whole


@pytest.mark.slow  # shares the ~25 s fixture that runs every stage twice
def test_every_stage_is_byte_identical_whatever_the_shard_size(runs):
    tiny, whole = runs
    assert len(read_manifest(tiny / "documents")["shards"]) > 5  # the input itself was sharded differently
    for name in OUTPUTS:
        a, b = read_manifest(tiny / name), read_manifest(whole / name)
        assert [(s["path"], s["sha256"]) for s in a["shards"]] == [(s["path"], s["sha256"]) for s in b["shards"]], name
        assert manifest_fingerprint(tiny / name) == manifest_fingerprint(whole / name), name
        drop = {"parts"}  # the segmentation part count is recorded, not part of the content
        assert a["rows"] == b["rows"] and {k: v for k, v in a["stats"].items() if k not in drop} == {
            k: v for k, v in b["stats"].items() if k not in drop}, name
    assert read_manifest(tiny / "policysm2")["rows"] > 1000


@pytest.mark.slow  # shares the ~25 s fixture that runs every stage twice
def test_vocab_counts_merged_equal_whole_table_counts(runs):
    tiny, _ = runs
    segs = read_table(tiny / "segments")
    vocab, stats = build_vocab(segs["words"], segs["doc_id"], load_stopwords(SHARED_CORPUS / "stopwords.txt"),
                               VocabConfig(min_freq=2))
    ours = read_table(tiny / "vocab")
    pd.testing.assert_frame_equal(ours, vocab, check_dtype=False)
    assert (tiny / "vocab" / "vocab.txt").read_text(encoding="utf-8").split() == vocab["word"].tolist()
    m = read_manifest(tiny / "vocab")["stats"]
    assert {k: m[k] for k in stats} == stats and stats["size"] > 100


@pytest.mark.slow  # shares the ~25 s fixture that runs every stage twice
def test_dedup_keeps_the_earliest_copy(runs):
    tiny, _ = runs
    rej = read_table(tiny / "rejects")
    reasons = dict(zip(rej["doc_id"], zip(rej["reason"], rej["detail"])))
    docs = read_table(tiny / "documents", ["doc_id", "external_id"])
    doc_of = dict(zip(docs["external_id"], docs["doc_id"]))
    clean_ids = set(read_table(tiny / "documents_clean", ["doc_id"])["doc_id"])
    copies = [e for e in doc_of if e.endswith(("-copy", "-near"))]
    assert len(copies) >= 20
    for c in copies:  # the copy is a year earlier: it stays, the original is the duplicate
        orig = doc_of[c.rsplit("-", 1)[0]]
        assert doc_of[c] in clean_ids and orig not in clean_ids
        kind = "exact" if c.endswith("-copy") else "near"
        assert reasons[orig] == (f"{kind}_duplicate", f"duplicate of {doc_of[c]}")
    kept_copies = {f"duplicate of {doc_of[c]}" for c in copies}
    assert sum(d in kept_copies for d in rej["detail"]) == len(copies)  # other rejects: real near-dups, English


@pytest.mark.slow  # shares the ~25 s fixture that runs every stage twice
def test_pairs_are_the_in_memory_pairs_and_balanced(runs):
    tiny, _ = runs
    sents = read_table(tiny / "sentences", ["doc_id", "sent_idx", "clauses"])
    split_of = S.document_splits(tiny / "documents_clean", PairConfig())
    for name in ("policysm1", "policysm2"):
        mem, stats = build_pairs(sents, split_of, name, PairConfig(group_docs=16))
        for split in ("train", "dev", "test"):
            ours = read_table(tiny / name, partition={"split": split})
            want = mem[mem["split"] == split].reset_index(drop=True)
            assert ours["pair_id"].tolist() == want["pair_id"].tolist()
            assert ours["label"].tolist() == want["label"].tolist()
        m = read_manifest(tiny / name)["stats"]
        assert {k: m[k] for k in ("pairs", "per_kind", "dropped")} == {k: stats[k] for k in ("pairs", "per_kind", "dropped")}
        all_pairs = read_table(tiny / name)
        assert not all_pairs.duplicated(["text_a", "text_b"]).any()
        assert all(split_of[a] == s == split_of[b] for a, b, s in zip(all_pairs.doc_a, all_pairs.doc_b, all_pairs.split))
        pos, neg = (all_pairs.label == 1).sum(), (all_pairs.label == 0).sum()
        if name == "policysm1":
            assert 0.9 < neg / pos <= 1.0
        else:
            assert 3 < neg / pos <= 5


@pytest.mark.slow  # shares the ~25 s fixture that runs every stage twice
def test_doc_groups_do_not_depend_on_batches(runs):
    tiny, _ = runs
    a = [g["doc_id"].unique().tolist() for g in SH.iter_doc_groups(tiny / "sentences", ["text"], 7, batch_rows=13)]
    b = [g["doc_id"].unique().tolist() for g in SH.iter_doc_groups(tiny / "sentences", ["text"], 7, batch_rows=10**6)]
    assert a == b and all(len(g) == 7 for g in a[:-1]) and 1 <= len(a[-1]) <= 7
    assert sum(map(len, a)) == read_table(tiny / "sentences", ["doc_id"])["doc_id"].nunique()


@pytest.mark.parametrize("partition_by", [None, "split"])
def test_table_writer_matches_write_table(tmp_path, partition_by):
    rng = np.random.default_rng(1)
    n = 1234
    df = pd.DataFrame({"x": rng.integers(0, 1000, n), "t": [f"文本{i}" * int(rng.integers(1, 5)) for i in range(n)],
                       "l": [[str(j) for j in range(i % 4)] for i in range(n)],
                       "split": rng.choice(["train", "dev", "test"], n)})
    whole = write_table(df, tmp_path / "a", name="t", rows_per_shard=100, partition_by=partition_by, stats={"k": 1})
    with TableWriter(tmp_path / "b", name="t", rows_per_shard=100, partition_by=partition_by) as w:
        for lo in range(0, n, 37):
            w.write(df.iloc[lo:lo + 37])
        w.stats = {"k": 1}
    assert w.manifest == whole
    assert (tmp_path / "a" / "manifest.json").read_bytes() == (tmp_path / "b" / "manifest.json").read_bytes()
    streamed = write_table_stream((pa.Table.from_pandas(df.iloc[lo:lo + 250], preserve_index=False)
                                   for lo in range(0, n, 250)), tmp_path / "c", name="t", rows_per_shard=100,
                                  partition_by=partition_by, stats={"k": 1})
    assert streamed == whole
    got = pd.concat(iter_table(tmp_path / "b", batch_rows=30), ignore_index=True)
    pd.testing.assert_frame_equal(got, read_table(tmp_path / "a"))


def test_table_writer_publishes_nothing_on_error(tmp_path):
    write_table(pd.DataFrame({"x": [1]}), tmp_path / "t", name="t")
    with pytest.raises(RuntimeError):
        with TableWriter(tmp_path / "t", name="t") as w:
            w.write(pd.DataFrame({"x": [2, 3]}))
            raise RuntimeError("stop")
    assert read_table(tmp_path / "t")["x"].tolist() == [1]
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
    empty = write_table_stream([], tmp_path / "e", name="e", schema=pa.schema([("x", pa.int64())]))
    assert empty == write_table(pd.DataFrame({"x": pd.Series([], dtype="int64")}), tmp_path / "f", name="e")
