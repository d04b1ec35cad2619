"""Learning curves of PolicyBERT pretraining and PolicySM fine-tuning on a data dir the main job built
(``--profile cpu-scratch``: its char tokenizer; a ``cpu-small`` data dir holds e5's 250k pieces instead).

    python bench/learning_curves.py --data-dir data --out /tmp/curves [--run NAME:key=value,...]...

Each ``--run`` is one configuration (pretraining steps and lr, fine-tuning steps and lr, model size,
fusion, masking epochs, ``pretrain=0`` to fine-tune from scratch); every run pretrains (held-out MLM
and NSP every ``eval_every`` steps) and fine-tunes on PolicySM-1 (dev accuracy every ``eval_every``
steps), with the same seed. Prints one line per curve point and a closing table beside the pipeline's
non-neural baselines (majority, char-overlap logistic regression), writes ``curves.json`` and
``curves.png`` under ``--out``. Runs on CUDA when present.
"""
from __future__ import annotations

import argparse
import json
import shutil
import time
from dataclasses import replace
from pathlib import Path

from model.baselines import pair_baselines
from model.pretrain_data import PretrainDataConfig
from model.stages import finetune_stage, pretrain_data_stage, pretrain_stage
from model.training import TrainConfig
from storage import layout as L
from storage import read_table

DEFAULT = dict(pretrain=1000, pretrain_lr=5e-4, finetune=600, finetune_lr=2e-4, batch=32, hidden=128, layers=2,
               heads=2, inter=256, word_layers=1, fusion="gate", mask_epochs=1, max_len=128, eval_every=200, warmup=0.1, seed=13)


def parse_run(spec: str) -> tuple[str, dict]:
    """``NAME:key=value,...`` -> (name, settings over :data:`DEFAULT`). Raises ValueError on unknown keys."""
    name, _, rest = spec.partition(":")
    out = dict(DEFAULT)
    for kv in filter(None, rest.split(",")):
        k, v = kv.split("=")
        if k not in DEFAULT:
            raise ValueError(f"unknown setting {k!r} (known: {', '.join(DEFAULT)})")
        out[k] = type(DEFAULT[k])(v) if not isinstance(DEFAULT[k], float) else float(v)
    return name, out


def _split_of(data: Path) -> dict[str, str]:
    docs = read_table(data / L.PRETRAIN / "epoch=0")[["doc_id", "split"]].drop_duplicates("doc_id")
    return dict(zip(docs["doc_id"], docs["split"]))


def run_one(data: Path, work: Path, s: dict, log) -> dict:
    """Pretrain (unless ``pretrain == 0``) and fine-tune one configuration; returns both metrics."""
    root = data / L.PRETRAIN
    if s["mask_epochs"] > 1 or s["max_len"] != 128:  # pretraining data the data dir lacks: built beside it
        root = work / "pretrain-data"
        if not (root / f"epoch={s['mask_epochs'] - 1}").is_dir():
            pretrain_data_stage(data / L.SENTENCES, data / L.SEGMENTS, data / L.VOCAB, data / L.TOKENIZER,
                                _split_of(data), root, PretrainDataConfig(max_len=s["max_len"]), s["mask_epochs"])
    size = dict(hidden_size=s["hidden"], num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                intermediate_size=s["inter"], max_position_embeddings=128, fusion=s["fusion"],
                num_word_layers=s["word_layers"], max_words=40)
    pre_cfg = TrainConfig(max_steps=max(s["pretrain"], 1), batch_size=s["batch"], lr=s["pretrain_lr"],
                          warmup_ratio=s["warmup"], eval_every=s["eval_every"], save_every=0, seed=s["seed"],
                          log_every=s["eval_every"])
    import torch

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    pre = pretrain_stage(root, data / L.TOKENIZER, data / L.VOCAB, work / "pretrain", size,
                         pre_cfg if s["pretrain"] else replace(pre_cfg, max_steps=1, lr=0.0), s["mask_epochs"],
                         log_fn=log)
    t1 = time.perf_counter()
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    fin_cfg = TrainConfig(max_steps=s["finetune"], batch_size=s["batch"], lr=s["finetune_lr"], warmup_ratio=s["warmup"],
                          eval_every=s["eval_every"], save_every=0, seed=s["seed"], log_every=s["eval_every"])
    fin = finetune_stage(work / "pretrain", data / L.POLICYSM1, work / "finetune", fin_cfg, log_fn=log)
    return {"settings": s, "pretrain_seconds": t1 - t0, "finetune_seconds": time.perf_counter() - t1,
            "pretrain_curve": pre["train"]["curve"], "heldout": pre["heldout"], "finetune_curve": fin["train"]["curve"],
            "best_step": fin["best_step"], "dev": fin["dev"], "test": fin["test"], "device": pre["train"]["device"],
            "pretrain_tokens_per_s": pre["train"]["tokens_per_s"],
            "pretrain_step_ms": 1000 * pre["train"]["seconds"] / max(pre["train"]["steps"], 1),
            "finetune_step_ms": 1000 * fin["train"]["seconds"] / max(fin["train"]["steps"], 1),
            "pretrain_peak_gpu_gib": peak}


def plot(results: dict, baselines: dict, path: Path) -> None:
    """Held-out MLM accuracy / NSP accuracy vs pretraining step, dev accuracy vs fine-tuning step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for name, r in results.items():
        pc, fc = r["pretrain_curve"], r["finetune_curve"]
        if r["settings"]["pretrain"]:
            ax[0].plot([p["step"] for p in pc], [p["mlm_accuracy"] for p in pc], marker="o", label=name)
            ax[1].plot([p["step"] for p in pc], [p["nsp_accuracy"] for p in pc], marker="o", label=name)
        ax[2].plot([p["step"] for p in fc], [p["accuracy"] for p in fc], marker="o", label=name)
    ax[2].axhline(baselines["overlap_lr"]["dev"]["accuracy"], ls="--", c="k", label="overlap LR")
    ax[2].axhline(baselines["majority"]["dev"]["accuracy"], ls=":", c="grey", label="majority")
    for a, t in zip(ax, ("held-out MLM accuracy", "held-out NSP accuracy", "PolicySM-1 dev accuracy")):
        a.set_title(t)
        a.set_xlabel("step")
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--out", default="/tmp/curves")
    ap.add_argument("--run", action="append", default=[], help="NAME:key=value,... (see DEFAULT)")
    args = ap.parse_args()
    data, out = Path(args.data_dir), Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = dict(parse_run(r) for r in (args.run or ["cpu-scratch:"]))
    splits = {s: read_table(data / L.POLICYSM1, partition={"split": s}) for s in ("train", "dev", "test")}
    base = pair_baselines(splits)
    results = {}
    for name, s in runs.items():
        work = out / name
        log = lambda m, n=name: print(f"[{n}] {m}", flush=True)  # noqa: E731
        results[name] = run_one(data, work, s, log)
        shutil.rmtree(work / "pretrain", ignore_errors=True)
        shutil.rmtree(work / "finetune", ignore_errors=True)
        (out / "curves.json").write_text(json.dumps({"baselines": base, "runs": results}, indent=1, default=str))
    plot(results, base, out / "curves.png")
    print(f"\n{'run':<22}{'pre s':>7}{'fin s':>7}{'MLM acc':>9}{'NSP acc':>9}{'best step':>10}{'dev acc':>9}{'test acc':>9}")
    for name, r in results.items():
        h = r["heldout"] or {}
        print(f"{name:<22}{r['pretrain_seconds']:>7.0f}{r['finetune_seconds']:>7.0f}{h.get('mlm_accuracy', 0):>9.3f}"
              f"{h.get('nsp_accuracy', 0):>9.3f}{r['best_step'] or 0:>10}{r['dev']['accuracy']:>9.3f}"
              f"{r['test']['accuracy']:>9.3f}")
    for b in ("majority", "overlap_lr"):
        print(f"{b:<22}{'':>7}{'':>7}{'':>9}{'':>9}{'':>10}{base[b]['dev']['accuracy']:>9.3f}{base[b]['test']['accuracy']:>9.3f}")


if __name__ == "__main__":
    main()
