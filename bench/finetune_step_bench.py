"""The main job's fine-tuning step, random vs length-grouped batches, side by side in one process
(``TrainConfig.group_by_length``; transformers' ``group_by_length`` sampler; SPEC §6 fine-tuning on PolicySM-1).

    python bench/finetune_step_bench.py --data-dir data [--steps 30] [--rounds 2]

Reads the main job's ``models/pretrain`` checkpoint and ``policysm1`` train split, encodes the pairs exactly as the
finetune stage does (the cpu-small profile's max length and words), then alternates ``--rounds`` times between the
two orders, ``--steps`` optimiser steps each from the same initial weights (the first 3 steps of a run are warm-up
and not timed). Prints per order: seconds per step (median over rounds), pieces per batch (real and padded), and
the process's peak RSS growth during the run (MiB; ``/proc/self/status`` VmHWM after a ``clear_refs`` reset).
Ratios are printed beside the figures: the machines are shared, so only a side-by-side ratio is a figure.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _order_stats(order, lengths, batch: int) -> tuple[float, float]:
    """(mean real pieces, mean padded pieces) per batch of ``order``."""
    real = padded = 0
    n = 0
    for i in range(0, len(order), batch):
        b = [lengths[j] for j in order[i:i + batch]]
        real, padded, n = real + sum(b), padded + max(b) * len(b), n + 1
    return real / n, padded / n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()

    import numpy as np
    import torch
    from transformers import AutoModelForSequenceClassification

    from flows.profiles import get_profile
    from model.stages import batch_collator, encode_pairs, load_inputs, read_split
    from model.training import Callback, epoch_order, train
    from storage.memory import release_memory, reset_peak, rss

    prof = get_profile("cpu-small")
    d = Path(args.data_dir)
    enc, matcher = load_inputs(d / "models" / "pretrain")
    base = AutoModelForSequenceClassification.from_pretrained(str(d / "models" / "pretrain"), num_labels=2)
    fn = batch_collator(base.config, enc.pad)
    rows = read_split(d / "policysm1", "train", None, prof.finetune.seed)
    data = encode_pairs(rows, enc, matcher, prof.finetune_max_len, base.config.max_words, prof.finetune.seed)
    lengths = [len(e["input_ids"]) for e in data]

    class Clock(Callback):
        def __init__(self):
            self.t: list[float] = []

        def on_step(self, loop):
            self.t.append(time.perf_counter())

    times: dict[bool, list[float]] = {False: [], True: []}
    peaks: dict[bool, list[int]] = {False: [], True: []}
    for _ in range(args.rounds):
        for grouped in (False, True):
            cfg = dataclasses.replace(prof.finetune, max_steps=args.steps, eval_every=0, save_every=0,
                                      log_every=10_000, group_by_length=grouped)
            model = copy.deepcopy(base)
            release_memory()
            reset_peak()
            before = rss().now
            clock = Clock()
            train(model, data, fn, cfg, log=lambda s: None, callbacks=[clock])
            times[grouped].append((clock.t[-1] - clock.t[2]) / (len(clock.t) - 3))
            peaks[grouped].append(rss().peak - before)
            del model
    rng = np.random.default_rng([prof.finetune.seed, 0])
    orders = {False: rng.permutation(len(data)),
              True: epoch_order(data, dataclasses.replace(prof.finetune, group_by_length=True), 0)}
    print(f"PolicySM-1 train: {len(data)} pairs, mean {np.mean(lengths):.1f} pieces; batch {prof.finetune.batch_size}, "
          f"{args.steps} steps x {args.rounds} rounds, {torch.get_num_threads()} threads, bf16 autocast")
    print("| batches | s / step | real pieces / batch | padded pieces / batch | peak RSS growth MiB |")
    print("|---|---|---|---|---|")
    for grouped in (False, True):
        real, padded = _order_stats(orders[grouped], lengths, prof.finetune.batch_size)
        print(f"| {'length-grouped' if grouped else 'random'} | {statistics.median(times[grouped]):.3f} | "
              f"{real:.0f} | {padded:.0f} | {max(peaks[grouped])} |")
    print(f"ratio grouped / random s per step: {statistics.median(times[True]) / statistics.median(times[False]):.2f}")


if __name__ == "__main__":
    main()
