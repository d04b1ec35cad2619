"""Cache invalidation through the CLI (tiny profile, 5 real documents): which stages re-run after a change.

A base run fills a data dir; each scenario works on a copy of it (links and Prefect's home included) and
reads the task states from the CLI log. Stages never cached (``sample-query``, ``lineage``) are ignored.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from storage import path_fingerprint
from storage import layout as L
from tests.conftest import REPO, write_corpus

pytestmark = pytest.mark.slow

TEXT = {"import-documents", "clean", "sentences", "segment-plan", "segment-part", "segment", "vocab", "datasets",
        "dataset-report"}
MODEL = {"pretrain-data", "pretrain", "finetune"}
INDEX = {"index-plan", "embed-part", "index", "evaluate-retrieval"}
ALL = TEXT | MODEL | INDEX


def run_cli(data: Path, corpus: Path, *extra: str, cwd: Path = REPO) -> dict[str, set[str]]:
    """Run the main job (tiny) and return task name -> the set of end states its runs logged."""
    res = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(corpus), "--data-dir", str(data),
                          "--profile", "tiny", *extra], cwd=cwd, capture_output=True, text=True, timeout=600)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    states: dict[str, set[str]] = {}
    for name, state in re.findall(r"Task run '([\w-]+)-\w{3}' - Finished in state (\w+)", log):
        states.setdefault(name, set()).add(state)
    assert ALL <= set(states), ALL - set(states)
    return states


def reran(states: dict[str, set[str]]) -> set[str]:
    """Cached stages that ran again (any of their runs not Cached)."""
    return {t for t in ALL if states[t] != {"Cached"}}


def outputs(data: Path) -> dict[str, str]:
    """Content fingerprints of every output that must match a fresh run (model weights, not their metrics)."""
    out = {n: path_fingerprint(data / n) for n in (L.DOCUMENTS, L.DOCUMENTS_CLEAN, L.REJECTS, L.SENTENCES,
                                                  L.SEGMENTS, L.VOCAB, L.POLICYSM1, L.POLICYSM2, L.TOKENIZER,
                                                  L.PRETRAIN)}
    for ckpt in (L.PRETRAINED_MODEL, L.FINETUNED_MODEL):
        out[ckpt] = path_fingerprint(data / ckpt / "model.safetensors")
    version = (data / L.INDEX / "CURRENT").read_text().strip()
    out["index/chunks"] = path_fingerprint(data / L.INDEX / version / "chunks.parquet")
    return out


@pytest.fixture(scope="module")
def base(real_slice, tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("inval") / "base"
    states = run_cli(data, real_slice)
    assert reran(states) == ALL
    return data


def copy_of(base: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "data"
    shutil.copytree(base, dst, symlinks=True)
    return dst


@pytest.fixture(scope="module")
def repo_copy(tmp_path_factory) -> Path:
    """The source tree (no venv, no data) where tests may edit code."""
    dst = tmp_path_factory.mktemp("repo") / "src"
    top = {".venv", ".git", "data", "gpu_data"}  # the repository's own data folders (answers/data) are source
    shutil.copytree(REPO, dst, ignore=lambda d, names: [n for n in names if (d == str(REPO) and n in top) or n in (
        "__pycache__", ".pytest_cache") or n.endswith(".egg-info")])
    return dst


def test_nothing_changed_is_all_cache_hits(base, real_slice, tmp_path):
    assert reran(run_cli(copy_of(base, tmp_path), real_slice)) == set()


def test_chunking_change_reruns_exactly_the_index_stages(base, real_slice, tmp_path):
    data = copy_of(base, tmp_path)
    assert reran(run_cli(data, real_slice, "--set", "chunks.max_chars=300")) == INDEX
    assert (data / L.INDEX / "CURRENT").read_text().strip() == "v2"


def test_deleted_output_folder_is_rebuilt(base, real_slice, tmp_path):
    data = copy_of(base, tmp_path)
    before = outputs(data)
    shutil.rmtree(data / L.VOCAB) if not (data / L.VOCAB).is_symlink() else (data / L.VOCAB).unlink()
    # the vocabulary comes out byte-identical: the stages below it stop there (early cut-off)
    assert reran(run_cli(data, real_slice)) == {"vocab"}
    assert outputs(data) == before


def test_docstring_edit_in_report_reruns_only_the_report(base, real_slice, repo_copy, tmp_path):
    data = copy_of(base, tmp_path)
    report = repo_copy / "corpus" / "report.py"
    src = report.read_text(encoding="utf-8")
    # the stage function's own text is hashed (with the helpers it uses and the modules they import); an edit
    # of the module docstring alone changes nothing the stage runs and leaves the cache as it is
    edited = src.replace('"""Write ``report.md``', '"""Write the ``report.md``', 1)
    assert edited != src
    report.write_text(edited, encoding="utf-8")
    try:
        assert reran(run_cli(data, real_slice, cwd=repo_copy)) == {"dataset-report"}
    finally:
        report.write_text(src, encoding="utf-8")


def test_edit_that_keeps_the_clean_corpus_identical_stops_at_clean(base, real_slice, repo_copy, tmp_path):
    data = copy_of(base, tmp_path)
    clean = repo_copy / "corpus" / "documents.py"
    src = clean.read_text(encoding="utf-8")
    clean.write_text(src + "\n\ndef _unused_helper() -> None:\n    return None\n", encoding="utf-8")
    try:
        assert reran(run_cli(data, real_slice, cwd=repo_copy)) == {"clean"}
    finally:
        clean.write_text(src, encoding="utf-8")


def test_profile_switch_a_b_a_ends_as_a_fresh_a(base, real_slice, tmp_path):
    data = copy_of(base, tmp_path)
    b = ("--set", "vocab.min_freq=10", "--set", "segment_parts=3")
    assert {"vocab", "pretrain-data", "pretrain"} <= reran(run_cli(data, real_slice, *b))
    assert reran(run_cli(data, real_slice)) >= {"vocab", "pretrain-data", "pretrain", "finetune"}
    assert outputs(data) == outputs(base)


def test_input_switch_a_b_a_ends_as_a_fresh_a(base, real_slice, tmp_path):
    import csv

    data = copy_of(base, tmp_path)
    with open(real_slice, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    other = tmp_path / "other"
    other.mkdir()
    for name in ("policy_sources.csv", "stopwords.txt"):
        shutil.copy(real_slice.parent / name, other / name)
    corpus_b = write_corpus(other / "policy_docs.csv", rows[1:])
    assert "import-documents" in reran(run_cli(data, corpus_b))
    assert "import-documents" in reran(run_cli(data, real_slice))
    assert outputs(data) == outputs(base)
