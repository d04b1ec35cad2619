"""Training and evaluation loops for PolicyBERT pretraining (MLM + NSP) and fine-tuning (SPEC §6).

Device: ``auto`` picks CUDA (with bf16 autocast) when present, else CPU. Optimiser AdamW with a
linear warmup/decay schedule (transformers), gradient accumulation, seeded shuffling.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from transformers import get_linear_schedule_with_warmup

Log = Callable[[str], None]


@dataclass(frozen=True)
class TrainConfig:
    """epochs: passes over the data; max_steps: optimiser steps cap (None: epochs decide);
    batch_size/eval_batch_size: examples per forward; lr, warmup_ratio (share of steps),
    weight_decay; grad_accum: forwards per optimiser step; seed; device ``auto|cpu|cuda``;
    log_every: steps between log lines."""

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


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> cuda if available else cpu; otherwise ``torch.device(name)``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def _autocast(device: torch.device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def batches(n: int, batch_size: int, rng: np.random.Generator | None) -> list[np.ndarray]:
    """Index batches over ``n`` examples, shuffled when ``rng`` is given."""
    order = rng.permutation(n) if rng is not None else np.arange(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def train(model: torch.nn.Module, examples: Sequence[dict], collate_fn: Callable, cfg: TrainConfig,
          log: Log = print) -> dict:
    """Optimise ``model`` on ``examples`` (dicts understood by ``collate_fn``), returning stats.

    Returns:
        dict: steps, epochs_run, final_loss (mean of the last ``log_every`` steps), seconds,
        tokens_per_s (input chars incl. padding per second), device.

    Raises:
        ValueError: no examples.
    """
    if not examples:
        raise ValueError("no training examples")
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    model.to(device).train()
    per_epoch = math.ceil(len(examples) / (cfg.batch_size * cfg.grad_accum))
    total = cfg.max_steps or per_epoch * cfg.epochs
    decay = [p for n, p in model.named_parameters() if p.requires_grad and not n.endswith("bias") and "LayerNorm" not in n]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and (n.endswith("bias") or "LayerNorm" in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr)
    sched = get_linear_schedule_with_warmup(opt, int(total * cfg.warmup_ratio), total)
    rng = np.random.default_rng(cfg.seed)
    step, tokens, losses, t0, epoch = 0, 0, [], time.perf_counter(), 0
    while step < total:
        epoch += 1
        idx = batches(len(examples), cfg.batch_size, rng)
        for k, b in enumerate(idx):
            batch = {key: v.to(device) for key, v in collate_fn([examples[i] for i in b]).items()}
            with _autocast(device):
                loss = model(**batch).loss / cfg.grad_accum
            loss.backward()
            tokens += batch["input_ids"].numel()
            if (k + 1) % cfg.grad_accum and k + 1 < len(idx):
                continue
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            losses.append(loss.item() * cfg.grad_accum)
            if step % cfg.log_every == 0 or step == total:
                log(f"step {step}/{total} loss {np.mean(losses[-cfg.log_every:]):.4f} "
                    f"lr {sched.get_last_lr()[0]:.2e}")
            if step >= total:
                break
    secs = time.perf_counter() - t0
    return {"steps": step, "epochs_run": epoch, "final_loss": float(np.mean(losses[-cfg.log_every:])),
            "seconds": secs, "tokens_per_s": tokens / secs if secs else 0.0, "device": str(device)}


@torch.no_grad()
def evaluate_pretraining(model: torch.nn.Module, examples: Sequence[dict], collate_fn: Callable,
                         cfg: TrainConfig) -> dict:
    """MLM loss (mean over masked chars), MLM accuracy, perplexity = exp(MLM loss), NSP accuracy."""
    device = resolve_device(cfg.device)
    model.to(device).eval()
    nll, hits, n_masked, nsp_hits, n = 0.0, 0, 0, 0, 0
    for b in batches(len(examples), cfg.eval_batch_size, None):
        batch = {k: v.to(device) for k, v in collate_fn([examples[i] for i in b]).items()}
        with _autocast(device):
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
        with _autocast(device):
            logits = model(**batch).logits
        preds += logits.argmax(-1).tolist()
        gold += batch["labels"].tolist()
    p, g = np.array(preds), np.array(gold)
    tp = int(((p == 1) & (g == 1)).sum())
    prec = tp / max(int((p == 1).sum()), 1)
    rec = tp / max(int((g == 1).sum()), 1)
    f1 = 2 * prec * rec / (prec + rec) if prec + rec else 0.0
    return {"accuracy": float((p == g).mean()) if len(g) else 0.0, "f1": f1, "examples": len(g)}
