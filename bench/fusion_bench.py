"""PolicySM-1 at equal budget: plain multilingual-e5-small fine-tuned vs PolicyBERT on the same body reading its
own pieces with identity-initialised fusion (SPEC §6, "On a pretrained body", "Tokens of a SentencePiece body").

    OMP_NUM_THREADS=1 python bench/fusion_bench.py --dataset DIR/policysm1 --e5 DIR/models/e5 \\
        --word-vocab DIR/models/pretrain/word_vocab.txt [--models plain,gate,attn] [--layers 4] [--steps 150]

Every model: the body's first ``--layers`` layers, token embeddings frozen (250k pieces: their AdamW state alone
would be 0.8 GB), the same train rows, steps, batch, lr, seed and max length (pieces); PolicyBERT adds one word
layer (started from char layer 0, word rows from the mean of their pieces, as ``model.benchmark.runner``),
``fusion_init="identity"``. Best-by-dev (dev every steps/3), then test; printed beside the majority and
overlap-LR baselines (:mod:`model.baselines`) fitted on the same train rows. ``--threads`` (default 1); writes ``--out`` (JSON).
``--precision bf16`` runs bf16 autocast on CPU too (the ``cpu-small`` profile's fine-tuning: 0.72 s against 1.60 s
a step of 32 pairs on 2 cores).

On a lent GPU: ``--device cuda`` (bf16 autocast, :func:`model.training.autocast`), ``--train-rows 0`` (the whole
train split), ``--steps 0 --epochs N`` (the epochs decide); each run then also reports train tokens/s (non-pad
tokens of the train examples times epochs run, over the training seconds, dev evaluations included) and peak
GPU memory (GiB, ``torch.cuda.max_memory_allocated``).

``--table RUN.json [...]`` renders runs (one file per seed or per model, or one file holding a dict of runs) through :mod:`evaluation.report`: test
accuracy and F1 as mean ± std over seeds, each fusion's difference to plain and whether it exceeds 2 std, beside
the baselines of the same rows (``--out`` a folder: ``runs.jsonl`` + ``report.md``); no training.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build(kind: str, e5: str, layers: int, matcher, stream, max_words: int):
    """The classifier of ``kind`` (``plain`` | ``none`` | ``gate`` | ``attn``) on the e5 body, token
    embeddings frozen."""
    from transformers import BertForSequenceClassification

    from model.backbones import config_from_backbones, init_from_backbones
    from model.backbones import init_word_encoder
    from model.modeling import PolicyBertForSequenceClassification

    if kind == "plain":
        m = BertForSequenceClassification.from_pretrained(e5, num_hidden_layers=layers, num_labels=2)
    else:
        cfg = config_from_backbones(e5, fusion=kind, num_hidden_layers=layers, num_word_layers=1, num_labels=2,
                                    word_vocab_size=matcher.size, max_words=max_words)
        m = PolicyBertForSequenceClassification(cfg)
        init_from_backbones(m, e5)
        init_word_encoder(m, stream, matcher)
    m.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    return m


def run(kind: str, args, data: dict, stream, matcher) -> dict:
    """Fine-tune one model and score dev/test (accuracy, F1) with its best-by-dev weights."""
    from model.stages import BatchCollator
    from model.training import TrainConfig, evaluate_classifier, train

    torch.manual_seed(args.seed)
    model = build(kind, args.e5, args.layers, matcher, stream, args.max_words)
    fn = BatchCollator(kind != "plain", args.max_words, stream.pad)
    steps = args.steps or args.epochs * -(-len(data["train"]) // args.batch)
    cfg = TrainConfig(max_steps=args.steps or None, epochs=args.epochs, batch_size=args.batch, eval_batch_size=64,
                      lr=args.lr, seed=args.seed, device=args.device, log_every=max(1, steps // 5), save_every=0,
                      eval_every=args.eval_every or max(1, steps // 3), precision=args.precision)
    from model.training import resolve_device

    cuda = resolve_device(args.device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    out = train(model, data["train"], fn, cfg, print,
                evaluate=lambda m: evaluate_classifier(m, data["dev"], fn, cfg), best_metric="accuracy")
    train_s = time.perf_counter() - t0
    tokens = sum(len(e["input_ids"]) for e in data["train"]) * out["steps"] * args.batch / max(1, len(data["train"]))
    return {"model": kind, "best_step": out["best"]["step"] if out["best"] else None, "steps": out["steps"],
            "dev": evaluate_classifier(model, data["dev"], fn, cfg),
            "test": evaluate_classifier(model, data["test"], fn, cfg), "seconds": time.perf_counter() - t0,
            "train_tokens_per_s": tokens / train_s,
            "peak_gib": torch.cuda.max_memory_allocated() / 2 ** 30 if cuda else None}


def report_rows(files: list[str]) -> list[dict]:
    """Long rows (:func:`evaluation.report.long_rows`, set ``policysm1``) of run files: each model's test
    accuracy and F1 per seed, and each file's baselines (overlap LR, majority) once per seed."""
    from evaluation.report import long_rows

    rows, baselines_seen = [], set()
    loaded = [json.loads(Path(f).read_text(encoding="utf-8")) for f in files]
    runs = [d for x in loaded for d in ([x] if "budget" in x else x.values())]  # one run, or a dict of runs
    for d in runs:
        b = d["budget"]
        extra = {"train_rows": b.get("train_rows"), "test_rows": d["runs"][0]["test"].get("examples", 0) if d["runs"]
                 else 0, "split": f"{b.get('steps') or str(b.get('epochs')) + ' epoch(s)'} x {b.get('batch')}, "
                                  f"{b.get('layers')} layers, {b.get('device', 'cpu')}"}
        for r in d["runs"]:
            rows += long_rows("policysm1", r["model"], b["seed"], {k: r["test"][k] for k in ("accuracy", "f1")},
                              seconds=r["seconds"], **extra)
        if b["seed"] not in baselines_seen:
            baselines_seen.add(b["seed"])
            for name, key in (("overlap-lr", "overlap_lr"), ("majority", "majority")):
                t = d["baselines"][key]["test"]
                rows += long_rows("policysm1", name, b["seed"], {k: t[k] for k in ("accuracy", "f1")}, **extra)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--table", nargs="+", default=None, metavar="RUN.json", help="render these runs; no training")
    ap.add_argument("--dataset", help="PolicySM-1 table folder (split=train/dev/test)")
    ap.add_argument("--e5", help="converted e5 checkpoint (python -m model.e5 convert)")
    ap.add_argument("--word-vocab", help="word vocabulary, one word a line")
    ap.add_argument("--models", default="plain,gate,attn")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-len", type=int, default=64)
    ap.add_argument("--max-words", type=int, default=24)
    ap.add_argument("--eval", type=int, default=500, help="dev/test rows (seeded samples; 0 = all)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--out", default="fusion_bench.json")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu", help="cpu, cuda (bf16 autocast) or auto")
    ap.add_argument("--epochs", type=int, default=1, help="passes over the train rows (with --steps 0)")
    ap.add_argument("--precision", default="auto", help="auto (bf16 on CUDA), bf16 (also on CPU) or fp32")
    ap.add_argument("--eval-every", type=int, default=0, help="steps between dev evaluations (0: a third of the run)")
    ap.add_argument("--train-rows", type=int, default=None,
                    help="train rows drawn (default steps x batch; 0 = the whole split)")
    args = ap.parse_args(argv)
    if args.table:
        from evaluation.report import markdown, summary, write_report

        rows = report_rows(args.table)
        if args.out.endswith(".json"):
            import pandas as pd

            print(markdown(summary(pd.DataFrame(rows)), "PolicySM-1, test"))
        else:
            print(write_report(rows, args.out, "PolicySM-1, test")["report"].read_text(encoding="utf-8"))
        return 0
    if not (args.dataset and args.e5 and args.word_vocab):
        ap.error("--dataset, --e5 and --word-vocab are needed to train (or --table to render runs)")
    torch.set_num_threads(args.threads)

    from model.baselines import pair_baselines
    from model.features import WordMatcher
    from model.stages import encode_pairs, read_split
    from model.tokens import load_stream

    stream, matcher = load_stream(args.e5), WordMatcher.from_file(args.word_vocab)
    if args.train_rows is None:
        args.train_rows = args.steps * args.batch  # --steps 0 (the epochs decide) with no --train-rows: 0 = all
    n_train = args.train_rows or None
    split = {"train": read_split(args.dataset, "train", n_train, args.seed),
             **{s: read_split(args.dataset, s, args.eval or None, args.seed) for s in ("dev", "test")}}
    data = {s: encode_pairs(df, stream, matcher, args.max_len, args.max_words, args.seed) for s, df in split.items()}
    baselines = pair_baselines(split)
    budget = {k: getattr(args, k) for k in ("layers", "steps", "epochs", "batch", "lr", "max_len", "max_words", "eval",
                                            "seed", "device", "precision")}
    budget.update(threads=args.threads, frozen="token embeddings", tokens="e5 pieces", train_rows=len(split["train"]))
    rows = []
    for k in args.models.split(","):  # the file after every model: a long run leaves what it finished
        rows.append(run(k, args, data, stream, matcher))
        tmp = Path(f"{args.out}.tmp")
        tmp.write_text(json.dumps({"budget": budget, "baselines": baselines, "runs": rows}, indent=1, default=str),
                       encoding="utf-8")
        tmp.replace(args.out)
    print(json.dumps(budget))
    print(f"{'model':10} {'dev acc':>8} {'test acc':>8} {'test F1':>8}  s")
    for r in rows:
        print(f"{r['model']:10} {r['dev']['accuracy']:8.3f} {r['test']['accuracy']:8.3f} {r['test']['f1']:8.3f}  "
              f"{r['seconds']:.0f}")
    print(json.dumps(baselines, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
