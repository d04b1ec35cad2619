"""Thin Prefect tasks of the public-benchmark flow (SPEC §10): the baselines of a task and one fine-tune run.
Inputs are in-memory splits, so no input-hash caching (a rerun trains again) and nothing persisted."""
from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE


@task(name="benchmark-baselines", cache_policy=NO_CACHE, persist_result=False)
def baselines(splits) -> list[dict]:
    """:func:`model.benchmark.baselines.run_baselines` of one task's (capped) splits."""
    from model.benchmark.baselines import run_baselines

    return run_baselines(splits)


@task(name="benchmark-finetune", task_run_name="{variant}-seed{seed}", cache_policy=NO_CACHE, persist_result=False)
def finetune(splits, model_dir: str, variant: str, budget, seed: int, matcher) -> dict:
    """:func:`model.benchmark.runner.finetune_task`: fine-tune ``variant`` with ``seed``, test metrics."""
    from model.benchmark.runner import finetune_task

    return finetune_task(splits, model_dir, variant, budget, seed, matcher)
