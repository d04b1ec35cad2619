"""Prefect tasks of the pipeline stages: one generic task per stage contract, plus the mapped stages' parts.

:func:`task_of` makes the task of any :class:`storage.contracts.Stage`: named after it, cached by its
contract (:func:`tasks.caching.stage_task`), its parameters those the contract declares (``data_dir``,
settings, inputs, placeholders), its body :func:`run_stage`: bind the declared paths and parameters to the
library function (:func:`bind`), call it, publish the stage's artifacts (:mod:`tasks.artifacts`). The mapped
stages (plan -> parts -> merge: segmentation, embedding) and the crawl keep their own small tasks below:
their part files are named by the running task's cache key. Retries only on GPU-bound tasks and the crawl.
"""
from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Mapping

from prefect import task

from corpus import stages as text
from crawler import stages as crawler_stages
from model import stages as mstages
from retrieval import contracts as R
from retrieval import stages as rstages
from retrieval.chunks import ChunkConfig
from retrieval.hybrid import FusionConfig
from retrieval.index import IndexConfig
from retrieval.sparse import SparseConfig
from storage import layout as L
from storage.binding import bind, stage_function, stage_paths
from storage.contracts import Registry, Stage
from storage.mapped import part_file, part_record, prune_parts
from tasks.artifacts import publish
from tasks.caching import current_key, jsonable, parts_dir, stage_task
from tasks.progress import crawl_rate_limit, progress_artifact
from tasks.workers import per_worker

GPU = {"retries": 1, "retry_delay_seconds": 10, "tags": ["gpu"]}


_paths = stage_paths


def _progress_hooks(stage: Stage, data_dir: str, params: Mapping[str, Any]) -> Callable[[str], Callable]:
    """``on_step`` / ``on_progress`` callbacks of ``stage``: a progress artifact named after it."""
    def hook(_name: str) -> Callable:
        outs = ", ".join(stage.write_paths(data_dir, params))
        return progress_artifact(f"{stage.name}-progress", f"{stage.name} steps ({outs})")

    return hook


def task_of(stage: Stage):
    """The Prefect task of ``stage``: ``task(data_dir, *stage.parameters)`` (see the module docstring)."""
    fn = stage_function(stage)
    names = ["data_dir", *stage.parameters]
    fn_params = inspect.signature(fn).parameters
    sig = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                               default=_default(stage, n, fn_params)) for n in names])

    def run(*args, **kwargs):
        params = sig.bind(*args, **kwargs)
        params.apply_defaults()
        data_dir, params = params.arguments["data_dir"], {k: v for k, v in params.arguments.items() if k != "data_dir"}
        out = fn(**bind(stage, fn, data_dir, params, _progress_hooks(stage, data_dir, params)))
        publish(stage.name, out, stage.write_paths(data_dir, params))
        return {k: out[k] for k in stage.keep} if stage.keep else out

    run.__signature__ = sig
    run.__name__ = run.__qualname__ = stage.name.replace("-", "_")
    return stage_task(stage, **(GPU if stage.gpu else {}))(run)


def _default(stage: Stage, name: str, fn_params: Mapping[str, inspect.Parameter]):
    """A task parameter's default: its placeholder default, else the library function's default, else None."""
    if name == "data_dir":
        return inspect.Parameter.empty
    if name in stage.defaults:
        return stage.defaults[name]
    target = next((p for p, src in stage.args.items() if src == name), name)
    p = fn_params.get(target)
    return p.default if p is not None and p.default is not inspect.Parameter.empty else None


import_documents = task_of(text.IMPORT)
clean = task_of(text.CLEAN)
sentences = task_of(text.SENTENCES)
segment_plan = task_of(text.SEGMENT_PLAN)
vocab = task_of(text.VOCAB)
datasets = task_of(text.DATASETS)
dataset_report = task_of(text.REPORT)
pretrain_data = task_of(mstages.PRETRAIN_DATA)
pretrain = task_of(mstages.PRETRAIN)
finetune = task_of(mstages.FINETUNE)
evaluate_retrieval = task_of(R.EVALUATE)


@task(name="crawl-plan")
def crawl_plan(registry: str | None = None) -> list[str]:
    """The registry's source ids: one crawl partition each (fails at once on an invalid registry)."""
    from crawler.registry import DEFAULT_REGISTRY

    return crawler_stages.crawl_plan(registry or DEFAULT_REGISTRY)


@task(name=crawler_stages.CRAWL_SOURCE.name, task_run_name="crawl-{source_id}", retries=1, retry_delay_seconds=5)
def crawl_source(data_dir: str, source_id: str, registry: str | None = None, refresh: bool = False) -> dict:
    """One source -> its crawl state, archived bodies and part files (mapped over the registry's sources; not
    cached: a crawl looks at the web). An unreachable source fails this task alone (retried once)."""
    from crawler.crawl import CrawlConfig
    from crawler.registry import DEFAULT_REGISTRY

    p = _paths(crawler_stages.CRAWL_SOURCE, data_dir)
    return jsonable(crawler_stages.crawl_source_stage(p["crawl"], Path(data_dir) / L.DOCUMENTS, source_id,
                                                      registry or DEFAULT_REGISTRY, CrawlConfig(refresh=refresh),
                                                      before_request=crawl_rate_limit))


@task(name=crawler_stages.CRAWL_MERGE.name)
def crawl_merge(data_dir: str, registry: str | None, refresh: bool, source_ids: list[str], records: list) -> dict:
    """Per-source records (a failed source's exception in its place) -> ``documents``, ``crawl_failures`` and
    ``crawl_diff``; publishes the diff per source as the ``crawl-diff`` table artifact."""
    from prefect.artifacts import create_table_artifact

    from crawler.crawl import CrawlConfig
    from crawler.partition import source_by_id, unreachable_record
    from crawler.registry import DEFAULT_REGISTRY

    registry = registry or DEFAULT_REGISTRY
    recs = [r if isinstance(r, dict) else unreachable_record(source_by_id(registry, sid), r)
            for sid, r in zip(source_ids, records)]
    p = _paths(crawler_stages.CRAWL_MERGE, data_dir)
    stats = crawler_stages.merge_crawl(recs, p["documents"], p["crawl_failures"], p["crawl_diff"], registry,
                                       CrawlConfig(refresh=refresh), p["crawl"])
    names = {r["source_id"]: r["name"] for r in recs}
    create_table_artifact(key="crawl-diff", description="Crawl diff per source (documents by status)",
                          table=[{"source": names.get(sid, sid), "source_id": sid, **counts}
                                 for sid, counts in stats["diff"].items()])
    return stats


@stage_task(text.SEGMENT_PART, part=".parquet")
def segment_part(data_dir: str, plan: dict, part: int, backend: str = "auto", user_dict: str | None = None) -> dict:
    """Segment part ``part`` of ``plan`` into a part file named by this task's cache key (mapped); the
    record's path is relative to ``data_dir``."""
    p = _paths(text.SEGMENT_PART, data_dir)
    out = part_file(parts_dir(data_dir, text.SEGMENT_PART), current_key())
    rec = text.segment_part(p["sentences"], plan, part, out, backend, user_dict, cache_root=p["cache/segments"])
    return {**rec, "path": str(out.relative_to(data_dir))}


@stage_task(text.SEGMENT)
def segment(data_dir: str, backend: str = "auto", user_dict: str | None = None, parts: list[dict] | None = None) -> dict:
    """Merge the part files (``parts``: the part records in part order) into ``segments``; part files of
    earlier plans are removed."""
    p = _paths(text.SEGMENT, data_dir)
    parts = [{**r, "path": str(Path(data_dir) / r["path"])} for r in parts or []]
    out = text.merge_segments(p["sentences"], parts, p["segments"], backend, user_dict, cache_root=p["cache/segments"])
    prune_parts(parts_dir(data_dir, text.SEGMENT_PART), parts)
    return out


@stage_task(R.INDEX_PLAN, part="")
def index_plan(data_dir: str, cfg: ChunkConfig, index_cfg: IndexConfig) -> dict:
    """Chunk the cleaned corpus and plan the refresh (which chunks to embed, which reuse stored vectors) in a
    staging folder named by this task's cache key; the plan (with that folder) is passed to the parts."""
    p = _paths(R.INDEX_PLAN, data_dir)
    staging = part_file(parts_dir(data_dir, R.INDEX_PLAN), current_key(), "")
    out = rstages.index_plan_stage(p["documents_clean"], p[R.ENCODER], p["index"], cfg, index_cfg, staging=staging)
    return {**out, "staging": str(staging.relative_to(data_dir))}


@stage_task(R.EMBED_PART, part=".npz", **GPU)
def embed_part(data_dir: str, plan: dict, part: int, n_parts: int, batch_size: int = 64) -> dict:
    """Embed slice ``part`` of the planned chunks into a part file named by this task's cache key (mapped);
    returns its record (path relative to ``data_dir``, sha256, rows). On a Dask worker the encoder is loaded
    once per worker for the plan's model (:func:`tasks.workers.per_worker`)."""
    p = _paths(R.EMBED_PART, data_dir)
    out = part_file(parts_dir(data_dir, R.EMBED_PART), current_key(), ".npz")
    rows = rstages.index_embed_part_stage(
        p[R.ENCODER], p["index"], part, n_parts, batch_size, staging=Path(data_dir) / plan["staging"], out_file=out,
        on_progress=progress_artifact(f"{R.EMBED_PART.name}-progress-{part}", f"chunk windows embedded, part {part}"),
        load_encoder=lambda load, key: per_worker(("encoder", str(p[R.ENCODER]), key), load))
    return {**part_record(out), "path": str(out.relative_to(data_dir)), "rows": rows, "part": part}


@stage_task(R.INDEX, **GPU)
def index(data_dir: str, cfg: ChunkConfig, index_cfg: IndexConfig, batch_size: int = 64, n_parts: int = 1,
          sparse: SparseConfig = SparseConfig(), fusion: FusionConfig = FusionConfig(), plan: dict | None = None,
          parts: list[dict] | None = None) -> dict:
    """Publish the planned refresh with the embedded ``parts`` as ``index/vN`` (dense, BM25 side with ``sparse``,
    hybrid weights fitted with ``fusion``) and switch ``index/CURRENT`` (only new/changed chunks embedded);
    plans and parts of earlier refreshes are pruned."""
    p = _paths(R.INDEX, data_dir)
    staging = Path(data_dir) / plan["staging"]
    parts = [{**r, "path": str(Path(data_dir) / r["path"])} for r in parts or []]
    out = rstages.index_publish_stage(p["documents_clean"], p[R.ENCODER], p["index"], cfg, index_cfg, n_parts,
                                      batch_size, staging=staging, parts=parts, sparse=sparse, fusion=fusion)
    prune_parts(parts_dir(data_dir, R.INDEX_PLAN), [{"path": str(staging)}])
    prune_parts(parts_dir(data_dir, R.EMBED_PART), parts)
    return out


@task(name="sample-query")
def sample_query(data_dir: str, query: str, k: int = 3) -> list[dict]:
    """Top-k hits for one query against the serving index (not cached: it reads the live index)."""
    hits = rstages.query_index(R.INDEX.write_paths(data_dir)["index"], query, k)
    return [{"score": h["score"], "title": h["title"], "source": h["source"], "url": h["url"],
             "doc_id": h["doc_id"]} for h in hits]


@task(name="lineage")
def lineage(data_dir: str, stages: Registry) -> list[dict]:
    """Lineage of every output of ``stages`` (fingerprints, producing stage and key, inputs, config, code) as
    ``lineage.md`` and a Markdown artifact."""
    from prefect.artifacts import create_markdown_artifact

    from storage import atomic_write_text
    from storage.lineage import lineage_markdown, lineage_records

    records = lineage_records(data_dir, stages)
    md = lineage_markdown(records)
    atomic_write_text(Path(data_dir) / L.LINEAGE, md)
    create_markdown_artifact(markdown=md, key="lineage", description=f"Lineage of {data_dir}")
    return records


TASKS = {t.name: t for t in (import_documents, clean, sentences, segment_plan, segment_part, segment, vocab, datasets,
                             dataset_report, pretrain_data, pretrain, finetune, index_plan, embed_part, index,
                             evaluate_retrieval)}


def task_for(stage: Stage):
    """The task of ``stage``: one of :data:`TASKS` by name, else a generic one made now (:func:`task_of`)."""
    return TASKS.get(stage.name) or task_of(stage)
