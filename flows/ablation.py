"""Ablation (SPEC §6: the ablation table fusion × dataset): plain BERT vs PolicyBERT fusion none/gate/attn, pretrained
and fine-tuned on PolicySM-1 and PolicySM-2 with one budget, over several seeds, beside the non-neural
baselines.

    python -m flows.ablation --input ../shared/corpus/policy_docs.csv --data-dir data --profile cpu-small [--seeds 3]

Reuses the main job's cached text stages and pretraining data (leak-free whole-word masking). Rows:
``plain`` (transformers' ``BertForPreTraining``/``BertForSequenceClassification``, no words), ``none``,
``gate``, ``attn`` (the profile's model size and training budget, training seed = profile seed + k for
k < seeds), plus ``majority`` and ``overlap_lr`` (char Jaccard + BM25 + lengths logistic regression,
:mod:`model.baselines`) fitted on the same train split. Columns: held-out MLM loss/accuracy, NSP
accuracy, dev/test accuracy and F1 on both datasets, each ``mean ± std`` over the seeds. Writes
``eval/ablation/`` (one row per model and seed) and the ``fusion-ablation`` table artifact (aggregated).
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
from flows.stages import Run, corpus_stages
from model.stages import PLAIN_BERT
from storage import layout as L
from storage import write_table
from tasks import stages as T

MODELS = (PLAIN_BERT, "none", "gate", "attn")
DATASETS = (L.POLICYSM1, L.POLICYSM2)
METRICS = ("mlm_loss", "mlm_accuracy", "nsp_accuracy") + tuple(
    f"{d}_{s}_{m}" for d in DATASETS for s in ("dev", "test") for m in ("accuracy", "f1"))


def aggregate(rows: list[dict]) -> list[dict]:
    """Per model: every metric as ``"mean ± std"`` (population std over seeds; 3 decimals), and ``seeds``."""
    import numpy as np

    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        agg = {"model": model, "seeds": len(mine)}
        for m in METRICS:
            vals = [r[m] for r in mine if r.get(m) is not None]
            agg[m] = f"{np.mean(vals):.3f} ± {np.std(vals):.3f}" if vals else ""
        out.append(agg)
    return out


@task(name="ablation-table")
def ablation_table(data_dir: str, rows: list[dict]) -> list[dict]:
    """Write the per-seed rows (Parquet under ``eval/ablation``) and publish the aggregated table artifact."""
    import pandas as pd

    write_table(pd.DataFrame(rows), Path(data_dir) / L.ABLATION, name="ablation")
    table = aggregate(rows)
    create_table_artifact(table=table, key="fusion-ablation",
                          description="PolicyBERT ablation: mean ± std over seeds, same budget per row")
    return table


def _row(model: str, seed: int, pre: dict | None, fins: dict[str, dict]) -> dict:
    h = (pre or {}).get("heldout") or {}
    row = {"model": model, "seed": seed, **{k: h.get(k) for k in ("mlm_loss", "mlm_accuracy", "nsp_accuracy")}}
    for d, fin in fins.items():
        for s in ("dev", "test"):
            row.update({f"{d}_{s}_accuracy": fin[s]["accuracy"], f"{d}_{s}_f1": fin[s]["f1"]})
    return row


@flow(name="policybert-ablation", log_prints=True)
def policybert_ablation(input: str, data_dir: str, profile: str = "cpu-small", models: list[str] = list(MODELS),
                        datasets: list[str] = list(DATASETS), seeds: int = 3) -> list[dict]:
    """Run the text stages (cache hits after the main job), then pretrain/fine-tune per model and seed;
    returns the aggregated table (the baselines last)."""
    cfg = get_profile(profile)
    data_dir = str(Path(data_dir).resolve())
    run = Run(cfg, data_dir)
    r = corpus_stages(run, input)
    pd_ = run.stage("pretrain-data", now=True)
    rows = []
    for model in models:
        for k in range(seeds):
            seed = cfg.pretrain.seed + k
            base = f"{L.ABLATION_MODELS}/{model}/seed={seed}"
            pre = T.pretrain(data_dir, model_kwargs=replace(cfg.model, fusion=model), cfg=replace(cfg.pretrain, seed=seed),
                             epochs=cfg.pretrain_epochs, adapt=cfg.domain_adapt, out=f"{base}/pretrain", wait_for=[pd_])
            fins = {d: T.finetune(data_dir, cfg=replace(cfg.finetune, seed=seed), max_eval_examples=cfg.finetune_max_eval,
                                  max_len=cfg.finetune_max_len,
                                  pretrained=f"{base}/pretrain", dataset=d, out=f"{base}/{d}", wait_for=[pre, r["datasets"]])
                    for d in datasets}
            rows.append(_row(model, seed, pre, fins))
    for b in ("majority", "overlap_lr"):  # deterministic: fitted on the same train split as every model
        rows.append(_row(b, cfg.pretrain.seed, None, {d: fins[d]["baselines"][b] for d in datasets}))
    table = ablation_table(data_dir, rows)
    for t in table:
        print(" | ".join(f"{k}={v}" for k, v in t.items()))
    return table


def main(argv: list[str] | None = None) -> int:
    """CLI entry: validate, take the data dir's run lock (as :func:`flows.pipeline.main`), run the ablation.
    Exits 2 on bad input or when ``--lock-timeout`` expires while another run holds the data dir."""
    from transformers.utils import logging as hf_logging

    from flows.cli import exclusive_run, preflight

    args = preflight("flows.ablation", argv, reexec=False)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    with exclusive_run(args):  # one run per data dir (shared with flows.pipeline)
        policybert_ablation(args.input, args.data_dir, args.profile, seeds=args.seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
