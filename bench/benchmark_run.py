"""Public benchmarks without Prefect (SPEC §10): fine-tune and test each variant on each task with
:func:`model.benchmark.runner.finetune_task`, one JSON line per run, for machines where the orchestrator is not
installed (a lent GPU). ``flows.benchmark`` is the full command (baselines, table, artifact).

    python bench/benchmark_run.py --tasks sa,spm --model DIR --variants plain,gate [--budget gpu-base]
        [--seeds 1] [--data ../shared/benchmarks] [--vocab data/vocab/vocab.txt] [--out runs.jsonl]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from model.benchmark.data import load_task  # noqa: E402
from model.benchmark.runner import BUDGETS, finetune_task  # noqa: E402
from model.features import WordMatcher  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", required=True, help="comma list of cws, pos, ner, dc, sa, spm")
    ap.add_argument("--model", required=True, help="BERT or PolicyBERT checkpoint dir with a char vocab.txt")
    ap.add_argument("--variants", default="plain,gate", help="comma list of plain, none, gate, attn")
    ap.add_argument("--budget", default="gpu-base", choices=sorted(BUDGETS))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--data", default=None, help="benchmark sets root (default ../shared/benchmarks)")
    ap.add_argument("--vocab", required=True, help="word vocabulary file (vocab.txt)")
    ap.add_argument("--out", default=None, help="append one JSON line per run here too")
    args = ap.parse_args(argv)
    matcher = WordMatcher.from_file(args.vocab)
    for task in args.tasks.split(","):
        splits = load_task(task, args.data)
        for variant in args.variants.split(","):
            for seed in range(13, 13 + args.seeds):
                r = finetune_task(splits, args.model, variant, BUDGETS[args.budget], seed, matcher,
                                  log=lambda m: None)
                line = json.dumps({"task": task, "variant": variant, "seed": seed, "test": r["scores"],
                                   "seconds": round(r["seconds"], 1), "steps": r["steps"], "device": r["device"],
                                   "train_rows": r["train_rows"], "test_rows": r["test_rows"]}, ensure_ascii=False)
                print(line, flush=True)
                if args.out:
                    with open(args.out, "a", encoding="utf-8") as fh:
                        fh.write(line + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
