"""Lineage of a data dir: each stage output with its fingerprint, row count, inputs (and their
fingerprints), config hash and code version, read from the manifests. Rendered as Markdown (the
self-hosted Prefect UI draws no asset graph, so this is published as an artifact per run)."""
from __future__ import annotations

import json
import os
from pathlib import Path

from storage import layout as L
from storage.fingerprint import path_fingerprint
from storage.hashing import json_sha256
from storage.tables import MANIFEST_NAME

TABLES = (L.DOCUMENTS, L.DOCUMENTS_CLEAN, L.REJECTS, L.SENTENCES, L.SEGMENTS, L.VOCAB, L.POLICYSM1, L.POLICYSM2,
          f"{L.PRETRAIN}/epoch=0", L.RETRIEVAL_EVAL)
FOLDERS = (L.TOKENIZER, L.PRETRAINED_MODEL, L.FINETUNED_MODEL)


def lineage_records(data_dir: str | os.PathLike) -> list[dict]:
    """One record per existing output: output, kind, fingerprint, rows, inputs {name: fingerprint},
    config_sha256, code_version (tables, checkpoints and the serving index version)."""
    data = Path(data_dir)
    out = []
    for name in TABLES:
        m = data / name / MANIFEST_NAME
        if m.is_file():
            man = json.loads(m.read_text(encoding="utf-8"))
            out.append({"output": name, "kind": "table", "fingerprint": path_fingerprint(data / name)[:16],
                        "rows": man["rows"], "inputs": {k: str(v)[:16] for k, v in man.get("inputs", {}).items()},
                        "config_sha256": json_sha256(man.get("config"))[:12], "code_version": man.get("code_version")})
    for name in FOLDERS:
        metrics = data / name / "metrics.json"
        if (data / name).is_dir():
            inputs = json.loads(metrics.read_text()).get("inputs", {}) if metrics.is_file() else {}
            flat = {k: (",".join(x[:12] for x in v) if isinstance(v, list) else str(v)[:16])
                    for k, v in inputs.items() if not isinstance(v, dict)}
            out.append({"output": name, "kind": "checkpoint" if metrics.is_file() else "folder",
                        "fingerprint": path_fingerprint(data / name)[:16], "rows": None, "inputs": flat,
                        "config_sha256": None, "code_version": None})
    current = data / L.INDEX / "CURRENT"
    if current.is_file():
        v = current.read_text().strip()
        man = json.loads((data / L.INDEX / v / "manifest.json").read_text(encoding="utf-8"))
        out.append({"output": f"{L.INDEX}/{v}", "kind": "index", "fingerprint": path_fingerprint(data / L.INDEX / v)[:16],
                    "rows": man.get("size"), "inputs": {**{k: str(x)[:16] for k, x in man.get("inputs", {}).items()},
                                                        "model": man.get("model_id", "")[:16]},
                    "config_sha256": json_sha256(man.get("config"))[:12], "code_version": man.get("code_version")})
    return out


def lineage_markdown(records: list[dict]) -> str:
    """Markdown table of :func:`lineage_records`."""
    lines = ["# Lineage", "", "| output | kind | fingerprint | rows | inputs (fingerprints) | config | code |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        inputs = "<br>".join(f"{k}: `{v}`" for k, v in r["inputs"].items()) or "-"
        lines.append(f"| `{r['output']}` | {r['kind']} | `{r['fingerprint']}` | {r['rows'] if r['rows'] is not None else '-'} "
                     f"| {inputs} | {r['config_sha256'] or '-'} | {r['code_version'] or '-'} |")
    return "\n".join(lines) + "\n"
