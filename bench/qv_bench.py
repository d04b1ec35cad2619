"""QV-attention vs the plain body (SPEC §11) on the benchmark flow's sequence tasks, same budget, several seeds:
mean ± std side by side and whether the difference exceeds 2 std. No Prefect; each run is
:func:`model.benchmark.runner.finetune_task` with the ``plain`` row (chars only, BERT body) with and without
QV-attention on the last ``--qv-layers`` layers.

    OMP_NUM_THREADS=1 python bench/qv_bench.py --model CHAR_CKPT [--tasks sa,dc] [--seeds 3] [--steps 125]
        [--max-train 2000] [--max-eval 1000] [--max-len 64] [--layers 4] [--qv-layers 1]
        [--qv-init rezero|gate-bias] [--gate-bias B] [--gamma-scale 100]
        [--out runs.jsonl] [--e5 E5_DIR]
    python bench/qv_bench.py --table runs.jsonl          # the side-by-side table of earlier runs only

Defaults are the ``cpu-4layer`` budget of ``model.benchmark.runner.BUDGETS``. ``--out`` appends one JSON line
per run and a rerun skips the (task, variant, seed) already there. ``--e5 DIR`` (a converted e5-small,
``python -m model.e5 convert``) also prints the parameter overhead of QV on its last layer, with and without the
token embeddings. Each QV run also reports where its gate went after training, on the dev split: mean ``β``
and mean effective gate (the weight of ``V`` in ``g``: ``1 − γ(1 − β)`` under rezero, ``β`` under gate-bias).
QV runs are labelled ``qvN`` (gate-bias, as the first table) or ``qvN-rezero``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from model.benchmark.data import TASKS, load_task  # noqa: E402
from model.benchmark.runner import BUDGETS, Budget, finetune_task, load_finetuned  # noqa: E402
from model.features import WordMatcher  # noqa: E402


def parser() -> argparse.ArgumentParser:
    b = BUDGETS["cpu-4layer"]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None,
                    help="BERT checkpoint with a char vocab.txt (python -m model.backbones char-checkpoint)")
    ap.add_argument("--tasks", default="sa,dc", help="comma list of the sequence tasks dc, sa, spm")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=b.max_steps)
    ap.add_argument("--max-train", type=int, default=b.max_train)
    ap.add_argument("--max-eval", type=int, default=b.max_eval)
    ap.add_argument("--max-len", type=int, default=b.max_len)
    ap.add_argument("--layers", type=int, default=b.layers, help="char layers kept from the body")
    ap.add_argument("--lr", type=float, default=b.lr)
    ap.add_argument("--qv-layers", type=int, default=1)
    ap.add_argument("--qv-init", default="rezero", choices=["rezero", "gate-bias"])
    ap.add_argument("--gate-bias", type=float, default=None, help="initial gate bias (default: the init's own)")
    ap.add_argument("--gamma-scale", type=float, default=100.0,
                    help="rezero: learning-rate multiplier of gamma (gamma = scale x parameter; Adam)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (set OMP_NUM_THREADS too)")
    ap.add_argument("--data", default=None, help="benchmark sets root (default ../shared/benchmarks)")
    ap.add_argument("--out", default=None, help="append one JSON line per run; skip runs already there")
    ap.add_argument("--table", default=None, metavar="RUNS.jsonl", help="print the table of these runs and exit")
    ap.add_argument("--e5", default=None, help="converted e5-small dir: print QV's parameter overhead on it")
    return ap


def budget_of(args: argparse.Namespace, qv: bool) -> Budget:
    """cpu-4layer (the caps the QV runs used) with the command line's caps; QV on the last ``--qv-layers``
    layers when ``qv``."""
    b = BUDGETS["cpu-4layer"]
    same = (args.steps, args.max_train, args.max_eval, args.max_len, args.layers, args.lr) == (
        b.max_steps, b.max_train, b.max_eval, b.max_len, b.layers, b.lr)
    return replace(b, name="cpu-4layer" if same else "cpu-4layer, reduced", max_steps=args.steps,
                   max_train=args.max_train, max_eval=args.max_eval, max_len=args.max_len, layers=args.layers,
                   lr=args.lr,
                   qv_layers=args.qv_layers if qv else 0, qv_gate_bias=args.gate_bias, qv_init=args.qv_init,
                   qv_gamma_scale=args.gamma_scale)


def qv_label(args: argparse.Namespace) -> str:
    """The variant name of the QV runs: ``qvN`` (gate-bias init), ``qvN-rezero`` (γ lr x100) or
    ``qvN-rezero-x<scale>``."""
    if args.qv_init == "gate-bias":
        return f"qv{args.qv_layers}"
    return f"qv{args.qv_layers}-rezero" + ("" if args.gamma_scale == 100.0 else f"-x{args.gamma_scale:g}")


@torch.no_grad()
def mean_gate(model_dir: Path, splits, max_len: int) -> tuple[float, float]:
    """(mean ``β``, mean effective gate) over the heads of the QV layers and the first 64 dev texts of a saved
    QV model."""
    from model.benchmark.inputs import Collator, encode_split
    from model.features import CharEncoder
    from model.qv_attention import QVSelfAttention

    model = load_finetuned(model_dir)
    enc = CharEncoder.from_dir(model_dir)
    ex = encode_split(splits.dev.head(64), splits, enc, WordMatcher([]), max_len, 1, 0)
    batch = {k: v for k, v in Collator(False, 1, enc.pad)(ex).items() if k != "labels"}
    layers = [m for m in model.modules() if isinstance(m, QVSelfAttention)]
    seen: list[tuple] = []  # (hidden states, attention mask as the layer received them)
    handles = [m.register_forward_pre_hook(lambda mod, a, kw: seen.append((a[0], kw.get("attention_mask"))),
                                           with_kwargs=True) for m in layers]
    model(**batch)
    for h in handles:
        h.remove()
    betas = [m.gate(hs, mask).mean().item() for m, (hs, mask) in zip(layers, seen)]
    eff = [m.gate(hs, mask, effective=True).mean().item() for m, (hs, mask) in zip(layers, seen)]
    return sum(betas) / len(betas), sum(eff) / len(eff)


def run_one(task: str, qv: bool, seed: int, args: argparse.Namespace) -> dict:
    """One fine-tuning of the plain row (± QV) and its test figure, as a JSON-able dict."""
    splits = load_task(task, args.data)
    b = budget_of(args, qv)
    with tempfile.TemporaryDirectory() as tmp:
        r = finetune_task(splits, args.model, "plain", b, seed, WordMatcher([]), log=lambda m: None,
                          save_dir=Path(tmp) / "m" if qv else None)
        beta, eff = mean_gate(Path(tmp) / "m", splits, b.max_len) if qv else (None, None)
    return {"task": task, "variant": qv_label(args) if qv else "plain", "seed": seed,
            "metric": TASKS[task].metric, "value": r["scores"][TASKS[task].metric], "test": r["scores"],
            "seconds": round(r["seconds"], 1), "steps": r["steps"], "best_step": r["best_step"],
            "mean_beta_dev": beta, "mean_effective_gate_dev": eff, "budget": b.describe(),
            "threads": torch.get_num_threads(),
            "train_rows": r["train_rows"], "test_rows": r["test_rows"], "split": r["note"]}


def side_by_side(runs: list[dict]) -> str:
    """Markdown: per task the plain and QV mean ± std (sample std over seeds), the difference and whether it
    exceeds 2 x sqrt(std_plain² + std_qv²)."""
    lines = ["| task | metric | plain | QV | QV − plain | > 2 std | seeds | s / run (plain, QV) | mean β (dev) "
             "| mean effective gate (dev) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for task in dict.fromkeys(r["task"] for r in runs):
        mine = [r for r in runs if r["task"] == task]
        plain = [r for r in mine if r["variant"] == "plain"]
        qv = [r for r in mine if r["variant"] != "plain"]
        if not plain or not qv:
            continue
        (pm, ps), (qm, qs) = (_stats([r["value"] for r in rs]) for rs in (plain, qv))
        diff = qm - pm
        big = "n/a" if ps is None or qs is None else ("yes" if abs(diff) > 2 * (ps ** 2 + qs ** 2) ** 0.5 else "no")
        sec = "/".join(f"{statistics.mean(r['seconds'] for r in rs):.0f}" for rs in (plain, qv))
        betas, eff = ([r.get(k) if r.get(k) is not None else r.get("mean_beta_dev") for r in qv]
                      for k in ("mean_beta_dev", "mean_effective_gate_dev"))
        lines.append(f"| {task} | {mine[0]['metric']} | {_fmt(pm, ps)} | {_fmt(qm, qs)} | {diff:+.4f} | {big} | "
                     f"{min(len(plain), len(qv))} | {sec} | {_mean(betas):.6f} | {_mean(eff):.6f} |")
    budgets = list(dict.fromkeys(r["budget"] for r in runs))
    return "\n".join(lines + ["", "Budgets: " + " | ".join(budgets) + f"; threads {runs[0]['threads']}"]) + "\n"


def _mean(values: list) -> float:
    values = [v for v in values if v is not None]
    return statistics.mean(values) if values else float("nan")


def _stats(values: list[float]) -> tuple[float, float | None]:
    return statistics.mean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _fmt(mean: float, std: float | None) -> str:
    return f"{mean:.4f}" + (f" ± {std:.4f}" if std is not None else "")


def overhead(e5_dir: str, qv_layers: int) -> dict:
    """QV's parameter count on e5-small (all its layers, QV on the last ``qv_layers``), built on the meta device."""
    from transformers import BertConfig, BertModel

    from model.qv_attention import apply_qv, qv_parameter_count

    with torch.device("meta"):
        m = BertModel(BertConfig.from_pretrained(e5_dir), add_pooling_layer=False)
        apply_qv(m, qv_layers)
    return qv_parameter_count(m)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.table:
        runs = [json.loads(x) for x in Path(args.table).read_text(encoding="utf-8").splitlines() if x.strip()]
        print(side_by_side(runs))
        return 0
    if args.e5:
        print(json.dumps({"e5_overhead": overhead(args.e5, args.qv_layers)}), flush=True)
    if not args.model:
        return 0 if args.e5 else _fail("--model DIR is required (a BERT checkpoint with a char vocab.txt)")
    tasks = [t for t in args.tasks.split(",") if t]
    if any(TASKS.get(t) is None or TASKS[t].kind not in ("seq", "pair") for t in tasks):
        return _fail(f"--tasks {args.tasks}: QV-attention runs on the sequence tasks dc, sa, spm")
    torch.set_num_threads(args.threads)
    done = _done(args.out)
    runs = [r for r in done.values() if r["task"] in tasks]
    t0 = time.perf_counter()
    for task in tasks:
        for seed in range(13, 13 + args.seeds):
            for qv in (False, True):
                key = (task, qv_label(args) if qv else "plain", seed)
                if key in done:
                    continue
                runs.append(run_one(task, qv, seed, args))
                _emit(runs[-1], args.out)
    print(side_by_side(runs))
    print(f"total {time.perf_counter() - t0:.0f} s wall")
    return 0


def _done(out: str | None) -> dict:
    if not out or not Path(out).is_file():
        return {}
    runs = [json.loads(x) for x in Path(out).read_text(encoding="utf-8").splitlines() if x.strip()]
    return {(r["task"], r["variant"], r["seed"]): r for r in runs}


def _emit(run: dict, out: str | None) -> None:
    text = json.dumps(run, ensure_ascii=False)
    print(text, flush=True)
    if out:
        with open(out, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


def _fail(msg: str) -> int:
    print(f"error: {msg}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
