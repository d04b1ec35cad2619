"""Prefect tasks of the pipeline stages: one generic task per stage contract (SPEC §1), mapped stages included.

:func:`task_of` makes the task of any :class:`storage.contracts.Stage`: named after it, cached by its
contract (:func:`tasks.caching.stage_task`), its parameters those the contract declares (``data_dir``,
settings, inputs, records taken, files, placeholders), its body :func:`run_stage`: bind the declared paths and
parameters to the library function by name (:func:`bind`), call it, publish the stage's artifacts
(:mod:`tasks.artifacts`). The steps of a mapped stage (plan -> parts -> merge: segmentation, embedding) run
through :func:`run_mapped`, which owns the part files' paths: a part's file named by the task's cache key
under the stage's part folder, records carried between tasks with data-dir relative paths and made absolute
once before the library function is called, the part files of earlier runs pruned after the merge. The crawl
keeps its own small tasks (not cached: it looks at the web). Retries only on GPU-bound tasks and the crawl.
"""
from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any, Callable, Mapping

from prefect import get_run_logger, task
from prefect.exceptions import MissingContextError

from corpus import stages as text
from crawler import stages as crawler_stages
from model import stages as mstages
from retrieval import contracts as R
from retrieval.retrievers import query_index
from storage import layout as L
from storage.binding import bind, stage_function
from storage.contracts import Registry, Stage
from storage.memory import release_memory, reset_peak, rss
from storage.mapped import absolute_records, carried_record, part_file, parts_dir, prune_parts, record_list
from tasks.artifacts import publish
from tasks.caching import current_key, jsonable, stage_task
from tasks.progress import crawl_rate_limit, progress_artifact
from tasks.workers import per_worker

GPU = {"retries": 1, "retry_delay_seconds": 10, "tags": ["gpu"]}


def _hooks(stage: Stage, data_dir: str, params: Mapping[str, Any]) -> dict[str, Callable[[], Callable]]:
    """The callbacks a stage function may take, made when bound: ``on_step`` / ``on_progress`` (a progress
    artifact named after the stage, and its part for a mapped part) and ``load_encoder`` (the model loaded once
    per Dask worker for its content hash: :func:`tasks.workers.per_worker`)."""
    part = f"-{params['part']}" if params.get("part") is not None else ""
    what = ", ".join(stage.write_paths(data_dir, params)) or f"part {params.get('part')}"

    def progress() -> Callable:
        return progress_artifact(f"{stage.name}-progress{part}", f"{stage.name} steps ({what})")

    def loader() -> Callable:
        return lambda load, key: per_worker((stage.name, str(data_dir), key), load)

    return {"on_step": progress, "on_progress": progress, "load_encoder": loader}


def run_stage(stage: Stage, fn: Callable, data_dir: str, params: dict, part: Path | None = None) -> Any:
    """Call ``fn`` with its arguments bound from the contract (``part``: a part file, see :func:`bind`), publish
    the stage's artifacts; returns the result (its ``keep`` keys)."""
    reset_peak()
    try:
        out = fn(**bind(stage, fn, data_dir, params, _hooks(stage, data_dir, params), part))
    finally:
        _log_memory(stage.name)
    publish(stage.name, out, stage.write_paths(data_dir, params))
    return {k: out[k] for k in stage.keep} if stage.keep else out


def _log_memory(name: str) -> None:
    """Hand the stage's freed memory back (:func:`storage.memory.release_memory`) and log the process's peak
    resident set during the stage and what is left after (MiB; with two stages at once the peak is shared)."""
    seen = rss()
    release_memory()
    left = rss()
    if seen is None or left is None:
        return
    try:
        log = get_run_logger()
    except MissingContextError:  # called outside a flow or task run (a notebook, a test)
        log = logging.getLogger(__name__)
    log.info(f"memory: {name} peak RSS {seen.peak} MiB, {left.now} MiB after release")


def run_mapped(stage: Stage, fn: Callable, data_dir: str, params: dict) -> Any:
    """A step of a mapped stage (SPEC §1): the records in its ``takes_parts`` parameters made absolute, its part
    file (``part_file``) named by the running task's cache key, :func:`run_stage`; a part returns its record with
    the path relative to ``data_dir``; a merge then removes the part files its records do not name."""
    records = {p: absolute_records(params.get(p), data_dir) for p in stage.takes_parts}
    part = (part_file(parts_dir(data_dir, stage.name), current_key(), stage.part_file)
            if stage.part_file is not None else None)
    out = run_stage(stage, fn, data_dir, {**params, **records}, part)
    if stage.merges:
        for param, producer in stage.takes_parts.items():
            prune_parts(parts_dir(data_dir, producer), record_list(records[param]))
    if part is None:
        return out
    return carried_record(out, part, data_dir, **({"part": params["part"]} if "part" in params else {}))


def task_of(stage: Stage):
    """The Prefect task of ``stage``: ``task(data_dir, *stage.parameters)`` (see the module docstring)."""
    fn = stage_function(stage)
    sig = _task_signature(stage, fn)
    body = run_mapped if stage.part_file is not None or stage.takes_parts else run_stage

    def run(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        params = dict(bound.arguments)
        return body(stage, fn, params.pop("data_dir"), params)

    run.__signature__ = sig
    run.__name__ = run.__qualname__ = stage.name.replace("-", "_")
    helpers = "".join(inspect.getsource(f) for f in (body, run_stage, _hooks))
    return stage_task(stage, source=helpers, **(GPU if stage.gpu else {}))(run)


def _task_signature(stage: Stage, fn: Callable) -> inspect.Signature:
    """``(data_dir, *stage.parameters)``, each parameter with its :func:`_default`."""
    fn_params = inspect.signature(fn).parameters
    return inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                default=_default(stage, n, fn_params))
                              for n in ["data_dir", *stage.parameters]])


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
segment_part = task_of(text.SEGMENT_PART)
segment = task_of(text.SEGMENT)
vocab = task_of(text.VOCAB)
datasets = task_of(text.DATASETS)
dataset_report = task_of(text.REPORT)
pretrain_data = task_of(mstages.PRETRAIN_DATA)
pretrain = task_of(mstages.PRETRAIN)
finetune = task_of(mstages.FINETUNE)
index_plan = task_of(R.INDEX_PLAN)
embed_part = task_of(R.EMBED_PART)
index = task_of(R.INDEX)
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

    stage, params = crawler_stages.CRAWL_SOURCE, {"source_id": source_id, "registry": registry or DEFAULT_REGISTRY,
                                                  "cfg": CrawlConfig(refresh=refresh)}
    fn = stage_function(stage)
    return jsonable(fn(**bind(stage, fn, data_dir, params, {"before_request": lambda: crawl_rate_limit})))


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
    stage, fn = crawler_stages.CRAWL_MERGE, stage_function(crawler_stages.CRAWL_MERGE)
    params = {"records": recs, "registry": registry, "cfg": CrawlConfig(refresh=refresh)}
    stats = fn(**bind(stage, fn, data_dir, params))
    names = {r["source_id"]: r["name"] for r in recs}
    create_table_artifact(key="crawl-diff", description="Crawl diff per source (documents by status)",
                          table=[{"source": names.get(sid, sid), "source_id": sid, **counts}
                                 for sid, counts in stats["diff"].items()])
    return stats


@task(name="sample-query")
def sample_query(data_dir: str, query: str, k: int = 3) -> list[dict]:
    """Top-k hits for one query against the serving index (not cached: it reads the live index)."""
    hits = query_index(R.INDEX.write_paths(data_dir)["index"], query, k)
    return [{"score": h.score, "title": h.title, "source": h.source, "url": h.url, "doc_id": h.doc_id}
            for h in hits]  # the artifact's rows: rendered here (retrieval.hits.SearchHit)


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
