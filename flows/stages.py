"""Groups of stage tasks that several flows share (called inside a flow, they add tasks to it).

- :func:`corpus_stages`: import or crawl -> clean -> sentences -> segment -> vocab -> datasets -> report
- :func:`model_stages`: pretraining data -> pretrain -> fine-tune on PolicySM-1
- :func:`index_stages`: index plan -> embedding mapped over parts -> publish -> retrieval evaluation

Segmentation and embedding are mapped over partitions (``segment_parts``, ``embed_parts``) and run in
parallel on the flow's task runner (threads by default, Dask workers with ``--dask``); the merge steps
assemble the parts in order, so the outputs are the same whatever the runner.

Every stage task is declared as materializing its outputs (``file://`` asset keys under the data dir),
so each run emits asset events with their upstream assets.
"""
from __future__ import annotations

from pathlib import Path

from prefect import unmapped

from flows.crawl import crawl_sources
from flows.profiles import PipelineConfig
from storage import layout as L
from tasks import stages as T
from tasks.assets import materializing as M


def _sibling(path: str, name: str) -> str | None:
    p = Path(path).parent / name
    return str(p) if p.is_file() else None


def mapped_stage(plan, part_task, n_parts: int, merge_task, data_dir: str, part_args: tuple = (),
                 merge_args: tuple = (), merge_kwargs: dict | None = None, submit: bool = False):
    """Plan -> parts -> merge: ``part_task(data_dir, plan, i, *part_args)`` for each of ``n_parts`` parts on the
    flow's task runner, then ``merge_task(data_dir, parts, *merge_args)`` with the parts' records in order
    (submitted to the runner too with ``submit``: then a future is returned, else the merge's result).
    The plan (a task future) is passed to every part, so each part's cache key sees exactly what it will do."""
    parts = part_task.map(unmapped(data_dir), unmapped(plan), range(n_parts), *[unmapped(a) for a in part_args])
    call = merge_task.submit if submit else merge_task
    return call(data_dir, *merge_args, parts=parts, **(merge_kwargs or {}))


def corpus_stages(cfg: PipelineConfig, data_dir: str, input: str, sources_csv: str | None = None,
                  stopwords: str | None = None, registry: str | None = None, refresh: bool = False,
                  columns: dict | None = None) -> dict:
    """Text stages; ``input`` is a CSV export, a JSON Lines / Parquet file read with the column mapping
    ``columns``, or ``"crawl"``. Every stage is submitted to the flow's task runner (threads, or Dask worker
    processes with ``--task-runner dask``), so the whole text side runs where the runner puts it. Returns the
    stage futures by name (the crawl's merge stats as a value)."""
    r: dict = {}
    if input == "crawl":
        r["import"] = crawl_sources(data_dir, registry, refresh)
    else:
        sources_csv = sources_csv or _sibling(input, "policy_sources.csv")
        stopwords = stopwords or _sibling(input, "stopwords.txt")
        r["import"] = M(T.import_documents, data_dir).submit(data_dir, str(Path(input).resolve()), sources_csv, columns)
    r["clean"] = M(T.clean, data_dir).submit(data_dir, cfg.clean, wait_for=[r["import"]])
    r["sentences"] = M(T.sentences, data_dir).submit(data_dir, cfg.sentences, wait_for=[r["clean"]])
    plan = T.segment_plan.submit(data_dir, cfg.segment_parts, wait_for=[r["sentences"]])
    r["segment"] = mapped_stage(plan, T.segment_part, cfg.segment_parts, M(T.segment, data_dir), data_dir,
                                (cfg.segmenter,), (cfg.segmenter,), submit=True)
    r["vocab"] = M(T.vocab, data_dir).submit(data_dir, stopwords, cfg.vocab, wait_for=[r["segment"]])
    r["datasets"] = M(T.datasets, data_dir).submit(data_dir, cfg.pairs, wait_for=[r["sentences"]])
    r["report"] = M(T.dataset_report, data_dir).submit(data_dir, wait_for=[r["datasets"], r["vocab"]])
    return r


def model_stages(cfg: PipelineConfig, data_dir: str, upstream: list | None = None,
                 char_backbone: str | None = None, word_backbone: str | None = None) -> dict:
    """Pretraining data, pretraining and fine-tuning on PolicySM-1 (reads the text stages' outputs)."""
    r: dict = {}
    upstream = upstream or []
    r["pretrain_data"] = M(T.pretrain_data, data_dir)(
        data_dir, cfg.pairs, cfg.pretrain_data, cfg.pretrain_epochs, char_backbone, wait_for=upstream)
    r["pretrain"] = M(T.pretrain, data_dir, out=L.PRETRAINED_MODEL)(
        data_dir, cfg.model, cfg.pretrain, cfg.pretrain_epochs, L.PRETRAINED_MODEL, char_backbone, word_backbone,
        wait_for=[r["pretrain_data"]])
    r["finetune"] = M(T.finetune, data_dir, out=L.FINETUNED_MODEL)(
        data_dir, cfg.finetune, cfg.finetune_max_eval, wait_for=[r["pretrain"], *upstream])
    return r


def index_stages(cfg: PipelineConfig, data_dir: str, upstream: list | None = None) -> dict:
    """Index refresh (only new/changed chunks embedded) and the retrieval evaluation."""
    r: dict = {}
    plan = T.index_plan(data_dir, cfg.chunks, cfg.index, wait_for=upstream or [])
    r["index"] = mapped_stage(plan, T.embed_part, cfg.embed_parts, M(T.index, data_dir), data_dir,
                              (cfg.embed_parts, cfg.embed_batch_size),
                              (cfg.chunks, cfg.index, cfg.embed_batch_size, cfg.embed_parts), {"plan": plan})
    r["retrieval_eval"] = M(T.evaluate_retrieval, data_dir)(data_dir, cfg.segmenter, cfg.pairs.seed, wait_for=[r["index"]])
    return r
