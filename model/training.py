"""Training and evaluation loops for PolicyBERT pretraining (MLM + NSP) and fine-tuning (SPEC §6).

Device ``auto`` picks CUDA (bf16 autocast) when present, else CPU. AdamW with linear warmup/decay
(transformers), gradient accumulation, gradient clipping, seeded data order per epoch. With a
``state_dir`` the loop saves a training checkpoint (model, optimiser, scheduler, RNG states, data
position) every ``save_every`` optimiser steps, atomically, and a restarted run resumes from it and
ends with the same weights as an uninterrupted run with the same seed. Several GPUs: start the same
code under ``accelerate launch`` (or ``torchrun``); the loop runs DDP through ``accelerate``.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence, Union

import numpy as np
import torch
from transformers import get_linear_schedule_with_warmup

from storage.atomic import atomic_path

Log = Callable[[str], None]
Examples = Union[Sequence[dict], Callable[[int], Sequence[dict]]]
STATE = "trainer_state"


@dataclass(frozen=True)
class TrainConfig:
    """epochs: passes over the data; max_steps: optimiser steps cap (None: epochs decide);
    batch_size/eval_batch_size: examples per forward; lr, warmup_ratio (share of steps),
    weight_decay; grad_accum: forwards per optimiser step; seed; device ``auto|cpu|cuda``;
    log_every: steps between log lines; save_every: steps between training checkpoints (0: never)."""

    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 32
    eval_batch_size: int = 64
    lr: float = 5e-5
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_accum: int = 1
    seed: int = 13
    device: str = "auto"
    log_every: int = 50
    save_every: int = 0


def _tty() -> bool:
    import sys

    return sys.stderr.isatty()


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> cuda if available else cpu; otherwise ``torch.device(name)``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def autocast(device: torch.device):
    """bf16 autocast on CUDA, a no-op context on CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def batches(n: int, batch_size: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Index batches over ``n`` examples, shuffled when ``rng`` is given."""
    order = rng.permutation(n) if rng is not None else np.arange(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def _optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if p.requires_grad:
            (no_decay if n.endswith("bias") or "LayerNorm" in n else decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)


def _save_state(state_dir: Path, model, opt, sched, pos: dict) -> None:
    with atomic_path(state_dir / STATE) as tmp:
        tmp.mkdir()
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "torch_rng": torch.get_rng_state(),
                    "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None},
                   tmp / "state.pt")
        (tmp / "position.json").write_text(json.dumps(pos))


def _load_state(state_dir: Path, model, opt, sched) -> dict | None:
    d = state_dir / STATE
    if not (d / "position.json").is_file():
        return None
    blob = torch.load(d / "state.pt", map_location="cpu", weights_only=False)
    model.load_state_dict(blob["model"])
    opt.load_state_dict(blob["optimizer"])
    sched.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["torch_rng"])
    if blob["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["cuda_rng"])
    return json.loads((d / "position.json").read_text())


def train(model: torch.nn.Module, examples: Examples, collate_fn: Callable, cfg: TrainConfig, log: Log = print,
          state_dir: str | os.PathLike | None = None, on_step: Callable[[int, int], None] | None = None) -> dict:
    """Optimise ``model`` on ``examples`` and return run stats.

    Args:
        examples: example dicts understood by ``collate_fn``, or ``epoch -> examples`` (e.g. a new
            masking per pretraining epoch).
        state_dir: where training checkpoints go (``cfg.save_every``); resumes from one found there.
        on_step: called as ``on_step(step, total_steps)`` after every optimiser step (progress, tests).

    Returns:
        dict: steps, epochs_run, final_loss (mean of the last ``log_every`` steps), seconds,
        tokens_per_s (input chars incl. padding per second), device, resumed_from (step or None).

    Raises:
        ValueError: no examples.
    """
    from accelerate import Accelerator
    from tqdm.auto import tqdm

    get = examples if callable(examples) else (lambda epoch: examples)
    if not len(get(0)):
        raise ValueError("no training examples")
    device = resolve_device(cfg.device)
    # one process: plain training on `device`; under `accelerate launch`/torchrun: DDP over the processes,
    # each taking every num_processes-th batch (the global batch is batch_size x num_processes)
    acc = Accelerator(cpu=device.type == "cpu", mixed_precision="bf16" if device.type == "cuda" else "no")
    device, nproc, rank = acc.device, acc.num_processes, acc.process_index
    torch.manual_seed(cfg.seed)
    model.to(device).train()
    per_epoch = math.ceil(len(get(0)) // nproc / (cfg.batch_size * cfg.grad_accum)) or 1
    total = cfg.max_steps or per_epoch * cfg.epochs
    opt = _optimizer(model, cfg)
    sched = get_linear_schedule_with_warmup(opt, int(total * cfg.warmup_ratio), total)
    pos = {"step": 0, "epoch": 0, "batch": 0, "losses": [], "tokens": 0}
    resumed = None
    if state_dir is not None:
        loaded = _load_state(Path(state_dir), model, opt, sched)
        if loaded:
            pos, resumed = loaded, loaded["step"]
            model.to(device)
            log(f"resumed from step {resumed}")
    unwrapped = model
    model, opt = acc.prepare(model, opt)
    bar = tqdm(total=total, initial=pos["step"], desc="train", disable=not (acc.is_main_process and _tty()))
    t0 = time.perf_counter()
    tokens0 = pos["tokens"]
    while pos["step"] < total:
        data = get(pos["epoch"])
        idx = batches(len(data), cfg.batch_size, np.random.default_rng([cfg.seed, pos["epoch"]]))
        idx = idx[rank::nproc][: len(idx) // nproc or 1]
        for k in range(pos["batch"], len(idx)):
            batch = {key: v.to(device) for key, v in collate_fn([data[i] for i in idx[k]]).items()}
            with acc.autocast():
                loss = model(**batch).loss / cfg.grad_accum
            acc.backward(loss)
            pos["tokens"] += int(batch["input_ids"].numel()) * nproc
            if (k + 1) % cfg.grad_accum and k + 1 < len(idx):
                continue
            acc.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            pos["step"] += 1
            pos["batch"] = k + 1
            pos["losses"] = (pos["losses"] + [loss.item() * cfg.grad_accum])[-cfg.log_every:]
            bar.update(1)
            if acc.is_main_process and (pos["step"] % cfg.log_every == 0 or pos["step"] == total):
                log(f"step {pos['step']}/{total} loss {np.mean(pos['losses']):.4f} lr {sched.get_last_lr()[0]:.2e}")
            if state_dir is not None and cfg.save_every and pos["step"] % cfg.save_every == 0:
                acc.wait_for_everyone()
                if acc.is_main_process:
                    _save_state(Path(state_dir), unwrapped, opt, sched, pos)
            if on_step is not None:
                on_step(pos["step"], total)
            if pos["step"] >= total:
                break
        else:
            pos["epoch"], pos["batch"] = pos["epoch"] + 1, 0
    bar.close()
    if state_dir is not None and resumed != pos["step"] and acc.is_main_process:
        _save_state(Path(state_dir), unwrapped, opt, sched, pos)  # final state: a rerun of a finished loop is a no-op
    acc.wait_for_everyone()
    secs = time.perf_counter() - t0
    return {"steps": pos["step"], "epochs_run": pos["epoch"] + (1 if pos["batch"] else 0),
            "final_loss": float(np.mean(pos["losses"])), "seconds": secs,
            "tokens_per_s": (pos["tokens"] - tokens0) / secs if secs else 0.0, "device": str(device),
            "processes": nproc, "resumed_from": resumed}


@torch.no_grad()
def evaluate_pretraining(model: torch.nn.Module, examples: Sequence[dict], collate_fn: Callable,
                         cfg: TrainConfig) -> dict:
    """MLM loss (mean over masked chars), MLM accuracy, perplexity = exp(MLM loss), NSP accuracy."""
    device = resolve_device(cfg.device)
    model.to(device).eval()
    nll, hits, n_masked, nsp_hits, n = 0.0, 0, 0, 0, 0
    for b in batches(len(examples), cfg.eval_batch_size, None):
        batch = {k: v.to(device) for k, v in collate_fn([examples[i] for i in b]).items()}
        with autocast(device):
            out = model(**batch)
        logits = out.prediction_logits.float()
        labels = batch["labels"]
        sel = labels != -100
        nll += torch.nn.functional.cross_entropy(logits[sel], labels[sel], reduction="sum").item()
        hits += (logits[sel].argmax(-1) == labels[sel]).sum().item()
        n_masked += int(sel.sum())
        nsp_hits += (out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum().item()
        n += len(b)
    loss = nll / max(n_masked, 1)
    return {"mlm_loss": loss, "mlm_accuracy": hits / max(n_masked, 1), "perplexity": math.exp(min(loss, 50)),
            "nsp_accuracy": nsp_hits / max(n, 1), "examples": n, "masked_chars": n_masked}


@torch.no_grad()
def evaluate_classifier(model: torch.nn.Module, examples: Sequence[dict], collate_fn: Callable,
                        cfg: TrainConfig) -> dict:
    """Accuracy and F1 of the positive class (label 1) on labelled examples."""
    device = resolve_device(cfg.device)
    model.to(device).eval()
    preds, gold = [], []
    for b in batches(len(examples), cfg.eval_batch_size, None):
        batch = {k: v.to(device) for k, v in collate_fn([examples[i] for i in b]).items()}
        with autocast(device):
            logits = model(**batch).logits
        preds += logits.argmax(-1).tolist()
        gold += batch["labels"].tolist()
    p, g = np.array(preds), np.array(gold)
    tp = int(((p == 1) & (g == 1)).sum())
    prec = tp / max(int((p == 1).sum()), 1)
    rec = tp / max(int((g == 1).sum()), 1)
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"accuracy": float((p == g).mean()) if len(g) else 0.0, "f1": f1, "examples": len(g)}
