"""Smaller hostile inputs, second round: a malformed run-lock holder record, ``--min-score nan``, a corrupt
``index.faiss`` / ``manifest.json``, ``CURRENT`` naming a path, random bytes served as ``.docx``, a registry
seed that the fetcher would always refuse. Each ends in a clear error or a recorded reject, no traceback."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import REPO

HOLD = """
import sys, time
from ops.runlock import run_lock
with run_lock(sys.argv[1]):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("record", [{"pid": "1", "started": "s"}, {"pid": -5, "started": "s"},
                                    {"pid": 10 ** 30, "started": "s"}, {"pid": 1, "started": "s", "create_time": "x"},
                                    {"pid": 1, "started": "s", "argv": [1, {"a": 2}]}, [1, 2], {"pid": True, "started": 1}],
                         ids=["pid-str", "pid-negative", "pid-huge", "create-time-str", "argv-not-str", "list", "bool"])
def test_malformed_holder_record_reads_as_holder_unknown(tmp_path, record):
    from ops.runlock import RunLockBusy, holder_path, run_lock

    data = tmp_path / "data"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(data)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        holder_path(data).write_text(json.dumps(record))
        with pytest.raises(RunLockBusy, match=r"in use by another run \(holder unknown\)"):
            with run_lock(data, timeout=0):
                pass
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _published(tmp_path):
    from retrieval.dense import build_flat_index
    from retrieval.versions import publish_version

    vecs = np.eye(4, 8, dtype=np.float32)
    ids = np.arange(4, dtype=np.int64)
    root = tmp_path / "data" / "index"
    publish_version(root, build_flat_index(vecs, ids), pd.DataFrame({"chunk_id": ids, "text": list("abcd")}),
                    {"model_id": "m"}, vecs)
    return root


def _search(tmp_path, capsys, *extra) -> tuple[int, str]:
    from flows.search import main

    code = main(["数据安全", "--data-dir", str(tmp_path / "data"), *extra])
    return code, capsys.readouterr().err


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_min_score_not_finite_is_an_error_line(tmp_path, capsys, value):
    _published(tmp_path)
    code, err = _search(tmp_path, capsys, f"--min-score={value}")
    assert code == 2 and err.startswith("error: --min-score") and "finite" in err and len(err.splitlines()) == 1


@pytest.mark.parametrize("damage", ["manifest-garbage", "manifest-list", "faiss-truncated", "faiss-foreign",
                                    "current-climbs", "current-absolute"])
def test_corrupt_index_files_and_unsafe_current_are_an_error_line(tmp_path, capsys, damage):
    from retrieval.versions import IndexLoadError, load_version

    root = _published(tmp_path)
    faiss_file = root / "v1" / "index.faiss"
    if damage == "manifest-garbage":
        (root / "v1" / "manifest.json").write_text('{"version": "v1", ')
    elif damage == "manifest-list":
        (root / "v1" / "manifest.json").write_text("[1, 2]")
    elif damage == "faiss-truncated":
        faiss_file.write_bytes(faiss_file.read_bytes()[:40])
    elif damage == "faiss-foreign":
        faiss_file.write_bytes(b"NOPE" + bytes(range(256)) * 16)
    elif damage == "current-climbs":
        (root / "CURRENT").write_text("../..")
    else:
        (root / "CURRENT").write_text(str(tmp_path))
    with pytest.raises(IndexLoadError):
        load_version(root)
    code, err = _search(tmp_path, capsys)
    assert code == 2 and err.startswith("error: ") and "Traceback" not in err and len(err.splitlines()) == 1


def test_random_bytes_served_as_docx_are_an_extraction_failure():
    from crawler.document import ExtractionError
    from crawler.extract import extract

    rng = np.random.default_rng(1)
    junk = rng.integers(1, 256, 20_000, dtype=np.uint8).tobytes()  # no NUL: only the .docx name tells
    with pytest.raises(ExtractionError, match=r"\.docx body without HTML"):
        extract(junk, "http://a.gov.cn/files/notice.docx", "application/octet-stream")
    with pytest.raises(ExtractionError, match="binary body"):
        extract(b"PK\x03\x04" + b"\x00" * 100 + junk, "http://a.gov.cn/files/notice", "text/html")
    doc = extract("<html><body><p>关于推进数据要素发展的通知正文内容。</p></body></html>".encode(),
                  "http://a.gov.cn/x.docx", "text/html")  # an HTML page named .docx is still HTML
    assert "数据要素" in doc.text


def test_registry_seed_the_fetcher_would_refuse_is_a_registry_error(tmp_path):
    from crawler.registry import RegistryError, load_registry

    p = tmp_path / "r.yaml"
    p.write_text("sources:\n- name: A\n  hosts: [a.gov.cn]\n  seeds: ['https://a.gov.cn/x.htm （中文链接）', "
                 "'https://a.gov.cn/a\\\\b', 'http://[::1/x']\n", encoding="utf-8")
    with pytest.raises(RegistryError) as e:
        load_registry(p)
    msg = str(e.value)
    assert msg.count("would be refused by the fetcher") == 2 and "is not an http(s) URL" in msg
    assert "（中文链接）" in msg
