"""The thesis's public benchmarks (SPEC §10, thesis Tables 3-4): fine-tune a checkpoint on CWS, POS, NER, DC, SA
and SPM and evaluate on test, beside baselines that cannot learn from the encoder.

    python -m flows.benchmark --task cws|pos|ner|dc|sa|spm|all --model DIR [--fusion none,gate,attn] [--seeds N]
        [--max-train N] [--max-eval N] [--budget cpu-small|cpu-4layer|gpu-base] [--no-word-add-above] [--qv-layers N]
        [--qv-init rezero|gate-bias] [--qv-gate-bias B] [--out DIR] [--data ../shared/benchmarks]

``--model DIR`` is a BERT checkpoint with a char ``vocab.txt`` (rows ``plain`` + PolicyBERT with each
``--fusion`` on its body) or a PolicyBERT checkpoint (its own fusion). Splits: the published ones, or the
README's fallbacks (said in the table). Writes ``OUT/benchmark.parquet`` (one row per task x model x seed x
metric: ``task, model, seed, metric, value`` + ``train_rows, test_rows, split, budget, seconds``),
``OUT/benchmark.md`` and the ``benchmark`` table artifact (mean ± std, the thesis's figure, fusion vs plain).

``--qv-layers N`` (SPEC §11): on the sequence tasks (dc, sa, spm) every model row is also run with QV-attention
on its last N char layers, as row ``<model>+qvN`` (same seeds and budget), compared with its own row without QV
(``vs plain`` / ``> 2 std`` of that row); token tasks are run without it.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

TASK_NAMES = ("cws", "pos", "ner", "dc", "sa", "spm")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m flows.benchmark", description=__doc__.split("\n\n")[0])
    p.add_argument("--task", required=True, help="one of cws, pos, ner, dc, sa, spm, a comma list, or all")
    p.add_argument("--model", default=None, help="BERT or PolicyBERT checkpoint dir (omit with --baselines-only)")
    p.add_argument("--fusion", default="gate", help="PolicyBERT fusions on a BERT body, comma list of none,gate,attn")
    p.add_argument("--seeds", type=int, default=3, help="training seeds per model (mean ± std)")
    p.add_argument("--max-train", type=int, default=None, help="cap on train rows (overrides the budget's)")
    p.add_argument("--max-eval", type=int, default=None, help="cap on dev/test rows (overrides the budget's)")
    p.add_argument("--budget", default="cpu-small", choices=("cpu-small", "cpu-4layer", "gpu-base", "tiny"))
    p.add_argument("--device", default=None, help="override the budget's device (cpu, cuda, auto)")
    p.add_argument("--out", default="eval/benchmark", help="output dir (benchmark.parquet, benchmark.md)")
    p.add_argument("--data", default=None, help="benchmark sets root (default ../shared/benchmarks)")
    p.add_argument("--vocab", default=None, help="word vocabulary: a vocab.txt or a data dir with vocab/vocab.txt "
                                                 "(default: the checkpoint's, else built from each train split)")
    p.add_argument("--baselines-only", action="store_true", help="run the non-neural baselines only")
    p.add_argument("--no-word-add-above", action="store_true",
                   help="PolicyBERT fuses words in its word layers only (config word_add_above=False; default: "
                        "the last word states are also added above them, as ZEN, SPEC §6)")
    p.add_argument("--qv-layers", type=int, default=0,
                   help="also run each model with QV-attention on its last N layers on dc/sa/spm (SPEC §11; 0 = off)")
    p.add_argument("--qv-init", default="rezero", choices=["rezero", "gate-bias"],
                   help="QV initialisation: rezero (g = V + gamma (1 - beta)(mix - V), gamma = 0: exactly the body "
                        "at step 0; default) or gate-bias (SPEC §11 as written, beta = sigmoid(bias) ~ 1)")
    p.add_argument("--qv-gate-bias", type=float, default=None,
                   help="initial bias of the QV gate (default: the init's own, +10 gate-bias, 0 rezero)")
    return p


def validate(args: argparse.Namespace) -> argparse.Namespace:
    """Normalise ``task``/``fusion`` into lists; raise ValueError naming a bad flag."""
    tasks = list(TASK_NAMES) if args.task == "all" else [t.strip() for t in args.task.split(",") if t.strip()]
    bad = [t for t in tasks if t not in TASK_NAMES]
    if bad or not tasks:
        raise ValueError(f"--task {args.task}: unknown task(s) {bad} (cws, pos, ner, dc, sa, spm, all)")
    fusions = [f.strip() for f in args.fusion.split(",") if f.strip()]
    if [f for f in fusions if f not in ("none", "gate", "attn")]:
        raise ValueError(f"--fusion {args.fusion}: choose from none, gate, attn")
    if args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds}: need at least 1")
    if args.qv_layers < 0:
        raise ValueError(f"--qv-layers {args.qv_layers}: must be >= 0 (0 = off)")
    if not args.baselines_only:
        if not args.model or not (Path(args.model) / "config.json").is_file():
            raise ValueError(f"--model {args.model}: not a checkpoint folder (no config.json)")
        if not (Path(args.model) / "vocab.txt").is_file():
            raise ValueError(f"--model {args.model}: no char vocab.txt (convert a SentencePiece checkpoint with "
                             "python -m model.backbones char-checkpoint)")
    args.tasks, args.fusions = tasks, fusions
    return args


def cli_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse and validate; on bad input print ``error: …`` and exit 2 (before prefect is imported)."""
    args = parser().parse_args(argv)
    try:
        return validate(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":  # Prefect's home under --out, set before prefect loads
    import os

    from flows.env import prefect_env, reexec_with_prefect_env

    _args = cli_args()
    if not os.environ.get("PREFECT_API_URL"):
        os.makedirs(prefect_env(_args.out)["PREFECT_HOME"], exist_ok=True)
        reexec_with_prefect_env(_args.out, "flows.benchmark")

from dataclasses import replace  # noqa: E402

from prefect import flow  # noqa: E402
from prefect.artifacts import create_table_artifact  # noqa: E402

from tasks import benchmark as T  # noqa: E402


@flow(name="public-benchmarks", log_prints=True)
def benchmark_flow(tasks: list[str], model_dir: str | None, fusions: list[str], seeds: int = 3,
                   budget: str = "cpu-small", out: str = "eval/benchmark", data: str | None = None,
                   max_train: int | None = None, max_eval: int | None = None, vocab: str | None = None,
                   device: str | None = None, baselines_only: bool = False,
                   word_add_above: bool = True, qv_layers: int = 0, qv_gate_bias: float | None = None,
                   qv_init: str = "rezero") -> list[dict]:
    """Per task: load (fallback splits), cap to the budget, baselines, then every model row x seed (seeds 13,
    14, ...), on sequence tasks also each row with QV-attention on its last ``qv_layers`` layers; write
    ``out/benchmark.parquet`` and ``out/benchmark.md`` atomically and the ``benchmark`` table artifact. Returns the
    summary table (:func:`evaluation.benchmark_table.summary`, QV rows compared by :func:`qv_versus_base`)."""
    import pandas as pd

    from model.benchmark.data import cap, load_task
    from model.benchmark.inputs import word_matcher
    from evaluation.benchmark_table import long_rows, markdown, summary
    from model.benchmark.runner import BUDGETS, variants_for
    from storage.atomic import atomic_path

    b = BUDGETS[budget]
    b = replace(b, max_train=max_train or b.max_train, max_eval=max_eval or b.max_eval, device=device or b.device,
                word_add_above=word_add_above)
    rows: list[dict] = []
    for name in tasks:
        t0 = time.perf_counter()
        splits = cap(load_task(name, data), b.max_train, b.max_eval)
        extra = {"train_rows": len(splits.train), "test_rows": len(splits.test), "split": splits.note,
                 "budget": b.describe()}
        for r in T.baselines(splits):
            rows += long_rows(name, r["model"], None, r["scores"], seconds=r["seconds"], **extra)
        if not baselines_only:
            matcher, source = word_matcher(splits, model_dir, vocab)
            print(f"{name}: words from {source}")
            for variant, vb, label in model_rows(variants_for(model_dir, fusions), b, splits.task.kind,
                                                 qv_layers, qv_gate_bias, qv_init):
                for k in range(seeds):
                    r = T.finetune(splits, model_dir, variant, vb, 13 + k, matcher)
                    rows += long_rows(name, label, 13 + k, r["scores"], seconds=r["seconds"],
                                      **dict(extra, budget=vb.describe()))
                    print(f"{name} {label} seed {13 + k}: {json.dumps(r['scores'])} ({r['seconds']:.0f} s, "
                          f"{r['steps']} steps, best step {r['best_step']}, {r['device']})")
        print(f"{name}: {time.perf_counter() - t0:.0f} s")
    df = pd.DataFrame(rows)
    table = qv_versus_base(df, summary(df))
    outp = Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    with atomic_path(outp / "benchmark.parquet") as tmp:
        df.to_parquet(tmp, index=False)
    title = f"Public benchmarks, {b.describe()}; model {model_dir or '-'}"
    with atomic_path(outp / "benchmark.md") as tmp:
        tmp.write_text(markdown(table, title), encoding="utf-8")
    create_table_artifact(table=table, key="benchmark",
                          description=title + ". Thesis figures (Table 4, PolicyBERT) for reference only: other "
                                              "splits and training data where a fallback is named.")
    return table


def model_rows(variants: list[str], b, kind: str, qv_layers: int, qv_gate_bias: float | None,
               qv_init: str = "rezero") -> list[tuple]:
    """``(variant, budget, row label)`` per model row: each variant as is, and on sequence tasks with
    ``qv_layers`` > 0 also with QV-attention (label ``<variant>+qv<N>``, SPEC §11)."""
    rows = [(v, b, v) for v in variants]
    if qv_layers and kind in ("seq", "pair"):
        qb = replace(b, qv_layers=qv_layers, qv_gate_bias=qv_gate_bias, qv_init=qv_init)
        rows += [(v, qb, f"{v}+qv{qv_layers}") for v in variants]
    return rows


def qv_versus_base(df, table: list[dict]) -> list[dict]:
    """Fill ``vs plain`` / ``> 2 std`` of every ``<model>+qvN`` row against its own ``<model>`` row on the same
    task (difference of means; "yes" when it exceeds 2 x sqrt(std_qv² + std_base²), sample std over seeds)."""
    import statistics

    for row in table:
        if "+qv" not in row["model"]:
            continue
        base = row["model"].split("+qv")[0]
        sel = df[(df["task"] == row["task"]) & (df["metric"] == row["metric"])]
        qv, ref = (list(sel[sel["model"] == m]["value"]) for m in (row["model"], base))
        if not ref:
            continue
        diff = statistics.mean(qv) - statistics.mean(ref)
        row["seeds"] = len(qv)  # the report counts seeds of the fusion rows only
        row["vs plain"] = f"{diff:+.4f} (vs {base})"
        row["> 2 std"] = ("n/a (1 seed)" if min(len(qv), len(ref)) < 2 else
                          "yes" if abs(diff) > 2 * (statistics.stdev(qv) ** 2 + statistics.stdev(ref) ** 2) ** 0.5
                          else "no")
    return table


def main(argv: list[str] | None = None) -> int:
    """CLI entry: validate (exit 2 with ``error: …``), run the flow, print the Markdown table."""
    from transformers.utils import logging as hf_logging

    from evaluation.benchmark_table import markdown

    args = cli_args(argv)
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    table = benchmark_flow(args.tasks, args.model, args.fusions, args.seeds, args.budget, args.out, args.data,
                           args.max_train, args.max_eval, args.vocab, args.device, args.baselines_only,
                           not args.no_word_add_above, args.qv_layers, args.qv_gate_bias, args.qv_init)
    print(markdown(table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
