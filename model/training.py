"""One training engine (SPEC §6, §7, §12) for pretraining (MLM + NSP), fine-tuning, contrastive retrieval
training, the cross-encoder reranker (:mod:`retrieval.cross_encoder`) and LTM-B (:mod:`docmatch.train`):
:func:`train` runs any model whose forward returns an output with ``.loss`` (a task wraps its model in a small
module whose ``forward(**batch)`` computes the task's loss).

Device ``auto`` picks CUDA (bf16 autocast) when present, else CPU. AdamW with linear warmup/decay
(transformers), gradient accumulation, gradient clipping, seeded data order per epoch. Where a run stands is a
typed :class:`TrainState`; evaluation (with best-by-dev), saving, logging, progress, a wall-clock budget
(:class:`TimeBudget`) and early stopping (:class:`EarlyStopping`) are :class:`Callback` objects.
The logged loss is the mean step loss over the logging window, a step's loss the mean over its micro-batches.
With a ``state_dir`` the loop saves a training checkpoint (model, optimiser, scheduler, RNG states, the state)
every ``save_every`` optimiser steps, atomically, and a restarted run resumes from it and ends with the same
weights as an uninterrupted run with the same seed (in one process; under DDP the state holds rank 0's RNG, so
a resumed multi-GPU run draws other dropout masks). Several GPUs: start the same code under ``accelerate
launch`` (or ``torchrun``); the loop runs DDP through ``accelerate``.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable, Sequence, Union

import numpy as np
import torch
from transformers import get_linear_schedule_with_warmup

from model.baselines import classification_scores
from storage.atomic import atomic_path
from storage.bounds import check_bounds, check_choice
from storage import memory

Log = Callable[[str], None]
Examples = Union[Sequence[dict], Callable[[int], Sequence[dict]]]
STATE = "trainer_state"
PRECISIONS = ("auto", "bf16", "fp32")


@dataclass(frozen=True)
class TrainConfig:
    """epochs: passes over the data; max_steps: optimiser steps cap (None: epochs decide);
    batch_size/eval_batch_size: examples per forward (per process); lr, warmup_ratio (share of all
    steps), warmup_steps (optimiser steps of warm-up, >= 0; None: ``warmup_ratio`` decides), weight_decay;
    grad_accum: forwards per optimiser step; seed; device ``auto|cpu|cuda``;
    log_every: steps between log lines; save_every: steps between training states (0: never);
    eval_every: steps between evaluations (0: at each epoch end; the last step is always evaluated);
    num_workers: DataLoader worker processes (None: 2 on CUDA, 0 on CPU, where collation is cheap
    and the cores are busy training); precision: ``auto`` (bf16 autocast on CUDA, float32 on CPU), ``bf16``
    (bf16 autocast on any device: on a CPU with AVX512-BF16/AMX a 12-layer e5-small fine-tuning step of 32
    short pairs takes 0.72 s against 1.60 s in float32 on 2 cores) or ``fp32``; freeze: comma-separated
    parameter-name prefixes left untrained (``bert.embeddings.word_embeddings``: e5's 96 M token-embedding
    weights, whose AdamW state alone is 0.8 GB); lr_scales: comma-separated ``prefix=factor``, parameters whose
    names start with the prefix train at ``lr x factor`` (the first matching prefix wins; a new task head on a
    pretrained body learns faster than the body: ``classifier=20``, the discriminative rates of Howard & Ruder
    2018, "Universal Language Model Fine-tuning"); group_by_length: batches of examples of similar length
    (:func:`length_grouped_order`, transformers' ``group_by_length``): PolicySM-1's random batches of 32 pad to
    1.88x their real pieces, so grouped batches read far fewer positions per step; trim_every: optimiser steps
    between handing the heap's freed pages back to the system (:class:`HeapTrim`; 0: never): batches of changing
    shapes leave the glibc heap fragmented, and the fine-tuning's resident set grows with it."""

    epochs: int = 1
    max_steps: int | None = None
    batch_size: int = 32
    eval_batch_size: int = 64
    lr: float = 5e-5
    warmup_ratio: float = 0.1
    warmup_steps: int | None = None
    weight_decay: float = 0.01
    grad_accum: int = 1
    seed: int = 13
    device: str = "auto"
    log_every: int = 50
    save_every: int = 200
    eval_every: int = 0
    num_workers: int | None = None
    precision: str = "auto"
    freeze: str = ""
    lr_scales: str = ""
    group_by_length: bool = False
    trim_every: int = 0

    def __post_init__(self):
        check_choice(self, "precision", PRECISIONS)
        parse_lr_scales(self.lr_scales)
        check_bounds(self, nullable=("max_steps", "num_workers", "warmup_steps"), epochs=(1, 100_000),
                     max_steps=(1, None), batch_size=(1, 1 << 16), eval_batch_size=(1, 1 << 16), lr=(">", 0, 10),
                     warmup_ratio=(0, 1), warmup_steps=(0, None),
                     weight_decay=(0, 10), grad_accum=(1, 1 << 16), seed=(0, 2 ** 32 - 1), log_every=(1, None),
                     save_every=(0, None), eval_every=(0, None), num_workers=(0, 256), trim_every=(0, None))


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


def uses_bf16(device: torch.device, precision: str = "auto") -> bool:
    """Whether ``precision`` (:data:`PRECISIONS`) runs bf16 autocast on ``device``: ``auto`` on CUDA only."""
    return precision == "bf16" or (precision == "auto" and device.type == "cuda")


def autocast(device: torch.device, precision: str = "auto"):
    """bf16 autocast where :func:`uses_bf16` says so (CUDA by default), else a no-op context."""
    on = uses_bf16(device, precision)
    return torch.autocast(device.type if device.type in ("cuda", "cpu") else "cpu", dtype=torch.bfloat16,
                          enabled=on)


def freeze_parameters(model: torch.nn.Module, prefixes: str) -> list[str]:
    """Set ``requires_grad=False`` on every parameter whose name starts with one of the comma-separated
    ``prefixes`` (:attr:`TrainConfig.freeze`); returns the frozen names.

    Raises:
        ValueError: a prefix that names no parameter (a typo would otherwise train everything silently).
    """
    wanted = [p.strip() for p in prefixes.split(",") if p.strip()]
    frozen = []
    for prefix in wanted:
        hit = [(n, p) for n, p in model.named_parameters() if n.startswith(prefix)]
        if not hit:
            raise ValueError(f"TrainConfig.freeze: {prefix!r} names no parameter of {type(model).__name__}")
        for n, p in hit:
            p.requires_grad_(False)
            frozen.append(n)
    return frozen


def batches(n: int, batch_size: int, rng: np.random.Generator | None,
            order: np.ndarray | None = None) -> list[np.ndarray]:
    """Index batches over ``n`` examples: consecutive slices of ``order`` when given, else of a
    permutation drawn from ``rng``, else of ``range(n)``."""
    if order is None:
        order = rng.permutation(n) if rng is not None else np.arange(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def length_grouped_order(lengths: Sequence[int], batch_size: int, rng: np.random.Generator,
                         mega: int = 50) -> np.ndarray:
    """A permutation of ``range(len(lengths))`` whose consecutive ``batch_size`` slices hold examples of similar
    length, the batches themselves in random order: a random permutation is cut into mega-batches of
    ``mega x batch_size``, each sorted by length (longest first), cut into batches, and the full batches are
    shuffled (the one short batch, if any, stays last so :func:`batches` cuts the same slices). The sampler of
    transformers' ``group_by_length`` (``LengthGroupedSampler``), with the batch order shuffled as well.
    ``lengths``: tokens per example. Deterministic per ``rng`` state."""
    lengths = np.asarray(lengths)
    n, size = len(lengths), mega * batch_size
    if not n:
        return np.arange(0)
    perm = rng.permutation(n)
    order = np.concatenate([c[np.argsort(-lengths[c], kind="stable")] for c in
                            (perm[i:i + size] for i in range(0, n, size))])
    full = n // batch_size
    picks = [order[i * batch_size:(i + 1) * batch_size] for i in rng.permutation(full)]
    return np.concatenate(picks + [order[full * batch_size:]])


def epoch_order(data, cfg: TrainConfig, epoch: int) -> np.ndarray | None:
    """The example order a data source imposes on ``epoch`` (its ``epoch_order(seed, epoch)``, e.g. a
    streamed table's shard-window shuffle, :class:`model.pretrain_data.ShardedExamples`), the length-grouped
    order of a plain sequence of example dicts under ``cfg.group_by_length`` (:func:`length_grouped_order`
    over their ``input_ids``, seeded per (seed, epoch)), or None (shuffled freely by :func:`rank_batches`)."""
    fn = getattr(data, "epoch_order", None)
    if callable(fn):
        return fn(cfg.seed, epoch)
    if cfg.group_by_length and len(data) and isinstance(data[0], dict) and "input_ids" in data[0]:
        rng = np.random.default_rng([cfg.seed, epoch, 1])
        return length_grouped_order([len(e["input_ids"]) for e in data], cfg.batch_size, rng)
    return None


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


def parse_lr_scales(spec: str) -> list[tuple[str, float]]:
    """``[(prefix, factor)]`` of :attr:`TrainConfig.lr_scales` (``"classifier=20,bert.pooler=5"``).

    Raises:
        ValueError: an item without ``=``, an empty prefix, or a factor that is not a positive number.
    """
    out = []
    for item in (i.strip() for i in spec.split(",") if i.strip()):
        prefix, sep, factor = item.partition("=")
        try:
            value = float(factor)
        except ValueError:
            value = -1.0
        if not sep or not prefix.strip() or not value > 0:
            raise ValueError(f"TrainConfig.lr_scales: {item!r} is not prefix=factor with a positive factor")
        out.append((prefix.strip(), value))
    return out


def _optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters: no weight decay on biases and LayerNorms; groups at ``lr x factor``
    for :attr:`TrainConfig.lr_scales` after the two groups at ``lr``.

    Raises:
        ValueError: an ``lr_scales`` prefix that names no trainable parameter.
    """
    scales = parse_lr_scales(cfg.lr_scales)
    groups: dict[tuple[float, bool], list] = {(1.0, True): [], (1.0, False): []}
    for n, p in model.named_parameters():
        if p.requires_grad:
            factor = next((f for prefix, f in scales if n.startswith(prefix)), 1.0)
            groups.setdefault((factor, not (n.endswith("bias") or "LayerNorm" in n)), []).append(p)
    unused = [prefix for prefix, _ in scales
              if not any(n.startswith(prefix) and p.requires_grad for n, p in model.named_parameters())]
    if unused:
        raise ValueError(f"TrainConfig.lr_scales: {unused} name no trainable parameter of {type(model).__name__}")
    return torch.optim.AdamW([{"params": ps, "weight_decay": cfg.weight_decay if decay else 0.0, "lr": cfg.lr * f}
                              for (f, decay), ps in groups.items() if ps or f == 1.0], lr=cfg.lr)


def trainable_state(model: torch.nn.Module, copy: bool = False) -> dict[str, torch.Tensor]:
    """The model's state dict without its frozen parameters (``requires_grad=False``, :attr:`TrainConfig.freeze`):
    they never change in a run, so a kept best point or a training state need not hold them (e5's frozen token
    embeddings are 96 M of PolicyBERT's 121 M weights: 367 MiB per copy). ``copy``: detached CPU copies (a
    snapshot that later steps do not change) rather than the live tensors."""
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    return {k: (v.detach().to("cpu", copy=True) if copy else v) for k, v in model.state_dict().items()
            if k not in frozen}


def load_trainable_state(model: torch.nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Load a :func:`trainable_state` (or a whole state dict) into ``model``.

    Raises:
        RuntimeError: ``state`` names a tensor the model lacks, or lacks one that is not frozen in ``model``."""
    frozen = {n for n, p in model.named_parameters() if not p.requires_grad}
    missing, unexpected = model.load_state_dict(state, strict=False)
    lost = sorted(set(missing) - frozen)
    if lost or unexpected:
        raise RuntimeError(f"training state does not match {type(model).__name__}: missing {lost[:5]}, "
                           f"unexpected {sorted(unexpected)[:5]}")


def _save_state(state_dir: Path, model, opt, sched, pos: dict) -> None:
    with atomic_path(state_dir / STATE) as tmp:
        tmp.mkdir()
        torch.save({"model": trainable_state(model), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
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
    load_trainable_state(model, blob["model"])
    opt.load_state_dict(blob["optimizer"])
    sched.load_state_dict(blob["scheduler"])
    torch.set_rng_state(blob["torch_rng"])
    if blob["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(blob["cuda_rng"])
    return json.loads((d / "position.json").read_text())


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


@dataclass
class TrainState:
    """Where a run stands (saved as ``position.json`` beside the weights, so a resume is exact): optimiser
    ``step``; ``epoch`` and ``batch`` (the next batch of this process in the epoch's order); ``losses``: the
    step losses of the current logging window (each the mean over the step's micro-batches); ``tokens``: input
    ids seen (all processes, padding included); ``curve``: one dict per evaluation; ``best``: the curve point
    whose weights are kept (best-by-dev), or None."""

    step: int = 0
    epoch: int = 0
    batch: int = 0
    losses: list[float] = field(default_factory=list)
    tokens: int = 0
    curve: list[dict] = field(default_factory=list)
    best: dict | None = None

    @classmethod
    def from_json(cls, d: dict) -> "TrainState":
        """The state saved by :meth:`to_json` (unknown keys ignored)."""
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def to_json(self) -> dict:
        """A JSON-able dict of the state."""
        return asdict(self)

    def window_loss(self) -> float:
        """Mean step loss over the logging window (NaN before the first step)."""
        return float(np.mean(self.losses)) if self.losses else float("nan")


@dataclass
class Loop:
    """One training run as the callbacks see it: the model (``model`` as prepared by accelerate, ``unwrapped``
    the plain module), optimiser, scheduler, config, :class:`TrainState`, the step budget ``total``, the
    step it resumed from (``resumed``), whether this is the main process, and ``save()``."""

    model: torch.nn.Module
    unwrapped: torch.nn.Module
    opt: torch.optim.Optimizer
    sched: object
    acc: object
    cfg: TrainConfig
    state: TrainState
    total: int
    state_dir: Path | None
    log: Log
    resumed: int | None = None

    @property
    def main(self) -> bool:
        """True on the process that evaluates, logs and writes."""
        return self.acc.is_main_process

    def save(self) -> None:
        """Write the training state (weights, optimiser, scheduler, RNG, :class:`TrainState`) atomically, on
        the main process, after every process got here."""
        self.acc.wait_for_everyone()
        if self.state_dir is not None and self.main:
            _save_state(self.state_dir, self.unwrapped, self.opt, self.sched, self.state.to_json())

    def stop(self) -> None:
        """End the run after the current step: the step budget ``total`` becomes the step reached, and every
        callback's ``on_end`` then runs as after a last step (a final evaluation, the state). Every process must
        call it at the same step (:meth:`agree`)."""
        self.total = self.state.step

    def agree(self, flag: bool) -> bool:
        """The main process's ``flag`` on every process (one broadcast under DDP; ``flag`` itself in one
        process): a decision taken on one clock or on the main process's evaluations, taken by all ranks alike."""
        if self.acc.num_processes == 1:
            return bool(flag)
        from accelerate.utils import broadcast

        return bool(broadcast(torch.tensor([float(flag)], device=self.acc.device), from_process=0).item())


class Callback:
    """Hooks of :func:`train`, called on every process in the order given: ``on_step`` after each optimiser
    step, ``on_epoch_end`` after an epoch that did not end the run, ``on_end`` after the last step, ``on_close``
    after every ``on_end``."""

    def on_step(self, loop: Loop) -> None:
        """After an optimiser step."""

    def on_epoch_end(self, loop: Loop) -> None:
        """After an epoch that did not end the run."""

    def on_end(self, loop: Loop) -> None:
        """After the last step."""

    def on_close(self, loop: Loop) -> None:
        """After every callback's ``on_end``."""


@dataclass
class LogLoss(Callback):
    """Logs ``step s/total loss L lr x`` every ``every`` steps and at the last step (main process); L is the
    mean step loss over the logging window (:meth:`TrainState.window_loss`)."""

    every: int

    def on_step(self, loop: Loop) -> None:
        s = loop.state
        if loop.main and (s.step % self.every == 0 or s.step == loop.total):
            loop.log(f"step {s.step}/{loop.total} loss {s.window_loss():.4f} lr {loop.sched.get_last_lr()[0]:.2e}")


@dataclass
class Evaluate(Callback):
    """``evaluate(model) -> metrics`` on the main process every ``every`` steps (0: at each epoch end) and after
    the last step; each call adds a point (step, epoch, train_loss, metrics) to ``state.curve``. With
    ``best_metric`` the trainable weights with its highest value are kept (:func:`trainable_state`; in memory, and
    in ``state_dir/best.pt`` so a resumed run still ends on them) and loaded into the model at the end (best-by-dev);
    ``best_metric`` may name several metrics, compared in order (:func:`best_key`: ``"mrr,-nll"`` breaks a tie in
    MRR by the lower NLL)."""

    evaluate: Callable[[torch.nn.Module], dict]
    every: int = 0
    best_metric: str | None = None
    state_dir: Path | None = None
    weights: dict | None = None

    def on_step(self, loop: Loop) -> None:
        if self.every and loop.state.step % self.every == 0:
            self.run(loop)

    def on_epoch_end(self, loop: Loop) -> None:
        if not self.every:
            self.run(loop)

    def on_end(self, loop: Loop) -> None:
        self.run(loop)

    def run(self, loop: Loop) -> None:
        """One evaluation (not twice at one step); the state saved after it when keeping the best."""
        s = loop.state
        if loop.main and (not s.curve or s.curve[-1]["step"] != s.step):
            point = {**dict(zip(POINT_KEYS, (s.step, s.epoch, s.window_loss()))), **self.evaluate(loop.unwrapped)}
            loop.unwrapped.train()
            s.curve.append(point)
            loop.log("eval " + " ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in point.items()))
            if self.best_metric and (s.best is None or best_key(point, self.best_metric) >
                                     best_key(s.best, self.best_metric)):
                s.best = point
                self._keep(loop.unwrapped)
        loop.acc.wait_for_everyone()
        if self.best_metric:
            loop.save()  # right after best.pt, so that a resumed run knows which evaluation it holds

    def _keep(self, model: torch.nn.Module) -> None:
        self.weights = None  # the previous best point goes before the new copy is made
        self.weights = trainable_state(model, copy=True)
        if self.state_dir is not None:
            with atomic_path(self.state_dir / "best.pt") as tmp:
                torch.save(self.weights, tmp)

    def on_close(self, loop: Loop) -> None:
        if not self.best_metric:
            return
        path = self.state_dir / "best.pt" if self.state_dir is not None else None
        if self.weights is None and path is not None and path.is_file():
            self.weights = torch.load(path, map_location="cpu", weights_only=True)
        if self.weights is not None:
            load_trainable_state(loop.unwrapped, self.weights)


POINT_KEYS = ("step", "epoch", "train_loss")  # a curve point's own fields, before the evaluation's figures


def point_metrics(point: dict) -> dict:
    """The evaluation's figures of a curve point (:class:`Evaluate`), without the point's own fields
    (:data:`POINT_KEYS`): what ``evaluate(model)`` returned at that step."""
    return {k: v for k, v in point.items() if k not in POINT_KEYS}


def best_key(point: dict, best_metric: str) -> tuple[float, ...]:
    """The key a curve point is ranked by (higher is better) under ``best_metric``: comma-separated metric names
    compared in order, a leading ``-`` for a metric where lower is better (``"dev_mrr,-dev_nll"``).

    Raises:
        KeyError: a named metric the point lacks.
    """
    names = [n.strip() for n in best_metric.split(",") if n.strip()]
    return tuple(-float(point[n[1:]]) if n.startswith("-") else float(point[n]) for n in names)


@dataclass
class TimeBudget(Callback):
    """Ends the run (:meth:`Loop.stop`) after the first optimiser step that finishes ``max_seconds`` (wall clock,
    > 0; ``inf``: no budget) or more after ``start`` (by default when the callback is made, so the run's setup
    counts); at least one step runs. The main process's clock decides for every process; a resumed run starts a
    fresh budget.

    Raises:
        ValueError: ``max_seconds`` not a number > 0.
    """

    max_seconds: float
    start: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        if isinstance(self.max_seconds, bool) or not isinstance(self.max_seconds, (int, float)) \
                or not self.max_seconds > 0:
            raise ValueError(f"TimeBudget.max_seconds = {self.max_seconds!r}: must be a number > 0")

    def on_step(self, loop: Loop) -> None:
        if loop.agree(time.perf_counter() - self.start >= self.max_seconds):
            loop.stop()


@dataclass
class HeapTrim(Callback):
    """Every ``every`` optimiser steps (> 0), hands the heap's freed pages back to the system
    (:func:`storage.memory.trim_heap`, glibc ``malloc_trim``): activations of changing shapes free memory the
    heap keeps, fragmented, so the process's resident set grows over a run without it. Measured on the
    cpu-small fine-tuning (every 10 steps): peak 3,003 MiB against 3,140 on the stage alone (150 steps, one
    thread), 4,036 against 4,178 in the main job, at the same step time and the same accuracy."""

    every: int

    def on_step(self, loop: Loop) -> None:
        if loop.state.step % self.every == 0:
            memory.trim_heap()


@dataclass
class EarlyStopping(Callback):
    """Ends the run (:meth:`Loop.stop`) once ``patience`` evaluations in a row brought no new best point (the
    :class:`Evaluate` of :func:`train`'s ``best_metric``, which runs before this callback); counted from
    ``state.curve``, so a resumed run counts on. Early stopping on a held-out split (Prechelt 1998, "Early
    Stopping — But When?"); with ``best_metric`` the run still ends on the best point's weights.

    Raises:
        ValueError: ``patience`` not an integer >= 1.
    """

    patience: int

    def __post_init__(self):
        check_bounds(self, patience=(1, None))

    def on_step(self, loop: Loop) -> None:
        self._check(loop)

    def on_epoch_end(self, loop: Loop) -> None:
        self._check(loop)

    def _check(self, loop: Loop) -> None:
        s = loop.state
        stale = s.best is not None and sum(p["step"] > s.best["step"] for p in s.curve) >= self.patience
        if loop.agree(stale):
            loop.stop()


@dataclass
class SaveState(Callback):
    """The training state every ``every`` steps (0: never) and after the last step (unless the run resumed
    there: a rerun of a finished loop is a no-op)."""

    every: int

    def on_step(self, loop: Loop) -> None:
        if self.every and loop.state.step % self.every == 0:
            loop.save()

    def on_end(self, loop: Loop) -> None:
        if loop.resumed != loop.state.step:
            loop.save()


@dataclass
class Progress(Callback):
    """``fn(step, total)`` after every step (progress artifacts, tests) and a progress bar on a terminal."""

    fn: Callable[[int, int], None] | None = None
    bar: object = None

    def on_step(self, loop: Loop) -> None:
        if self.bar is None:
            from tqdm.auto import tqdm  # a terminal-only dependency, loaded when a run has steps to show

            self.bar = tqdm(total=loop.total, initial=loop.state.step - 1, desc="train",
                            disable=not (loop.main and _tty()))
        self.bar.update(1)
        if self.fn is not None:
            self.fn(loop.state.step, loop.total)

    def on_end(self, loop: Loop) -> None:
        if self.bar is not None:
            self.bar.close()


def train(model: torch.nn.Module, examples: Examples, collate_fn: Callable, cfg: TrainConfig, log: Log = print,
          state_dir: str | os.PathLike | None = None, on_step: Callable[[int, int], None] | None = None,
          evaluate: Callable[[torch.nn.Module], dict] | None = None, best_metric: str | None = None,
          callbacks: Sequence[Callback] = ()) -> dict:
    """Optimise ``model`` (its forward returns an output with ``.loss``) on ``examples`` in one run: one AdamW,
    one warmup + linear decay over all steps of all epochs, gradient accumulation and clipping, DDP under
    ``accelerate launch``, bf16 on CUDA; resumable from ``state_dir``. Returns run stats.

    Args:
        examples: example dicts understood by ``collate_fn``, or ``epoch -> examples``; one with an
            ``epoch_order(seed, epoch)`` method (:class:`model.pretrain_data.ShardedExamples`) is read in that
            order. The saved position is (epoch, batch): the order is recomputed, so a resume is exact.
        state_dir: training states go there every ``cfg.save_every`` steps; a run resumes from one found there.
        on_step, evaluate, best_metric: :class:`Progress`, :class:`Evaluate` (every ``cfg.eval_every`` steps,
            0: each epoch end, and after the last step; best-by-dev on ``best_metric``, :func:`best_key`);
            ``callbacks``: more, after those (:class:`TimeBudget`, :class:`EarlyStopping` end a run early).

    Returns:
        dict: steps, epochs_run, final_loss (mean step loss over the last ``log_every`` steps), seconds,
        tokens_per_s, device, processes, resumed_from (step or None), curve, best (the kept point or None).

    Raises:
        ValueError: no examples, or ``best_metric`` without ``evaluate``.
    """
    if best_metric and evaluate is None:
        raise ValueError("best_metric needs an evaluate function")
    get = examples if callable(examples) else (lambda epoch: examples)
    if not len(get(0)):
        raise ValueError("no training examples")
    loop = _start(model, len(get(0)), cfg, log, Path(state_dir) if state_dir is not None else None)
    cbs = [LogLoss(cfg.log_every), *([Evaluate(evaluate, cfg.eval_every, best_metric, loop.state_dir)] if evaluate
                                     else []), SaveState(cfg.save_every), Progress(on_step),
           *([HeapTrim(cfg.trim_every)] if cfg.trim_every else []), *callbacks]
    t0, tokens0 = time.perf_counter(), loop.state.tokens
    while loop.state.step < loop.total:
        _run_epoch(loop, get(loop.state.epoch), collate_fn, cbs)
    for hook in ("on_end", "on_close"):
        for cb in cbs:
            getattr(cb, hook)(loop)
    loop.acc.wait_for_everyone()
    s, secs = loop.state, time.perf_counter() - t0
    return {"steps": s.step, "epochs_run": s.epoch + (1 if s.batch else 0), "final_loss": s.window_loss(),
            "seconds": secs, "tokens_per_s": (s.tokens - tokens0) / secs if secs else 0.0,
            "device": str(loop.acc.device), "processes": loop.acc.num_processes, "resumed_from": loop.resumed,
            "curve": s.curve, "best": s.best}


def _start(model: torch.nn.Module, n: int, cfg: TrainConfig, log: Log, state_dir: Path | None) -> Loop:
    """Accelerator, seeds, optimiser and schedule for ``n`` examples per epoch; the saved state loaded."""
    from accelerate import Accelerator

    device = resolve_device(cfg.device)
    # one process: plain training on `device`; under `accelerate launch`/torchrun: DDP over the processes,
    # each taking every num_processes-th batch (the global batch is batch_size x num_processes)
    # precision is this loop's own autocast (_run_epoch), never accelerate's mixed_precision: accelerate keeps one
    # process-wide state, and a second run in the process with another mixed_precision would be refused
    acc = Accelerator(cpu=device.type == "cpu")
    freeze_parameters(model, cfg.freeze)
    torch.manual_seed(cfg.seed + acc.process_index)  # one dropout stream per rank
    model.to(acc.device).train()
    total = cfg.max_steps or steps_per_epoch(n, cfg, acc.num_processes) * cfg.epochs
    opt = _optimizer(model, cfg)
    warmup = cfg.warmup_steps if cfg.warmup_steps is not None else int(total * cfg.warmup_ratio)
    sched = get_linear_schedule_with_warmup(opt, warmup, total)
    state, resumed = TrainState(), None
    loaded = _load_state(state_dir, model, opt, sched) if state_dir is not None else None
    if loaded:
        state, resumed = TrainState.from_json(loaded), loaded["step"]
        model.to(acc.device)
        log(f"resumed from step {resumed}")
    wrapped, opt = acc.prepare(model, opt)
    return Loop(wrapped, model, opt, sched, acc, cfg, state, total, state_dir, log, resumed)


def _run_epoch(loop: Loop, data, collate_fn: Callable, cbs: list[Callback]) -> None:
    """This process's batches of the state's epoch from the state's batch on, until the epoch or the step
    budget ends; a step is ``grad_accum`` micro-batches (the epoch's last step may take fewer)."""
    s, cfg, acc = loop.state, loop.cfg, loop.acc
    idx = rank_batches(len(data), cfg, s.epoch, acc.process_index, acc.num_processes, epoch_order(data, cfg, s.epoch))
    micro: list[float] = []
    for k, batch in enumerate(_loader(data, idx[s.batch:], collate_fn, cfg, acc.device), start=s.batch):
        batch = {key: v.to(acc.device, non_blocking=True) for key, v in batch.items()}
        with autocast(acc.device, cfg.precision):
            loss = loop.model(**batch).loss
        acc.backward(loss / cfg.grad_accum)
        micro.append(loss.item())
        s.tokens += sum(int(v.numel()) for key, v in batch.items() if key.endswith("input_ids")) * acc.num_processes
        if (k + 1) % cfg.grad_accum and k + 1 < len(idx):
            continue
        acc.clip_grad_norm_(loop.model.parameters(), 1.0)
        loop.opt.step()
        loop.sched.step()
        loop.opt.zero_grad(set_to_none=True)
        s.step, s.batch = s.step + 1, k + 1
        s.losses = (s.losses + [float(np.mean(micro))])[-cfg.log_every:]
        micro = []
        for cb in cbs:
            cb.on_step(loop)
        if s.step >= loop.total:
            return
    s.epoch, s.batch = s.epoch + 1, 0
    if s.step < loop.total:
        for cb in cbs:
            cb.on_epoch_end(loop)


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
        with autocast(device, cfg.precision):
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
    """Accuracy and F1 of the positive class (label 1) on labelled examples (batched by length when the
    examples carry ``input_ids``: fewer padded positions, the same predictions up to padding's rounding)."""
    device = resolve_device(cfg.device)
    model.to(device).eval()
    preds, gold = [], []
    order = (np.argsort([len(e["input_ids"]) for e in examples], kind="stable")
             if len(examples) and isinstance(examples[0], dict) and "input_ids" in examples[0] else None)
    for b in batches(len(examples), cfg.eval_batch_size, None, order):
        batch = {k: v.to(device) for k, v in collate_fn([examples[i] for i in b]).items()}
        with autocast(device, cfg.precision):
            logits = model(**batch).logits
        preds += logits.argmax(-1).tolist()
        gold += batch["labels"].tolist()
    return classification_scores(np.array(preds), np.array(gold))
