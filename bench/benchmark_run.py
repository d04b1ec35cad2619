"""Public benchmarks without Prefect (SPEC §10): fine-tune and test each variant on each task with
:func:`model.benchmark.runner.finetune_task`, one JSON line per run, for machines where the orchestrator is not
installed (a lent GPU). ``flows.benchmark`` is the full command (baselines, table, artifact).

    python bench/benchmark_run.py --tasks sa,spm --model DIR --variants plain,gate [--budget gpu-base]
        [--seeds 1] [--epochs N] [--device cuda] [--no-word-add-above] [--jobs N [--threads N]]
        [--data ../shared/benchmarks]
        (--vocab data/vocab/vocab.txt | --vocab-dir DIR) [--out runs.jsonl]

``--vocab-dir DIR`` reads ``DIR/<task>.txt`` per task (e.g. written by ``--save-vocab DIR``: each task's train
split segmented as ``flows.benchmark`` does, so a machine without the segmenter gets the same words).
``--jobs N`` runs N (task, variant, seed) fine-tunings at once as separate processes, each with
``cpus // N`` threads: a small model leaves one GPU mostly idle, so runs side by side finish sooner (the
``seconds`` of each run are then wall time under contention).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from model.benchmark.data import TASKS, cap, load_task  # noqa: E402
from model.benchmark.runner import BUDGETS, VARIANTS, finetune_task  # noqa: E402
from model.features import WordMatcher  # noqa: E402


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", default="cws,pos,ner,dc,sa,spm", help="comma list of cws, pos, ner, dc, sa, spm")
    ap.add_argument("--model", default=None, help="BERT or PolicyBERT checkpoint dir with a char vocab.txt")
    ap.add_argument("--variants", default="plain,gate", help="comma list of plain, none, gate, attn")
    ap.add_argument("--budget", default="gpu-base", choices=sorted(BUDGETS))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=13)
    ap.add_argument("--epochs", type=int, default=None, help="override the budget's epochs")
    ap.add_argument("--jobs", type=int, default=1, help="fine-tunings run at once (separate processes)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads per job (default cpus // jobs)")
    ap.add_argument("--device", default=None, help="override the budget's device (cpu, cuda, auto)")
    ap.add_argument("--no-word-add-above", action="store_true",
                    help="PolicyBERT fuses words in its word layers only (config word_add_above=False)")
    ap.add_argument("--data", default=None, help="benchmark sets root (default ../shared/benchmarks)")
    ap.add_argument("--vocab", default=None, help="word vocabulary file (vocab.txt) for every task")
    ap.add_argument("--vocab-dir", default=None, help="per-task word vocabularies DIR/<task>.txt")
    ap.add_argument("--save-vocab", default=None, help="write each task's train-split vocabulary to DIR/<task>.txt "
                                                       "(HanLP dictionary segmenter) and exit")
    ap.add_argument("--out", default=None, help="append one JSON line per run here too")
    ap.add_argument("--table", nargs="+", default=None, metavar="RUNS.jsonl",
                    help="render the Markdown table of these runs' lines beside the non-neural baselines on the same "
                         "(capped) splits, to --out if given (no fine-tuning)")
    return ap


def table_from_runs(paths: list[str], budget_name: str, data: str | None) -> str:
    """The :mod:`evaluation.benchmark_table` table of JSON-line runs (this script's output) beside the baselines of
    each task, computed here on the splits the runs used (the budget's caps).

    The title names the first run's budget; a task whose runs used another (e.g. fewer epochs) says so in its
    split note.

    Raises:
        ValueError: a line is not one of this script's runs.
    """
    import pandas as pd

    from model.benchmark.baselines import run_baselines
    from evaluation.benchmark_table import long_rows, markdown, summary

    runs = [json.loads(line) for p in paths for line in Path(p).read_text(encoding="utf-8").splitlines() if line]
    if not runs or any(not {"task", "variant", "seed", "test", "budget", "seconds", "train_rows", "test_rows"} <= set(r) for r in runs):
        raise ValueError(f"{paths}: not runs of bench/benchmark_run.py")
    budgets = list(dict.fromkeys(r["budget"] for r in runs))
    b = BUDGETS[budget_name]
    rows: list[dict] = []
    for task in dict.fromkeys(r["task"] for r in runs):
        splits = cap(load_task(task, data), b.max_train, b.max_eval)
        own = list(dict.fromkeys(r["budget"] for r in runs if r["task"] == task))
        note = splits.note + ("" if own == budgets[:1] else "; runs at " + " | ".join(own))
        extra = {"train_rows": len(splits.train), "test_rows": len(splits.test), "split": note}
        for r in run_baselines(splits):
            rows += long_rows(task, r["model"], None, r["scores"], seconds=r["seconds"], **extra)
        for r in (r for r in runs if r["task"] == task):
            rows += long_rows(task, r["variant"], r["seed"], r["test"], seconds=r["seconds"],
                              **dict(extra, train_rows=r["train_rows"], test_rows=r["test_rows"]))
    return markdown(summary(pd.DataFrame(rows)), f"Public benchmarks, {budgets[0]}")


def save_vocabs(tasks: list[str], data: str | None, out: str) -> None:
    """Each task's word vocabulary as :func:`model.benchmark.inputs.word_matcher` builds it from the train split."""
    from model.benchmark.inputs import word_matcher

    Path(out).mkdir(parents=True, exist_ok=True)
    for task in tasks:
        matcher, source = word_matcher(load_task(task, data))
        words = sorted(matcher.word_to_id, key=matcher.word_to_id.get)
        (Path(out) / f"{task}.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
        print(f"{task}: {source}", flush=True)


def matcher_for(task: str, args: argparse.Namespace) -> WordMatcher:
    """The task's word matcher: ``--vocab-dir``'s ``<task>.txt`` or ``--vocab``.

    Raises:
        SystemExit: neither names a file for the task.
    """
    path = Path(args.vocab_dir) / f"{task}.txt" if args.vocab_dir else args.vocab
    if not path or not Path(path).is_file():
        raise SystemExit(f"error: no word vocabulary for {task} (--vocab FILE or --vocab-dir DIR/{task}.txt)")
    return WordMatcher.from_file(path)


def run_one(task: str, variant: str, seed: int, args: argparse.Namespace) -> dict:
    """One fine-tuning and test: the JSON line's fields."""
    b = BUDGETS[args.budget]
    budget = replace(b, epochs=args.epochs or b.epochs, device=args.device or b.device,
                     word_add_above=b.word_add_above and not args.no_word_add_above)
    r = finetune_task(load_task(task, args.data), args.model, variant, budget, seed, matcher_for(task, args),
                      log=lambda m: None)
    return {"task": task, "variant": variant, "seed": seed, "test": r["scores"], "dev": r["dev"],
            "seconds": round(r["seconds"], 1), "steps": r["steps"], "best_step": r["best_step"],
            "device": r["device"], "train_rows": r["train_rows"], "test_rows": r["test_rows"],
            "budget": budget.describe(), "split": r["note"]}


def emit(line: dict, out: str | None) -> None:
    text = json.dumps(line, ensure_ascii=False, default=str)
    print(text, flush=True)
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


def run_parallel(jobs: list[tuple[str, str, int]], args: argparse.Namespace, argv: list[str]) -> int:
    """Run each (task, variant, seed) as a child process of this script, at most ``args.jobs`` at once."""
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.jobs)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    pending, running, failed = list(jobs), [], 0
    while pending or running:
        while pending and len(running) < args.jobs:
            task, variant, seed = pending.pop(0)
            cmd = [sys.executable, __file__, *argv, "--tasks", task, "--variants", variant, "--seeds", "1",
                   "--first-seed", str(seed), "--jobs", "1"]
            running.append(((task, variant, seed), subprocess.Popen(cmd, env=env)))
        time.sleep(1)
        for item in list(running):
            if item[1].poll() is not None:
                running.remove(item)
                if item[1].returncode:
                    failed += 1
                    print(f"failed: {item[0]} exit {item[1].returncode}", file=sys.stderr, flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(argv)
    if args.table:
        text = table_from_runs(args.table, args.budget, args.data)
        print(text)
        if args.out:
            from storage.atomic import atomic_path

            with atomic_path(args.out) as tmp:
                Path(tmp).write_text(text, encoding="utf-8")
        return 0
    tasks = args.tasks.split(",")
    bad = [t for t in tasks if t not in TASKS] + [v for v in args.variants.split(",") if v not in VARIANTS]
    if bad or args.jobs < 1 or args.seeds < 1:
        raise SystemExit(f"error: unknown task/variant {bad} (tasks {', '.join(TASKS)}; variants "
                         f"{', '.join(VARIANTS)}), or --jobs/--seeds below 1")
    if args.save_vocab:
        save_vocabs(tasks, args.data, args.save_vocab)
        return 0
    if not args.model:
        raise SystemExit("error: --model DIR is needed")
    jobs = [(t, v, s) for t in tasks for v in args.variants.split(",")
            for s in range(args.first_seed, args.first_seed + args.seeds)]
    if args.jobs > 1 and len(jobs) > 1:
        # children get the same flags with one (task, variant, seed) each; later flags win in argparse
        return run_parallel(jobs, args, argv)
    for task, variant, seed in jobs:
        emit(run_one(task, variant, seed, args), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
