"""Ablation: fusion in {none, gate, attn} x dataset in {PolicySM-1, PolicySM-2}, same budget and seed.

    python -m flows.ablation --input ../shared/corpus/policy_docs.csv --data-dir data --profile cpu-small

Reuses the main job's cached text stages, pretrains one model per fusion and fine-tunes each on both
datasets; writes ``eval/ablation/`` (Parquet) and a Prefect table artifact with MLM loss/accuracy,
perplexity, NSP accuracy and dev/test accuracy and F1.
"""
from __future__ import annotations

if __name__ == "__main__":
    from flows.cli import preflight

    preflight("flows.ablation")

import sys
from dataclasses import replace
from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_table_artifact

from flows.profiles import get_profile
from flows.stages import corpus_stages
from storage import layout as L
from storage import write_table
from tasks import stages as T

FUSIONS = ("none", "gate", "attn")
DATASETS = (L.POLICYSM1, L.POLICYSM2)


@task(name="ablation-table")
def ablation_table(data_dir: str, rows: list[dict]) -> list[dict]:
    """Write the results table (Parquet under ``eval/ablation``) and publish it as a table artifact."""
    import pandas as pd

    write_table(pd.DataFrame(rows), Path(data_dir) / L.ABLATION, name="ablation")
    create_table_artifact(table=rows, key="fusion-ablation", description="PolicyBERT fusion x dataset ablation")
    return rows


@flow(name="policybert-ablation", log_prints=True)
def policybert_ablation(input: str, data_dir: str, profile: str = "cpu-small", fusions: list[str] = list(FUSIONS),
                        datasets: list[str] = list(DATASETS)) -> list[dict]:
    """Run the text stages (cache hits after the main job), then pretrain/fine-tune per fusion and dataset."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    r = corpus_stages(cfg, data_dir, input)
    ds = r["datasets"]
    pd_ = T.pretrain_data(data_dir, cfg.pairs, cfg.pretrain_data, cfg.pretrain_epochs, wait_for=[r["vocab"], r["segment"]])
    rows = []
    for fusion in fusions:
        pre_out = f"{L.ABLATION_MODELS}/{fusion}/pretrain"
        pre = T.pretrain(data_dir, replace(cfg.model, fusion=fusion), cfg.pretrain, cfg.pretrain_epochs, pre_out,
                         wait_for=[pd_])
        for dataset in datasets:
            fin = T.finetune(data_dir, cfg.finetune, cfg.finetune_max_eval, pre_out, dataset,
                             f"{L.ABLATION_MODELS}/{fusion}/{dataset}", wait_for=[pre, ds])
            h = pre["heldout"]
            rows.append({"fusion": fusion, "dataset": dataset, "mlm_loss": round(h["mlm_loss"], 4),
                         "mlm_accuracy": round(h["mlm_accuracy"], 4), "perplexity": round(h["perplexity"], 2),
                         "nsp_accuracy": round(h["nsp_accuracy"], 4), "dev_accuracy": round(fin["dev"]["accuracy"], 4),
                         "dev_f1": round(fin["dev"]["f1"], 4), "test_accuracy": round(fin["test"]["accuracy"], 4),
                         "test_f1": round(fin["test"]["f1"], 4), "test_majority": round(fin["majority_test"], 4)})
    ablation_table(data_dir, rows)
    for r in rows:
        print(" | ".join(f"{k}={v}" for k, v in r.items()))
    return rows


def main(argv: list[str] | None = None) -> int:
    from transformers.utils import logging as hf_logging

    from flows.cli import preflight

    args = preflight("flows.ablation", argv, reexec=False)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    policybert_ablation(args.input, args.data_dir, args.profile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
