"""The benchmark table (thesis Table 4 as the project reproduces it, SPEC §10): per task x model the main
metric's mean ± std over seeds, the thesis's PolicyBERT figure beside it, and for each fusion row its difference
to the plain row with whether that difference exceeds two standard deviations of the difference
(``sqrt(std_fusion² + std_plain²)``, sample std over seeds; n/a with one seed)."""
from __future__ import annotations

import math

import pandas as pd

from model.benchmark.data import TASKS

NEURAL = ("plain", "none", "gate", "attn")


def long_rows(task: str, model: str, seed: int | None, scores: dict, **extra) -> list[dict]:
    """One row per metric: ``task, model, seed, metric, value`` plus ``extra`` columns (sizes, split, ...)."""
    return [{"task": task, "model": model, "seed": seed, "metric": k, "value": float(v), **extra}
            for k, v in scores.items()]


def _stats(values: list[float]) -> tuple[float, float | None]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def summary(rows: pd.DataFrame) -> list[dict]:
    """Aggregate long rows (columns task, model, seed, metric, value, train_rows, test_rows, split, seconds) into
    table rows: task, metric, model, seeds, ``mean ± std`` (3 decimals), thesis, vs plain, > 2 std, seconds per
    run, train/test rows and split note."""
    out = []
    for task in [t for t in TASKS if t in set(rows["task"])]:
        spec = TASKS[task]
        mine = rows[(rows["task"] == task) & (rows["metric"] == spec.metric)]
        stats = {}
        for model in dict.fromkeys(mine["model"]):
            vals = [float(v) for v in mine[mine["model"] == model]["value"]]
            stats[model] = _stats(vals) + (len(vals),)
        for model, (mean, std, n) in stats.items():
            sub = mine[mine["model"] == model].iloc[0]
            row = {"task": task, "metric": spec.metric, "model": model, "seeds": n if model in NEURAL else "-",
                   "mean ± std": f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else ""),
                   "thesis (PolicyBERT)": f"{spec.thesis:.4f}", "vs plain": "", "> 2 std": "",
                   "s / run": f"{mine[mine['model'] == model]['seconds'].mean():.0f}" if "seconds" in mine else "",
                   "train / test": f"{int(sub.get('train_rows', 0))} / {int(sub.get('test_rows', 0))}",
                   "split": sub.get("split", "")}
            if model in ("none", "gate", "attn") and "plain" in stats:
                pm, ps, _ = stats["plain"]
                diff = mean - pm
                row["vs plain"] = f"{diff:+.4f}"
                row["> 2 std"] = ("n/a (1 seed)" if std is None or ps is None
                                  else ("yes" if abs(diff) > 2 * math.sqrt(std ** 2 + ps ** 2) else "no"))
            out.append(row)
    return out


def markdown(table: list[dict], title: str = "") -> str:
    """A GitHub Markdown table of :func:`summary` rows (the split notes listed below it, once per task)."""
    if not table:
        return title + "\n\n(no rows)\n"
    cols = [c for c in table[0] if c != "split"]
    lines = ([f"{title}", ""] if title else []) + ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in table]
    notes = dict.fromkeys(f"- {r['task']}: {r['split']}" for r in table if r.get("split"))
    return "\n".join(lines + [""] + list(notes)) + "\n"
