"""The public-benchmark table (thesis Table 4 as the project reproduces it, SPEC §10): per task x model the main
metric's mean ± std over seeds, the thesis's PolicyBERT figure beside it, and for each fusion row its difference
to the plain row with whether that difference exceeds two standard deviations of the difference
(``sqrt(std_fusion² + std_plain²)``, sample std over seeds; n/a with one seed). The table is
:mod:`evaluation.report`'s, keyed by ``task``."""
from __future__ import annotations

import pandas as pd

from evaluation import report as _report
from model.benchmark.data import TASKS

NEURAL = _report.NEURAL


def long_rows(task: str, model: str, seed: int | None, scores: dict, **extra) -> list[dict]:
    """One row per metric: ``task, model, seed, metric, value`` plus ``extra`` columns (sizes, split, ...)."""
    return [{"task": r.pop("set"), **r} for r in _report.long_rows(task, model, seed, scores, **extra)]


def summary(rows: pd.DataFrame) -> list[dict]:
    """Aggregate long rows (columns task, model, seed, metric, value, train_rows, test_rows, split, seconds) into
    table rows: task, metric, model, seeds, ``mean ± std`` (4 decimals), thesis, vs plain, > 2 std, seconds per
    run, train/test rows and split note (:func:`evaluation.report.summary`), tasks in :data:`TASKS` order."""
    order = {t: i for i, t in enumerate(TASKS)}
    known = rows[rows["task"].isin(order)]
    known = known.iloc[known["task"].map(order).argsort(kind="stable")].rename(columns={"task": "set"})
    if known.empty:
        return []
    table = _report.summary(known, metrics={t: s.metric for t, s in TASKS.items()},
                            published={t: s.thesis for t, s in TASKS.items()}, published_name="thesis (PolicyBERT)")
    return [{"task": r.pop("set"), **r} for r in table]


def markdown(table: list[dict], title: str = "") -> str:
    """A GitHub Markdown table of :func:`summary` rows (the split notes listed below it, once per task)."""
    return _report.markdown(table, title, key="task")
