"""Training and evaluation loops for PolicyBERT pretraining (MLM + NSP) and fine-tuning (SPEC §6).

Device ``auto`` picks CUDA (bf16 autocast) when present, else CPU. AdamW with linear warmup/decay
(transformers), gradient accumulation, gradient clipping, seeded data order per epoch. With a
``state_dir`` the loop saves a training checkpoint (model, optimiser, scheduler, RNG states, data
position) every ``save_every`` optimiser steps, atomically, and a restarted run resumes from it and
ends with the same weights as an uninterrupted run with the same seed (in one process; under DDP the
state holds rank 0's RNG, so a resumed multi-GPU run draws other dropout masks). Several GPUs: start the
same code under ``accelerate launch`` (or ``torchrun``); the loop runs DDP through ``accelerate``.
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
from storage.bounds import check_bounds

Log = Callable[[str], None]
Examples = Union[Sequence[dict], Callable[[int], Sequence[dict]]]
STATE = "trainer_state"


@dataclass(frozen=True)
class TrainConfig:
    """epochs: passes over the data; max_steps: optimiser steps cap (None: epochs decide);
    batch_size/eval_batch_size: examples per forward (per process); lr, warmup_ratio (share of all
    steps), weight_decay; grad_accum: forwards per optimiser step; seed; device ``auto|cpu|cuda``;
    log_every: steps between log lines; save_every: steps between training states (0: never);
    eval_every: steps between evaluations (0: at each epoch end; the last step is always evaluated);
    num_workers: DataLoader worker processes (None: 2 on CUDA, 0 on CPU, where collation is cheap
    and the cores are busy training)."""

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
    save_every: int = 200
    eval_every: int = 0
    num_workers: int | None = None

    def __post_init__(self):
        check_bounds(self, nullable=("max_steps", "num_workers"), epochs=(1, 100_000), max_steps=(1, None),
                     batch_size=(1, 1 << 16), eval_batch_size=(1, 1 << 16), lr=(">", 0, 10), warmup_ratio=(0, 1),
                     weight_decay=(0, 10), grad_accum=(1, 1 << 16), seed=(0, 2 ** 32 - 1), log_every=(1, None),
                     save_every=(0, None), eval_every=(0, None), num_workers=(0, 256))


def _tty() -> bool:
    import sys

    return sys.stderr.isatty()


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` -> cuda if available else cpu; otherwise ``torch.device(name)``."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def is_main_process() -> bool:
    """True in a single process, and on rank 0 only under ``accelerate launch``/``torchrun``:
    evaluation and checkpoint writes happen there alone."""
    from accelerate import PartialState

    return PartialState().is_main_process


def on_main_process(fn: Callable[[], dict], other: dict) -> dict:
    """``fn()`` (evaluation, checkpoint writes) on the main process, ``other`` elsewhere; then every rank
    waits for the others, so no rank reads a checkpoint before rank 0 has written it."""
    from accelerate import PartialState

    out = fn() if is_main_process() else other
    PartialState().wait_for_everyone()
    return out


def autocast(device: torch.device):
    """bf16 autocast on CUDA, a no-op context on CPU."""
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def batches(n: int, batch_size: int, rng: np.random.Generator | None,
            order: np.ndarray | None = None) -> list[np.ndarray]:
    """Index batches over ``n`` examples: consecutive slices of ``order`` when given, else of a
    permutation drawn from ``rng``, else of ``range(n)``."""
    if order is None:
        order = rng.permutation(n) if rng is not None else np.arange(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def epoch_order(data, cfg: TrainConfig, epoch: int) -> np.ndarray | None:
    """The example order a data source imposes on ``epoch`` (its ``epoch_order(seed, epoch)``, e.g. a
    streamed table's shard-window shuffle, :class:`model.pretrain_data.ShardedExamples`), or None for
    a plain sequence (shuffled freely by :func:`rank_batches`)."""
    fn = getattr(data, "epoch_order", None)
    return fn(cfg.seed, epoch) if callable(fn) else None


def rank_batches(n: int, cfg: TrainConfig, epoch: int, rank: int = 0, nproc: int = 1,
                 order: np.ndarray | None = None) -> list[np.ndarray]:
    """The batches process ``rank`` of ``nproc`` runs in ``epoch``: every nproc-th batch of the
    epoch's order (``order``, a permutation of ``range(n)`` deterministic per (seed, epoch), or else a
    seeded shuffle), cut to the same count on every rank (at least 1)."""
    idx = batches(n, cfg.batch_size, np.random.default_rng([cfg.seed, epoch]), order)
    if len(idx) < nproc:  # fewer batches than ranks: repeat them, so that every rank steps (and syncs) alike
        idx = [idx[i % len(idx)] for i in range(nproc)]
    return idx[rank::nproc][: len(idx) // nproc]


def steps_per_epoch(n: int, cfg: TrainConfig, nproc: int = 1) -> int:
    """Optimiser steps one epoch of ``n`` examples takes: the batches each rank runs
    (:func:`rank_batches`) over ``grad_accum``, the last partial accumulation counting as a step."""
    per_rank = max(1, math.ceil(n / cfg.batch_size) // nproc)  # = len(rank_batches(...))
    return math.ceil(per_rank / cfg.grad_accum)


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
    """Restore a saved training state; tensors only (``weights_only=True``): a state file that
    holds anything else raises instead of running code."""
    d = state_dir / STATE
    if not (d / "position.json").is_file():
        return None
    blob = torch.load(d / "state.pt", map_location="cpu", weights_only=True)
    model.load_state_dict(blob["model"])
    opt.load_state_dict(blob["optimizer"])
    sched.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["torch_rng"])
    if blob["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["cuda_rng"])
    return json.loads((d / "position.json").read_text())


class _Best:
    """The best weights by the evaluation metric: in memory, and under ``state_dir/best.pt`` when
    training is resumable (so a resumed run still ends on the best checkpoint)."""

    def __init__(self, state_dir: Path | None):
        self.path = state_dir / "best.pt" if state_dir is not None else None
        self.weights: dict | None = None

    def save(self, model: torch.nn.Module) -> None:
        self.weights = {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
        if self.path is not None:
            with atomic_path(self.path) as tmp:
                torch.save(self.weights, tmp)

    def restore(self, model: torch.nn.Module) -> None:
        if self.weights is None and self.path is not None and self.path.is_file():
            self.weights = torch.load(self.path, map_location="cpu", weights_only=True)
        if self.weights is not None:
            model.load_state_dict(self.weights)


def _loader(data: Sequence[dict], idx: list[np.ndarray], collate_fn: Callable, cfg: TrainConfig,
            device: torch.device):
    """A DataLoader over the given batches (collated in ``num_workers`` processes, pinned on CUDA)."""
    from torch.utils.data import DataLoader

    workers = cfg.num_workers if cfg.num_workers is not None else (2 if device.type == "cuda" else 0)
    # its own generator: creating the iterator would otherwise draw from the global RNG, so a run resumed
    # mid-epoch would see other dropout masks than an uninterrupted one
    # workers are spawned, not forked: a fork of a process running Prefect (its API client, telemetry, event
    # loops) or pyarrow's thread pools is not safe, and a forked worker's exit hooks failed the run
    return DataLoader(data, batch_sampler=[b.tolist() for b in idx], collate_fn=collate_fn, num_workers=workers,
                      pin_memory=device.type == "cuda", generator=torch.Generator().manual_seed(cfg.seed),
                      multiprocessing_context="spawn" if workers else None)


def train(model: torch.nn.Module, examples: Examples, collate_fn: Callable, cfg: TrainConfig, log: Log = print,
          state_dir: str | os.PathLike | None = None, on_step: Callable[[int, int], None] | None = None,
          evaluate: Callable[[torch.nn.Module], dict] | None = None, best_metric: str | None = None) -> dict:
    """Optimise ``model`` on ``examples`` in one run (one AdamW, one warmup + linear decay over all
    steps of all epochs) and return run stats.

    Args:
        examples: example dicts understood by ``collate_fn``, or ``epoch -> examples`` (e.g. a new
            masking per pretraining epoch); any indexable with ``len`` works, and one with an
            ``epoch_order(seed, epoch)`` method (a streamed table, :class:`model.pretrain_data.ShardedExamples`)
            is read in that order, so only a few of its shards are in memory at a time. The position
            saved for a resume is (epoch, batch): the order is recomputed, so a resume is exact.
        state_dir: where training states go (every ``cfg.save_every`` steps); resumes from one found there.
        on_step: called as ``on_step(step, total_steps)`` after every optimiser step (progress, tests).
        evaluate: ``model -> metrics`` run on the main process only, at each epoch end (or every
            ``cfg.eval_every`` steps) and after the last step; each call adds a point to the curve.
        best_metric: a key of ``evaluate``'s metrics: the weights with its highest value are kept and
            loaded into ``model`` at the end (best-by-dev checkpoint).

    Returns:
        dict: steps, epochs_run, final_loss (mean of the last ``log_every`` steps), seconds,
        tokens_per_s (input chars incl. padding per second), device, processes, resumed_from (step or
        None), curve (one dict per evaluation: step, epoch, train_loss and the metrics), best (the
        curve point whose weights were kept, or None).

    Raises:
        ValueError: no examples, or ``best_metric`` without ``evaluate``.
    """
    from accelerate import Accelerator
    from tqdm.auto import tqdm

    if best_metric and evaluate is None:
        raise ValueError("best_metric needs an evaluate function")
    get = examples if callable(examples) else (lambda epoch: examples)
    if not len(get(0)):
        raise ValueError("no training examples")
    device = resolve_device(cfg.device)
    # one process: plain training on `device`; under `accelerate launch`/torchrun: DDP over the processes,
    # each taking every num_processes-th batch (the global batch is batch_size x num_processes)
    acc = Accelerator(cpu=device.type == "cpu", mixed_precision="bf16" if device.type == "cuda" else "no")
    device, nproc, rank, main = acc.device, acc.num_processes, acc.process_index, acc.is_main_process
    torch.manual_seed(cfg.seed + rank)  # one dropout stream per rank
    model.to(device).train()
    per_epoch = steps_per_epoch(len(get(0)), cfg, nproc)
    total = cfg.max_steps or per_epoch * cfg.epochs
    opt = _optimizer(model, cfg)
    sched = get_linear_schedule_with_warmup(opt, int(total * cfg.warmup_ratio), total)
    pos = {"step": 0, "epoch": 0, "batch": 0, "losses": [], "tokens": 0, "curve": [], "best": None}
    sd = Path(state_dir) if state_dir is not None else None
    best = _Best(sd)
    resumed = None
    if sd is not None:
        loaded = _load_state(sd, model, opt, sched)
        if loaded:
            pos, resumed = {**pos, **loaded}, loaded["step"]
            model.to(device)
            log(f"resumed from step {resumed}")
    unwrapped = model
    model, opt = acc.prepare(model, opt)

    def checkpoint_eval() -> None:
        if evaluate is not None and main and (not pos["curve"] or pos["curve"][-1]["step"] != pos["step"]):
            point = {"step": pos["step"], "epoch": pos["epoch"], "train_loss": float(np.mean(pos["losses"])),
                     **evaluate(unwrapped)}
            unwrapped.train()
            pos["curve"].append(point)
            log("eval " + " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in point.items()))
            if best_metric and (pos["best"] is None or point[best_metric] > pos["best"][best_metric]):
                pos["best"] = point
                best.save(unwrapped)
        acc.wait_for_everyone()
        if best_metric:
            save()  # right after best.pt, so that a resumed run knows which evaluation it holds

    def save() -> None:
        acc.wait_for_everyone()
        if sd is not None and main:
            _save_state(sd, unwrapped, opt, sched, pos)

    bar = tqdm(total=total, initial=pos["step"], desc="train", disable=not (main and _tty()))
    t0 = time.perf_counter()
    tokens0 = pos["tokens"]
    while pos["step"] < total:
        data = get(pos["epoch"])
        idx = rank_batches(len(data), cfg, pos["epoch"], rank, nproc, epoch_order(data, cfg, pos["epoch"]))
        for k, batch in enumerate(_loader(data, idx[pos["batch"]:], collate_fn, cfg, device), start=pos["batch"]):
            batch = {key: v.to(device, non_blocking=True) for key, v in batch.items()}
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
            if main and (pos["step"] % cfg.log_every == 0 or pos["step"] == total):
                log(f"step {pos['step']}/{total} loss {np.mean(pos['losses']):.4f} lr {sched.get_last_lr()[0]:.2e}")
            if cfg.eval_every and pos["step"] % cfg.eval_every == 0:
                checkpoint_eval()
            if cfg.save_every and pos["step"] % cfg.save_every == 0:
                save()
            if on_step is not None:
                on_step(pos["step"], total)
            if pos["step"] >= total:
                break
        else:
            pos["epoch"], pos["batch"] = pos["epoch"] + 1, 0
            if not cfg.eval_every and pos["step"] < total:
                checkpoint_eval()
    bar.close()
    checkpoint_eval()
    if resumed != pos["step"]:
        save()  # final state: a rerun of a finished loop is a no-op
    if best_metric:
        best.restore(unwrapped)
    acc.wait_for_everyone()
    secs = time.perf_counter() - t0
    return {"steps": pos["step"], "epochs_run": pos["epoch"] + (1 if pos["batch"] else 0),
            "final_loss": float(np.mean(pos["losses"])), "seconds": secs,
            "tokens_per_s": (pos["tokens"] - tokens0) / secs if secs else 0.0, "device": str(device),
            "processes": nproc, "resumed_from": resumed, "curve": pos["curve"], "best": pos["best"]}


@torch.no_grad()
def evaluate_pretraining(model: torch.nn.Module, examples: Sequence[dict], collate_fn: Callable,
                         cfg: TrainConfig) -> dict:
    """MLM loss (mean over masked chars, nats), MLM accuracy, perplexity = exp(MLM loss), NSP accuracy
    of a :class:`~model.modeling.PolicyBertForPreTraining` on labelled examples."""
    device = resolve_device(cfg.device)
    model.to(device).eval()
    nll, hits, n_masked, nsp_hits, n = 0.0, 0, 0, 0, 0
    for b in batches(len(examples), cfg.eval_batch_size, None):
        batch = {k: v.to(device) for k, v in collate_fn([examples[i] for i in b]).items()}
        with autocast(device):
            out = model(**batch)
        sel = batch["labels"] != -100
        logits = out.prediction_logits.float()  # PolicyBERT scores masked positions only: (n_masked, vocab)
        if logits.dim() == 3:  # a model that scores every position (transformers' BertForPreTraining)
            logits = logits[sel]
        target = batch["labels"][sel]
        nll += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
        hits += (logits.argmax(-1) == target).sum().item()
        n_masked += int(target.numel())
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
    from model.baselines import classification_scores

    return classification_scores(np.array(preds), np.array(gold))
