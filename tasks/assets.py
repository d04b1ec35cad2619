"""Stage outputs as Prefect assets (lineage in the UI's event feed).

Asset keys are ``file://`` URIs of the output's manifest (or folder) under the run's data dir, so
they are known only at run time: :func:`materializing` re-declares a stage task as a
``MaterializingTask`` of that key; upstream assets follow from the tasks it waits for. When the
stage returns, :func:`describe_outputs` attaches rows, fingerprint and shard sha256s from the manifest.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from urllib.parse import urlsplit

from prefect import Task
from prefect.tasks import MaterializingTask

from storage import MANIFEST_NAME, path_fingerprint
from storage.contracts import Stage


def asset_key(data_dir: str, rel: str, kind: str = "table") -> str:
    """``file://`` URI of a declared output: the path under the data dir as named (not resolved: tables are
    links to versioned folders), plus ``/manifest.json`` when the output's declared kind is ``table``."""
    p = Path(data_dir).absolute() / rel
    # Prefect asset keys allow no '%': the path goes in unencoded (data dirs with spaces are not supported)
    return f"file://{p.as_posix()}" + (f"/{MANIFEST_NAME}" if kind == "table" else "")


def materializing(task: Task, stage: Stage, data_dir: str, **params) -> Task:
    """``task`` with the same options, materializing the assets of ``stage``'s declared outputs under
    ``data_dir`` (placeholders filled from ``params``); each asset gets its metadata
    (:func:`describe_outputs`) once the stage has written it.

    Where a path makes no valid asset key (Prefect forbids spaces and ``%`` in keys), the task is
    returned unchanged: the run goes on, and the lineage artifact still records the outputs.
    """
    from prefect.assets import Asset

    try:
        assets = [Asset(key=asset_key(data_dir, r, kind)) for r, kind in stage.output_kinds(params).items()]
    except ValueError:
        return task
    return MaterializingTask(fn=_describing(task.fn), assets=assets, name=task.name,
                             tags=task.tags, retries=task.retries, retry_delay_seconds=task.retry_delay_seconds,
                             cache_key_fn=task.cache_key_fn, persist_result=task.persist_result,
                             result_serializer=task.result_serializer)


def _describing(fn):
    """``fn`` followed by :func:`describe_outputs` (same name, signature and source for Prefect and cache keys)."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        out = fn(*args, **kwargs)
        describe_outputs()
        return out

    return run


def describe_outputs() -> None:
    """Add rows, fingerprint and shard sha256s to every asset the running task materializes."""
    from prefect.assets import add_asset_metadata
    from prefect.context import AssetContext

    ctx = AssetContext.get()
    if ctx is None:
        return
    for asset in ctx.downstream_assets:
        path = Path(urlsplit(asset.key).path)
        folder = path.parent if path.name == MANIFEST_NAME else path
        meta: dict = {"fingerprint": path_fingerprint(folder)}
        if (folder / MANIFEST_NAME).is_file():
            m = json.loads((folder / MANIFEST_NAME).read_text(encoding="utf-8"))
            if "shards" in m:
                meta.update(rows=m["rows"], code_version=m.get("code_version"),
                            shards={s["path"]: s["sha256"] for s in m["shards"]})
        add_asset_metadata(asset.key, meta)
