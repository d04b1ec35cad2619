"""Hostile data-dir layouts (storage/atomic.py): a folder swap never follows a link out of the data dir."""
from __future__ import annotations

import os

import pandas as pd

from storage.atomic import atomic_path
from storage.tables import read_table, write_table


def _outside(tmp_path, name):
    target = tmp_path / name
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    return target


def test_swap_over_a_link_out_of_the_data_dir_replaces_the_link_and_deletes_nothing(tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir()
    absolute, relative = _outside(tmp_path, "elsewhere"), _outside(tmp_path, "elsewhere2")
    os.symlink(absolute, data / "report")                 # absolute link
    os.symlink("../elsewhere2", data / "sentences")        # relative link climbing out
    with atomic_path(data / "report") as tmp:
        tmp.mkdir()
        (tmp / "report.json").write_text("{}")
    write_table(pd.DataFrame({"a": [1, 2]}), data / "sentences", name="sentences")
    write_table(pd.DataFrame({"a": [1, 2, 3]}), data / "sentences", name="sentences")  # second swap: own version
    assert (absolute / "precious.txt").read_text() == "keep me" and (relative / "precious.txt").read_text() == "keep me"
    assert sorted(p.name for p in absolute.iterdir()) == ["precious.txt"]
    for name in ("report", "sentences"):
        assert (data / name).is_symlink() and (data / name).resolve().parent == data.resolve()
    assert (data / "report" / "report.json").exists() and len(read_table(data / "sentences")) == 3
    assert sum(1 for p in data.iterdir() if p.name.startswith(".sentences.")) == 1  # previous own version deleted
    assert "not a version this pipeline wrote" in caplog.text


def test_swap_never_deletes_a_version_folder_that_is_itself_a_link(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    outside = _outside(tmp_path, "elsewhere")
    os.symlink(outside, data / ".t.0123abcd.d")  # looks like a version of t, is a link out
    os.symlink(".t.0123abcd.d", data / "t")
    write_table(pd.DataFrame({"a": [1]}), data / "t", name="t")
    assert (outside / "precious.txt").exists() and len(read_table(data / "t")) == 1
