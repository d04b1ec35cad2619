"""The flows behind the scheduled deployments of ``prefect.yaml`` (the whole job is
``flows/pipeline.py:policy_pipeline``):

- ``corpus-refresh`` (daily): crawl or import -> clean -> sentences -> segment -> vocab -> datasets -> report
- ``model-rebuild`` (weekly): pretraining data -> pretrain -> fine-tune -> retrieval evaluation
- ``index-refresh``: index refresh (only new/changed chunks embedded) -> retrieval evaluation

Each reads what the previous ones wrote under ``data_dir``; unchanged stages are cache hits.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.profiles import get_profile
from flows.stages import corpus_stages, index_stages, model_stages
from tasks import stages as T


@flow(name="corpus-refresh", log_prints=True)
def corpus_refresh(data_dir: str, input: str = "crawl", profile: str = "cpu-small", registry: str | None = None,
                   refresh: bool = True, stopwords: str | None = None) -> dict:
    """Refresh the corpus and the datasets: ``input`` is ``"crawl"`` (conditional GETs with ``refresh``)
    or a CSV export."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    r = corpus_stages(cfg, data_dir, input, None, stopwords, registry, refresh)
    T.lineage(data_dir, wait_for=[r["report"]])
    return {k: r[k] for k in ("clean", "vocab", "datasets")}


@flow(name="model-rebuild", log_prints=True)
def model_rebuild(data_dir: str, profile: str = "cpu-small", char_backbone: str | None = None,
                  word_backbone: str | None = None) -> dict:
    """Rebuild PolicyBERT from the current datasets, then evaluate retrieval with the new encoder."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    r = model_stages(cfg, data_dir, None, char_backbone, word_backbone)
    r.update(index_stages(cfg, data_dir, [r["finetune"]]))
    T.lineage(data_dir, wait_for=[r["retrieval_eval"]])
    return {"pretrain": r["pretrain"]["heldout"], "finetune": {k: r["finetune"][k] for k in ("dev", "test")},
            "retrieval": r["retrieval_eval"]["table"]}


@flow(name="index-refresh", log_prints=True)
def index_refresh(data_dir: str, profile: str = "cpu-small") -> dict:
    """Refresh the FAISS index from the current cleaned corpus and fine-tuned encoder."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    r = index_stages(cfg, data_dir)
    T.lineage(data_dir, wait_for=[r["retrieval_eval"]])
    return {"index": r["index"], "retrieval": r["retrieval_eval"]["table"]}
