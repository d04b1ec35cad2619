"""The library layers never import prefect (usable from a notebook); flows/tasks do."""
import subprocess
import sys

from tests.conftest import REPO

LIBRARY_MODULES = [
    "crawler.csv_import", "crawler.registry", "crawler.fetch", "crawler.archive", "crawler.extract", "crawler.crawl",
    "crawler.stages", "corpus.clean", "corpus.dedup", "corpus.documents", "corpus.sentences", "corpus.segment",
    "corpus.vocab", "corpus.pairs", "corpus.probe", "corpus.report", "corpus.stages", "model", "model.features",
    "model.pretrain_data", "model.training", "model.backbones", "model.stages", "retrieval.chunks",
    "retrieval.embed", "retrieval.index", "retrieval.evaluate", "retrieval.stages", "storage", "storage.lineage",
    "ops.ui_check",
]


def test_library_layers_do_not_import_prefect():
    code = ("import importlib, sys\n"
            f"for m in {LIBRARY_MODULES!r}:\n"
            "    importlib.import_module(m)\n"
            "bad = sorted(k for k in sys.modules if k == 'prefect' or k.startswith('prefect.'))\n"
            "print(len(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "0"
