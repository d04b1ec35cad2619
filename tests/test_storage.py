import json
import os

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
from storage.atomic import clean_leftovers


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
    # only the linked version is left beside the table: no temporary build
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [os.readlink(tmp_path / "t")]


def test_folder_swap_is_one_rename_and_old_versions_go(tmp_path):
    write_table(_df(5), tmp_path / "t", name="t")
    first = os.readlink(tmp_path / "t")
    write_table(_df(7), tmp_path / "t", name="t")
    second = os.readlink(tmp_path / "t")
    assert (tmp_path / "t").is_symlink() and first != second
    assert not (tmp_path / first).exists() and len(read_table(tmp_path / "t")) == 7
    # an output left as a real folder by the old layout is replaced too
    (tmp_path / "legacy").mkdir()
    (tmp_path / "legacy" / "x").write_text("old")
    write_table(_df(3), tmp_path / "legacy", name="legacy")
    assert (tmp_path / "legacy").is_symlink() and len(read_table(tmp_path / "legacy")) == 3
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["legacy", "t"]


def test_clean_leftovers_of_a_killed_swap(tmp_path):
    write_table(_df(5), tmp_path / "t", name="t")
    live = os.readlink(tmp_path / "t")
    # what a kill at each point of a swap leaves: a half build, a version never linked, a link never moved
    (tmp_path / ".t.0123abcd.tmp").mkdir()
    (tmp_path / ".t.0123abcd.tmp" / "part-00000.parquet").write_bytes(b"half")
    (tmp_path / ".t.89abcdef.d").mkdir()
    os.symlink(".t.89abcdef.d", tmp_path / ".t.89abcdef.lnk")
    (tmp_path / ".x.json.abc_12xy.tmp").write_text("{")
    removed = clean_leftovers(tmp_path)
    assert len(removed) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live, "t"])
    assert len(read_table(tmp_path / "t")) == 5


def test_table_fingerprint_is_its_shards_alone(tmp_path):
    a = write_table(_df(), tmp_path / "a", name="t", config={"min_freq": 3}, code_version="v1")
    b = write_table(_df(), tmp_path / "b", name="t", config={"min_freq": 10}, code_version="v2")
    assert a["shards"] == b["shards"]
    assert manifest_fingerprint(tmp_path / "a") == manifest_fingerprint(tmp_path / "b")
    c = write_table(_df(11), tmp_path / "c", name="t")
    assert manifest_fingerprint(tmp_path / "c") != manifest_fingerprint(tmp_path / "a") and c
    # a folder of tables (pretrain/epoch=N) is fingerprinted by its tables' content, links followed
    for root in ("r1", "r2"):
        (tmp_path / root).mkdir()
        write_table(_df(), tmp_path / root / "epoch=0", name="e", code_version=root)
    assert path_fingerprint(tmp_path / "r1") == path_fingerprint(tmp_path / "r2")


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


def test_atomic_writes_get_the_usual_file_mode(tmp_path):
    """Outputs such as summary.json and index/CURRENT are readable by the group (not mkstemp's 0600)."""
    from storage import atomic_write_text

    mask = os.umask(0o022)
    try:
        p = atomic_write_text(tmp_path / "summary.json", "{}")
    finally:
        os.umask(mask)
    assert p.stat().st_mode & 0o777 == 0o644
