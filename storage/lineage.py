"""Lineage of a data dir: each stage output with its fingerprint, row count, inputs (and their
fingerprints), config hash and code version, read from the manifests. Rendered as Markdown (the
self-hosted Prefect UI draws no asset graph, so this is published as an artifact per run)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable

from storage.contracts import Stage, stamp_record, stamped_key
from storage.fingerprint import path_fingerprint
from storage.hashing import json_sha256
from storage.pointer import read_pointer
from storage.tables import MANIFEST_NAME


def lineage_records(data_dir: str | os.PathLike, stages: Iterable[Stage]) -> list[dict]:
    """One record per existing declared output of ``stages`` (in their order): output, kind (its declared
    kind: table, checkpoint, folder, or ``index (vN)`` for a versioned folder), producing stage, the cache key
    it was stamped with, fingerprint, rows, inputs {name: fingerprint}, config_sha256 and code version (tables;
    the serving version for a versioned folder)."""
    data = Path(data_dir)
    out, seen = [], set()
    for stage in stages:
        for name, kind in stage.output_kinds().items():
            path = data / name
            if name in seen or not path.exists():
                continue
            seen.add(name)
            stamp = stamp_record(path) or {}  # the stage that wrote it (documents: import or crawl)
            rec = {"output": name, "stage": stamp.get("stage") or stage.name, "cache_key": (stamped_key(path) or "")[:12],
                   "fingerprint": path_fingerprint(path)[:16]}
            out.append({**rec, **_describe(kind, path)})
    return out


def _describe(kind: str, path: Path) -> dict:
    if kind == "table" and (path / MANIFEST_NAME).is_file():
        man = json.loads((path / MANIFEST_NAME).read_text(encoding="utf-8"))
        if "shards" in man:
            return {"kind": "table", "rows": man["rows"],
                    "inputs": {k: str(v)[:16] for k, v in man.get("inputs", {}).items()},
                    "config_sha256": json_sha256(man.get("config"))[:12], "code_version": man.get("code_version")}
    v = read_pointer(path) if kind == "versioned" else None
    if v is not None:
        man = json.loads((path / v / "manifest.json").read_text(encoding="utf-8"))
        return {"kind": f"index ({v})", "rows": man.get("size"),
                "inputs": {**{k: str(x)[:16] for k, x in man.get("inputs", {}).items()},
                           "model": man.get("model_id", "")[:16]},
                "config_sha256": json_sha256(man.get("config"))[:12], "code_version": man.get("code_version")}
    metrics = path / "metrics.json"
    inputs = json.loads(metrics.read_text()).get("inputs", {}) if metrics.is_file() else {}
    flat = {k: (",".join(str(x)[:12] for x in v) if isinstance(v, list) else str(v)[:16])
            for k, v in (inputs or {}).items() if not isinstance(v, dict)}
    return {"kind": kind, "rows": None, "inputs": flat,
            "config_sha256": None, "code_version": None}


def lineage_markdown(records: list[dict]) -> str:
    """Markdown table of :func:`lineage_records`."""
    lines = ["# Lineage", "", "| output | kind | stage (cache key) | fingerprint | rows | inputs (fingerprints) | config "
             "| code |", "|---|---|---|---|---|---|---|---|"]
    for r in records:
        inputs = "<br>".join(f"{k}: `{v}`" for k, v in r["inputs"].items()) or "-"
        lines.append(f"| `{r['output']}` | {r['kind']} | {r['stage']} (`{r['cache_key'] or '-'}`) | `{r['fingerprint']}` | {r['rows'] if r['rows'] is not None else '-'} "
                     f"| {inputs} | {r['config_sha256'] or '-'} | {r['code_version'] or '-'} |")
    return "\n".join(lines) + "\n"
