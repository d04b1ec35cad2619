import json

import pandas as pd
import pytest

from storage import (
    TableError,
    atomic_path,
    check_writable_dir,
    file_sha256,
    manifest_fingerprint,
    path_fingerprint,
    read_manifest,
    read_table,
    write_table,
)


def _df(n=10):
    return pd.DataFrame({"id": range(n), "text": [f"句子{i}" for i in range(n)],
                         "split": ["train" if i % 3 else "test" for i in range(n)]})


def test_roundtrip_shards_and_manifest(tmp_path):
    m = write_table(_df(10), tmp_path / "t", name="t", config={"a": 1}, code_version="abc", rows_per_shard=4)
    assert m["rows"] == 10 and [s["rows"] for s in m["shards"]] == [4, 4, 2]
    for s in m["shards"]:
        assert file_sha256(tmp_path / "t" / s["path"]) == s["sha256"]
    assert read_manifest(tmp_path / "t")["config"] == {"a": 1}
    back = read_table(tmp_path / "t", verify=True)
    pd.testing.assert_frame_equal(back, _df(10))


def test_partitioned_hive_layout(tmp_path):
    m = write_table(_df(9), tmp_path / "p", name="p", partition_by="split")
    paths = sorted(s["path"] for s in m["shards"])
    assert paths == ["split=test/part-00000.parquet", "split=train/part-00000.parquet"]
    test = read_table(tmp_path / "p", partition={"split": "test"})
    assert set(test["split"]) == {"test"} and len(test) == 3
    import pyarrow.dataset as ds

    dataset = ds.dataset(tmp_path / "p", format="parquet", partitioning="hive", exclude_invalid_files=True)
    assert dataset.count_rows() == 9


def test_rewrite_is_byte_identical(tmp_path):
    a = write_table(_df(), tmp_path / "a", name="t")
    b = write_table(_df(), tmp_path / "b", name="t")
    assert [s["sha256"] for s in a["shards"]] == [s["sha256"] for s in b["shards"]]
    assert manifest_fingerprint(tmp_path / "a") == manifest_fingerprint(tmp_path / "b")


def test_failed_write_keeps_old_table(tmp_path):
    write_table(_df(5), tmp_path / "t", name="t")
    with pytest.raises(ValueError):
        write_table(_df(5), tmp_path / "t", name="t", partition_by="nope")
    assert len(read_table(tmp_path / "t")) == 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_atomic_path_cleans_up_on_error(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_path(tmp_path / "x") as tmp:
            tmp.mkdir()
            (tmp / "f").write_text("half")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_missing_table_and_corrupt_shard(tmp_path):
    with pytest.raises(TableError, match="manifest.json missing"):
        read_table(tmp_path / "none")
    m = write_table(_df(), tmp_path / "t", name="t")
    (tmp_path / "t" / m["shards"][0]["path"]).write_bytes(b"garbage")
    with pytest.raises(TableError, match="does not match"):
        read_table(tmp_path / "t", verify=True)


def test_fingerprints(tmp_path):
    assert path_fingerprint(tmp_path / "missing") == "missing"
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("x")
    f1 = path_fingerprint(tmp_path / "d")
    (tmp_path / "d" / "a.txt").write_text("y")
    assert path_fingerprint(tmp_path / "d") != f1


def test_check_writable_dir(tmp_path):
    assert check_writable_dir(tmp_path / "new").is_dir()
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.raises(PermissionError, match="not writable"):
        check_writable_dir(blocker / "sub")
