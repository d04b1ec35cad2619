"""One report writer for every evaluation (SPEC §10 table form): runs as long rows (``set, model, seed, metric,
value`` plus sizes, seconds and a split note), summarised per set x metric x model as ``mean ± std`` over seeds
(sample std), each compared row's difference to the reference model (``plain`` by default) and whether it exceeds
two standard deviations of the difference (``sqrt(std² + std_ref²)``; ``n/a (1 seed)`` with one seed), beside a
published figure when one is given (the thesis's). Written as ``runs.jsonl`` + ``report.md``, each atomically.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pandas as pd

NEURAL = ("plain", "none", "gate", "attn")


def long_rows(set_name: str, model: str, seed: int | None, scores: dict, **extra) -> list[dict]:
    """One row per metric: ``set, model, seed, metric, value`` plus ``extra`` columns (sizes, split, seconds)."""
    return [{"set": set_name, "model": model, "seed": seed, "metric": k, "value": float(v), **extra}
            for k, v in scores.items()]


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """(mean, sample std; None for one value)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, None
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def _versus(mean: float, std: float | None, ref: tuple[float, float | None, int]) -> tuple[str, str]:
    rm, rs, _ = ref
    diff = mean - rm
    if std is None or rs is None:
        return f"{diff:+.4f}", "n/a (1 seed)"
    return f"{diff:+.4f}", "yes" if abs(diff) > 2 * math.sqrt(std ** 2 + rs ** 2) else "no"


def summary(rows: pd.DataFrame, metrics: dict[str, str] | None = None, reference: str = "plain",
            compared: tuple[str, ...] = ("none", "gate", "attn"), published: dict[str, float] | None = None,
            published_name: str = "published", seeded: tuple[str, ...] = NEURAL) -> list[dict]:
    """Table rows from long rows (columns set, model, seed, metric, value; optional seconds, train_rows,
    test_rows, split): per set (first-seen order) and metric (``metrics[set]``, else every metric of the set),
    per model: ``seeds`` (``-`` for a model not in ``seeded``: a baseline), ``mean ± std`` (4 decimals),
    ``published_name`` (``published[set]``) when given, ``vs <reference>`` and ``> 2 std`` for the ``compared``
    models, ``s / run``, ``train / test`` and ``split``."""
    out = []
    for set_name in dict.fromkeys(rows["set"]):
        mine = rows[rows["set"] == set_name]
        wanted = [metrics[set_name]] if metrics and set_name in metrics else list(dict.fromkeys(mine["metric"]))
        for metric in wanted:
            sub = mine[mine["metric"] == metric]
            stats = {m: mean_std([float(v) for v in sub[sub["model"] == m]["value"]])
                     + (int((sub["model"] == m).sum()),) for m in dict.fromkeys(sub["model"])}
            for model, (mean, std, n) in stats.items():
                first = sub[sub["model"] == model].iloc[0]
                row = {"set": set_name, "metric": metric, "model": model, "seeds": n if model in seeded else "-",
                       "mean ± std": f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else "")}
                if published is not None:
                    row[published_name] = f"{published[set_name]:.4f}" if set_name in published else ""
                row[f"vs {reference}"], row["> 2 std"] = (_versus(mean, std, stats[reference])
                                                          if model in compared and reference in stats else ("", ""))
                seconds = sub[sub["model"] == model].get("seconds")
                row["s / run"] = f"{seconds.mean():.0f}" if seconds is not None and seconds.notna().any() else ""
                row["train / test"] = (f"{int(first.get('train_rows', 0) or 0)} / {int(first.get('test_rows', 0) or 0)}"
                                       if "train_rows" in first else "")
                row["split"] = first.get("split", "") if isinstance(first.get("split", ""), str) else ""
                out.append(row)
    return out


def markdown(table: list[dict], title: str = "", key: str = "set") -> str:
    """A GitHub Markdown table of :func:`summary` rows; each set's split note listed once below it."""
    if not table:
        return title + "\n\n(no rows)\n"
    cols = [c for c in table[0] if c != "split"]
    lines = ([f"{title}", ""] if title else []) + ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in table]
    notes = dict.fromkeys(f"- {r[key]}: {r['split']}" for r in table if r.get("split"))
    return "\n".join(lines + [""] + list(notes)) + "\n"


def write_report(rows: list[dict], out_dir: str | os.PathLike, title: str, sets: list[dict] | None = None,
                 **summary_kw) -> dict[str, Path]:
    """Write ``runs.jsonl`` (the long rows), ``sets.json`` (each set's :meth:`EvalSet.describe`, when given:
    its files and their sha256) and ``report.md`` (:func:`summary` + :func:`markdown`) into ``out_dir``,
    each atomically; returns their paths.

    Raises:
        ValueError: no rows.
    """
    from storage.atomic import atomic_write_text

    if not rows:
        raise ValueError(f"report {title!r}: no rows to write")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"runs": atomic_write_text(out / "runs.jsonl", "".join(json.dumps(r, default=str) + "\n" for r in rows))}
    if sets is not None:
        paths["sets"] = atomic_write_text(out / "sets.json", json.dumps(sets, indent=1, default=str))
    table = summary(pd.DataFrame(rows), **summary_kw)
    paths["report"] = atomic_write_text(out / "report.md", markdown(table, title))
    return paths
