"""The flows behind the scheduled deployments of ``prefect.yaml`` (the whole job is
``flows/pipeline.py:policy_pipeline``):

- ``corpus-refresh`` (daily): crawl or import -> clean -> sentences -> segment -> vocab -> datasets -> report
- ``model-rebuild`` (weekly): pretraining data -> pretrain -> fine-tune -> retrieval evaluation
- ``index-refresh``: index refresh (only new/changed chunks embedded) -> retrieval evaluation

Each reads what the previous ones wrote under ``data_dir``; unchanged stages are cache hits. Each holds the
data dir's run lock (:mod:`ops.runlock`) while it runs, so the deployments, which share one data dir, and
CLI runs never write it at the same time (a second run waits).
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.profiles import get_profile
from flows.stages import Run, corpus_stages, index_stages, model_stages
from flows.summary import crawl_summary, format_crawl
from ops.runlock import run_lock
from storage.atomic import clean_leftovers
from tasks import stages as T


def _result(value):
    """A task's result, waiting for it when it is a future (so the run lock is held until the tasks end)."""
    return value.result() if hasattr(value, "result") else value


@flow(name="corpus-refresh", log_prints=True)
def corpus_refresh(data_dir: str, input: str = "crawl", profile: str = "cpu-small", registry: str | None = None,
                   refresh: bool = True, stopwords: str | None = None, columns: dict | None = None) -> dict:
    """Refresh the corpus and the datasets: ``input`` is ``"crawl"`` (conditional GETs with ``refresh``; one
    task per source, discovery of new documents, the crawl diff in the result and the ``crawl-diff``
    artifact) or a corpus file (CSV export; JSON Lines / Parquet read with the column mapping ``columns``)."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    with run_lock(data_dir, on_wait=print):
        clean_leftovers(data_dir)
        run = Run(cfg, data_dir, {"stopwords": stopwords, "columns": columns})
        r = corpus_stages(run, input, registry, refresh)
        T.lineage(data_dir, run.stages, wait_for=[r["report"]])
        out = {k: _result(r[k]) for k in ("clean", "vocab", "datasets")}
        crawl = crawl_summary(_result(r["import"]))
        if crawl is not None:
            out["crawl"] = crawl
            print("\n".join(format_crawl(crawl)))
        return out


@flow(name="model-rebuild", log_prints=True)
def model_rebuild(data_dir: str, profile: str = "cpu-small", char_backbone: str | None = None,
                  word_backbone: str | None = None) -> dict:
    """Rebuild PolicyBERT from the current datasets, then evaluate retrieval with the new encoder."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    with run_lock(data_dir, on_wait=print):
        clean_leftovers(data_dir)
        run = Run(cfg, data_dir, {"char_backbone": char_backbone, "word_backbone": word_backbone})
        r = model_stages(run)
        r.update(index_stages(run))
        T.lineage(data_dir, run.stages, wait_for=[r["retrieval_eval"]])
        r = {k: _result(v) for k, v in r.items()}
    return {"pretrain": r["pretrain"]["heldout"], "finetune": {k: r["finetune"][k] for k in ("dev", "test")},
            "retrieval": r["retrieval_eval"]["table"]}


@flow(name="index-refresh", log_prints=True)
def index_refresh(data_dir: str, profile: str = "cpu-small") -> dict:
    """Refresh the FAISS index from the current cleaned corpus and fine-tuned encoder."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    with run_lock(data_dir, on_wait=print):
        clean_leftovers(data_dir)
        run = Run(cfg, data_dir)
        r = index_stages(run)
        T.lineage(data_dir, run.stages, wait_for=[r["retrieval_eval"]])
        r = {k: _result(v) for k, v in r.items()}
    return {"index": r["index"], "retrieval": r["retrieval_eval"]["table"]}
