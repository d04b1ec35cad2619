"""Dataset stages on real data: storage loaders, byte-identical reruns, segmentation cache, report."""
import os

import pandas as pd
import pytest

from corpus import stages as S
from corpus.clean import CleanConfig
from corpus.pairs import PairConfig
from corpus.sentences import SentenceConfig
from corpus.vocab import VocabConfig
from storage import read_manifest, read_table
from tests.conftest import SHARED_CORPUS


@pytest.fixture(scope="module")
def text_data(real_slice, tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    S.import_documents(real_slice, d / "documents", SHARED_CORPUS / "policy_sources.csv")
    S.clean_stage(d / "documents", d / "documents_clean", d / "rejects", CleanConfig())
    S.sentences_stage(d / "documents_clean", d / "sentences", SentenceConfig())
    S.segment_stage(d / "sentences", d / "segments", "hanlp-dict", cache_root=d / "cache")
    S.vocab_stage(d / "segments", d / "vocab", str(SHARED_CORPUS / "stopwords.txt"), VocabConfig(min_freq=3))
    S.datasets_stage(d / "sentences", d / "documents_clean", S.DATASETS.write_paths(d), PairConfig(), rows_per_shard=500)
    return d


def test_standard_loaders_read_the_same_rows(text_data):
    ours = read_table(text_data / "policysm1", partition={"split": "train"})
    n = len(ours)
    assert n > 500 and len(read_manifest(text_data / "policysm1")["shards"]) > 2
    # pandas on a partition folder
    assert len(pd.read_parquet(text_data / "policysm1" / "split=train")) == n
    # pyarrow.dataset with hive partitioning (manifest.json is not Parquet: excluded)
    import pyarrow.dataset as ds

    dset = ds.dataset(text_data / "policysm1", format="parquet", partitioning="hive", exclude_invalid_files=True)
    assert dset.to_table(filter=ds.field("split") == "train").num_rows == n
    # DuckDB
    duckdb = pytest.importorskip("duckdb")
    q = f"select count(*) from read_parquet('{text_data}/policysm1/*/*.parquet', hive_partitioning=true) where split='train'"
    assert duckdb.sql(q).fetchall()[0][0] == n
    # Hugging Face datasets, offline
    os.environ["HF_DATASETS_OFFLINE"] = "1"
    datasets = pytest.importorskip("datasets")
    hf = datasets.load_dataset("parquet", data_files={"train": str(text_data / "policysm1" / "split=train" / "*.parquet")},
                               cache_dir=str(text_data / "hf-cache"))
    assert hf["train"].num_rows == n and set(hf["train"].column_names) >= {"text_a", "text_b", "label", "kind"}


def test_rerun_is_byte_identical(text_data, tmp_path):
    S.datasets_stage(text_data / "sentences", text_data / "documents_clean", S.DATASETS.write_paths(tmp_path), PairConfig(), rows_per_shard=500)
    for name in ("policysm1", "policysm2"):
        a = [s["sha256"] for s in read_manifest(text_data / name)["shards"]]
        b = [s["sha256"] for s in read_manifest(tmp_path / name)["shards"]]
        assert a == b


def test_segmentation_cache_segments_only_new_sentences(text_data, tmp_path):
    stats = S.segment_stage(text_data / "sentences", tmp_path / "segments", "hanlp-dict", cache_root=text_data / "cache")
    assert stats["segmented_now"] == 0 and stats["from_cache"] == stats["sentences"]
    first = read_table(text_data / "segments")
    again = read_table(tmp_path / "segments")
    assert first["words"].map(list).tolist() == again["words"].map(list).tolist()


def test_dataset_report(text_data):
    from corpus.report import build_report

    rep = build_report(S.REPORT.read_paths(text_data), text_data / "report")
    for f in ("report.md", "sources.png", "years.png", "doc_lengths.png", "sentence_lengths.png"):
        assert (text_data / "report" / f).stat().st_size > 100
    md = (text_data / "report" / "report.md").read_text(encoding="utf-8")
    assert "Shortcut probe" in md and "policysm2" in md and "中华人民共和国中央人民政府" in md
    assert {r["dataset"] for r in rep["probe"]} == {"policysm1", "policysm2"}
    sm2 = read_manifest(text_data / "policysm2")["stats"]  # the thesis's 1:5, reported with its shortfall
    assert sm2["target_negatives_per_positive"] == 5 and sm2["negatives_per_positive"] >= 4.9
    assert f"| policysm2 | {sm2['negatives_per_positive']} | 5 | {sm2['below_target']['documents']} of " in md


def test_report_on_a_one_document_corpus_with_empty_splits(real_slice, tmp_path):
    """One document: every pair lands in train, dev and test are empty, the probe has no accuracy; the
    datasets and the report are still written (no crash after the tables)."""
    from corpus.report import build_report
    from storage import write_table

    d = tmp_path
    S.import_documents(real_slice, d / "all", SHARED_CORPUS / "policy_sources.csv")
    one = read_table(d / "all").head(1)
    write_table(one, d / "documents", name="documents", schema=S.DOCUMENTS_SCHEMA)
    S.clean_stage(d / "documents", d / "documents_clean", d / "rejects", CleanConfig())
    S.sentences_stage(d / "documents_clean", d / "sentences", SentenceConfig())
    S.segment_stage(d / "sentences", d / "segments", "hanlp-dict")
    S.vocab_stage(d / "segments", d / "vocab", None, VocabConfig(min_freq=1))
    out = S.datasets_stage(d / "sentences", d / "documents_clean", S.DATASETS.write_paths(d), PairConfig())
    assert out["policysm1"]["probe"]["accuracy"] is None
    assert set(read_table(d / "policysm1")["split"]) == {"train"}
    rep = build_report(S.REPORT.read_paths(d), d / "report")
    assert {r["probe_accuracy"] for r in rep["probe"]} == {None}
    assert "Shortcut probe" in (d / "report" / "report.md").read_text(encoding="utf-8")
