"""The neural span reader's few-shot curve (SPEC §9; Ram et al. 2021, "Few-Shot Question Answering by
Pretraining Span Selection"): NCPQA training questions 32 / 128 / all, each fine-tuned from the e5 body with and
without recurring-span pretraining first, side by side in one run, beside BM25's best sentence and the first
sentence of the gold document.

Same split, budget and evaluation as ``flows.train_reader`` (the gold document given, the held-out documents'
questions): the recurring-span pretraining runs once and every "with" row starts from a copy of it, so the rows
differ only in what the question says. One seed per run; the table says so.

    OMP_NUM_THREADS=2 .venv/bin/python bench/reader_few_shot.py --init data/models/e5 --threads 2 \\
        [--sizes 32,128,0] [--steps 120] [--layers 4] [--eval-n 80] [--out res.json]
"""
from __future__ import annotations

import argparse
import copy
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run(args) -> dict:
    """Every row of the curve (module doc) as ``{row: {"eval": ..., "train_seconds": ...}}``, plus the budget."""
    import torch

    from flows.train_reader import evaluate, init_reader, load_ncpqa, ncpqa_examples, split_docs, train_steps
    from model.span_pretrain import recurring_examples
    from model.span_reader import train_features

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    qs, docs = load_ncpqa()
    held = split_docs(docs, args.seed)
    base = init_reader(Path(args.init), args.layers, args.max_len, True)
    tok = base.tokenizer
    out = {"budget": {k: v for k, v in vars(args).items() if k != "out"}, "rows": {}}
    t0 = time.time()
    rec = recurring_examples([t for d, t in sorted(docs.items()) if d not in held], seed=args.seed)
    pre = copy.deepcopy(base)
    losses = train_steps(pre, train_features(tok, rec, args.max_len, 64, rng=random.Random(args.seed)),
                         args.steps, args.batch, args.lr, args.seed, "cpu")
    out["recurring"] = {"examples": len(rec), "seconds": round(time.time() - t0, 1),
                        "loss_first10": round(sum(losses[:10]) / 10, 3), "loss_last10": round(sum(losses[-10:]) / 10, 3)}
    print("recurring", out["recurring"], flush=True)
    for n in args.sizes:
        ex = ncpqa_examples(qs, docs, held, n, random.Random(args.seed))
        feats = train_features(tok, ex, args.max_len, 64, rng=random.Random(args.seed))
        for start, model in (("with recurring", pre), ("without", base)):
            m = copy.deepcopy(model)
            m.tokenizer = tok
            torch.manual_seed(args.seed)
            t = time.time()
            losses = train_steps(m, feats, args.steps, args.batch, args.lr, args.seed, "cpu")
            row = {"questions": len(ex), "windows": len(feats), "train_seconds": round(time.time() - t, 1),
                   "loss_last10": round(sum(losses[-10:]) / 10, 3),
                   "eval": evaluate(m, qs, docs, held, args.eval_n)}
            out["rows"][f"{len(ex)} questions, {start}"] = row
            print(len(ex), start, json.dumps(row, ensure_ascii=False), flush=True)
    return out


def table(res: dict) -> str:
    """The curve as a Markdown table: reader rows, then the two baselines (same questions for every row)."""
    lines = ["| NCPQA training questions, start | hit@1 | char-F1 | EM | train s |", "|---|---|---|---|---|"]
    ev = None
    for name, row in res["rows"].items():
        ev = row["eval"]
        r = ev["reader"]
        lines.append(f"| {name} | {r['hit@1']:.3f} | {r['f1']:.3f} | {r['em']:.3f} | {row['train_seconds']:.0f} |")
    for base in ("bm25-sentence", "first-sentence"):
        if ev:
            b = ev[base]
            lines.append(f"| baseline: {base} | {b['hit@1']:.3f} | {b['f1']:.3f} | {b['em']:.3f} | — |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--init", required=True, help="converted e5 checkpoint folder")
    p.add_argument("--sizes", default="32,128,0", help="NCPQA training questions per row (0: all)")
    p.add_argument("--steps", type=int, default=120, help="optimiser steps per phase (recurring, NCPQA)")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--max-len", type=int, default=192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--eval-n", type=int, default=80)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",")]
    res = run(args)
    print(table(res))
    if args.out:
        Path(args.out).write_text(json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
