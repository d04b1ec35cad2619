"""The main job: ``policy_pipeline`` from documents to a FAISS index (SPEC §1).

    python -m flows.pipeline --input ../shared/corpus/policy_docs.csv --data-dir data --profile cpu-small

Stages (one cached task each): import -> clean -> sentences -> segment -> vocab -> datasets ->
pretrain data -> pretrain -> finetune (PolicySM-1) -> index -> sample query. A rerun with nothing
changed hits the cache for every stage; a killed run resumes at the first unfinished one.
"""
from __future__ import annotations

if __name__ == "__main__":  # validate, and set Prefect's home under the data dir, before prefect is imported
    from flows.cli import preflight

    preflight("flows.pipeline")

import json
import sys
from pathlib import Path

from prefect import flow

from flows.profiles import get_profile, with_settings
from flows.runners import task_runner
from flows.stages import Run, corpus_stages, index_stages, model_stages
from flows.summary import build_summary, format_summary, sample_answer
from storage import atomic_write_text
from storage.atomic import clean_leftovers
from storage import layout as L
from tasks import stages as T


@flow(name="policy-pipeline", log_prints=True)
def policy_pipeline(input: str, data_dir: str, profile: str = "cpu-small", sources_csv: str | None = None,
                    stopwords: str | None = None, char_backbone: str | None = None,
                    word_backbone: str | None = None, registry: str | None = None, refresh: bool = False,
                    settings: list[str] | None = None, columns: dict | None = None) -> dict:
    """Run every stage on a CSV export ``input`` into ``data_dir``; returns the run summary.

    ``sources_csv`` / ``stopwords`` default to ``policy_sources.csv`` / ``stopwords.txt`` beside the input.
    ``char_backbone`` / ``word_backbone``: local BERT (bge) / ZEN checkpoint dirs to initialise PolicyBERT.
    ``input="crawl"`` crawls the sources of ``registry`` (default ``crawler/sources.yaml``) instead;
    ``refresh`` re-checks already fetched pages with conditional GETs. ``settings``: ``KEY=VALUE``
    overrides of the profile (:func:`flows.profiles.with_settings`). ``columns``: the column mapping of a
    JSON Lines / Parquet ``input`` (:class:`crawler.records_import.ColumnMapping` fields).
    """
    cfg = with_settings(get_profile(profile), settings)
    data_dir = str(Path(data_dir).resolve())
    clean_leftovers(data_dir)
    run = Run(cfg, data_dir, {"sources_csv": sources_csv, "stopwords": stopwords, "columns": columns,
                              "char_backbone": char_backbone, "word_backbone": word_backbone})
    r = corpus_stages(run, input, registry, refresh)
    r = {k: v.result() if hasattr(v, "result") else v for k, v in r.items()}
    r.update(model_stages(run))
    r.update(index_stages(run))
    r["sample_query"] = T.sample_query(data_dir, cfg.sample_query, 3, wait_for=[r["index"]])
    r["lineage"] = T.lineage(data_dir, run.stages, wait_for=[r["retrieval_eval"], r["report"]])
    r["sample_answer"] = sample_answer(data_dir, cfg.sample_query)
    summary = build_summary(cfg.name, r)
    atomic_write_text(Path(data_dir) / L.SUMMARY, json.dumps(summary, ensure_ascii=False, indent=1))
    print(format_summary(summary))
    return summary


def main(argv: list[str] | None = None) -> int:
    """CLI entry (see :mod:`flows.cli`): validate, take the data dir's run lock, run the flow, print the summary.
    Exits 2 on bad input or when ``--lock-timeout`` expires while another run holds the data dir."""
    from transformers.utils import logging as hf_logging

    from flows.cli import column_mapping, exclusive_run, preflight

    args = preflight("flows.pipeline", argv, reexec=False)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    flow_ = policy_pipeline.with_options(task_runner=task_runner(args.task_runner, args.dask_address,
                                                                 dask_workers=args.dask_workers))
    with exclusive_run(args):  # one run per data dir; stops orphaned servers; SIGTERM stops ours
        flow_(args.input, args.data_dir, args.profile, args.sources_csv, args.stopwords, args.char_backbone,
              args.word_backbone, args.registry, args.refresh, args.settings, column_mapping(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
