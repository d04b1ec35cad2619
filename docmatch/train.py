"""Training LTM-B (SPEC §12) on labelled pairs over document matrices, on CPU, with dev-based early stopping, on the
project's one training engine (:func:`model.training.train`: :class:`PairLoss` wraps the model, the config is
mapped by :func:`engine_config`).

Each epoch trains on the pair file's ``train`` pairs (label 0/1, binary cross-entropy: match / no match) plus,
for every positive, ``random_negatives`` fresh negatives drawn from the train split's own ``b`` documents (never a
known positive of that ``a``). After each epoch the dev positives' ``b`` is ranked among ``dev_candidates``
(default: every ``b`` of the dev split) and the epoch with the best dev MRR is kept, a tie broken by the lower dev
NLL (:class:`model.training.Evaluate`); training stops after ``patience`` epochs without improvement
(:class:`model.training.EarlyStopping`), after ``epochs``, or past ``max_seconds``
(:class:`model.training.TimeBudget`).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from docmatch.ltm import LTMB, LTMConfig, pad
from docmatch.ranking import rank_metrics

if TYPE_CHECKING:  # the engine (and transformers) load when a training starts, not with this module
    from model.training import TrainConfig as EngineConfig


@dataclass(frozen=True)
class TrainConfig:
    """seed; epochs (most); lr, weight_decay (AdamW; the engine's, :func:`engine_config`: linear decay to 0 over
    ``epochs``, no warm-up, no decay on biases); batch_size (pairs); random_negatives per positive per epoch; patience (epochs
    without a better dev MRR); max_seconds (wall budget); threads (torch CPU threads)."""

    seed: int = 13
    epochs: int = 40
    lr: float = 1e-3
    weight_decay: float = 1e-4
    batch_size: int = 32
    random_negatives: int = 6
    patience: int = 4
    max_seconds: float = 540.0
    threads: int = 1


def epoch_pairs(pairs: pd.DataFrame, rng: random.Random, k: int) -> list[tuple[str, str, int]]:
    """This epoch's ``(a, b, label)``: the train pairs plus ``k`` random in-split negatives per positive (fewer
    only where the split has fewer ``b`` that are not a known positive of that ``a``: the same count every
    epoch), shuffled by ``rng``."""
    train = pairs[pairs["split"] == "train"]
    pool = sorted(set(train["b"]))
    known = set(zip(train.loc[train["label"] == 1, "a"], train.loc[train["label"] == 1, "b"]))
    out = list(zip(train["a"], train["b"], train["label"].astype(int)))
    for a in train.loc[train["label"] == 1, "a"]:
        negs = [b for b in pool if (a, b) not in known]
        out += [(a, b, 0) for b in rng.sample(negs, min(len(negs), k))]
    rng.shuffle(out)
    return out


class EpochPairs:
    """``epoch -> examples`` for :func:`model.training.train`: :func:`epoch_pairs` with a ``random.Random``
    seeded per (seed, epoch), so an epoch's pairs do not depend on how often or in what order they are asked
    for; the last epoch's kept."""

    def __init__(self, pairs: pd.DataFrame, seed: int, k: int):
        self.pairs, self.seed, self.k, self.last = pairs, seed, k, (None, None)

    def __call__(self, epoch: int) -> list[tuple[str, str, int]]:
        if self.last[0] != epoch:
            self.last = (epoch, epoch_pairs(self.pairs, random.Random(f"{self.seed}:{epoch}"), self.k))
        return self.last[1]


class PairLoss(torch.nn.Module):
    """LTM-B under binary cross-entropy for :func:`model.training.train`: ``forward(a, a_mask, b, b_mask,
    labels)`` (:func:`collate_pairs`) → ``.loss``, the mean BCE of the match logits against the 0/1 labels."""

    def __init__(self, model: LTMB):
        super().__init__()
        self.model = model

    def forward(self, a, a_mask, b, b_mask, labels):
        logits = self.model(a, a_mask, b, b_mask)
        return SimpleNamespace(loss=torch.nn.functional.binary_cross_entropy_with_logits(logits, labels))


def collate_pairs(items, mats: dict, max_rows: int) -> dict:
    """A batch of ``(a, b, label)``: ``a``/``b`` float (batch, rows ≤ ``max_rows``, dim) and their masks (:func:`pad`
    of ``mats[id]``), ``labels`` float (batch,)."""
    a, am = pad([mats[x[0]] for x in items], max_rows)
    b, bm = pad([mats[x[1]] for x in items], max_rows)
    return {"a": a, "a_mask": am, "b": b, "b_mask": bm, "labels": torch.tensor([float(x[2]) for x in items])}


def engine_config(tcfg: TrainConfig, epoch_size: int) -> EngineConfig:
    """``tcfg`` on the training engine: ``epochs`` passes of batches of ``batch_size`` pairs (``epoch_size`` a
    pass), AdamW at ``lr`` decaying linearly to 0, no warm-up, gradient norm clipped at 1, on the CPU, the logged
    loss the epoch's mean (one log line an epoch), an evaluation at each epoch end, no state saved."""
    from model.training import TrainConfig as EngineConfig, steps_per_epoch

    per_epoch = steps_per_epoch(epoch_size, EngineConfig(batch_size=tcfg.batch_size))
    return EngineConfig(epochs=tcfg.epochs, batch_size=tcfg.batch_size, lr=tcfg.lr, warmup_ratio=0.0,
                        weight_decay=tcfg.weight_decay, seed=tcfg.seed, device="cpu", log_every=per_epoch,
                        save_every=0, eval_every=0, num_workers=0, precision="fp32")


def train_ltm(pairs: pd.DataFrame, mats: dict, cfg: LTMConfig, tcfg: TrainConfig = TrainConfig(),
              dev_candidates=None, log=print) -> tuple[LTMB, dict]:
    """Train LTM-B (module docstring) on ``pairs`` (columns ``a, b, label, split``) over ``mats`` (id ->
    float32 (rows, dim)). Returns the best-dev model (eval mode) and the history: ``epochs`` (per evaluation:
    ``epoch``, ``loss`` (the epoch's mean BCE), ``dev_mrr``, ``dev_nll`` (nats), ``seconds`` since the start),
    ``best_dev_mrr``, ``seconds``.

    Raises:
        ValueError: no train positive, no dev positive, or a pair id without a matrix.
    """
    missing = sorted((set(pairs["a"]) | set(pairs["b"])) - set(mats))
    if missing:
        raise ValueError(f"{len(missing)} pair ids have no document matrix (first: {missing[0]!r})")
    dev = pairs[(pairs["split"] == "dev") & (pairs["label"] == 1)]
    if not ((pairs["split"] == "train") & (pairs["label"] == 1)).any() or dev.empty:
        raise ValueError("training needs positive pairs in both the train and the dev split")
    cands = sorted(dev_candidates if dev_candidates is not None else set(pairs.loc[pairs["split"] == "dev", "b"]))
    from model.training import EarlyStopping, TimeBudget, train

    torch.set_num_threads(tcfg.threads)
    torch.manual_seed(tcfg.seed)
    model, t0 = LTMB(cfg), time.perf_counter()
    epochs = EpochPairs(pairs, tcfg.seed, tcfg.random_negatives)

    def evaluate(_) -> dict:  # MRR rounded: a saturated MRR then selects by NLL, never by float noise
        return {"dev_mrr": round(rank_metrics(lambda a, c: ltm_scores(model, mats, a, c), dev, cands)["mrr"], 9),
                "dev_nll": dev_nll(model, mats, dev, cands), "seconds": time.perf_counter() - t0}

    run = train(PairLoss(model), epochs, partial(collate_pairs, mats=mats, max_rows=cfg.max_segments),
                engine_config(tcfg, len(epochs(0))), log=log, evaluate=evaluate, best_metric="dev_mrr,-dev_nll",
                callbacks=[EarlyStopping(tcfg.patience), TimeBudget(tcfg.max_seconds, start=t0)])
    hist = [{"epoch": i, "loss": p["train_loss"], "dev_mrr": p["dev_mrr"], "dev_nll": p["dev_nll"],
             "seconds": p["seconds"]} for i, p in enumerate(run["curve"])]
    return model.eval(), {"epochs": hist, "best_dev_mrr": run["best"]["dev_mrr"], "seconds": time.perf_counter() - t0}


def dev_nll(model: LTMB, mats: dict, dev: pd.DataFrame, cands) -> float:
    """Mean negative log-likelihood of each dev positive's ``b`` under a softmax of the model's scores over
    ``cands`` (nats): the early-stopping tie-break that keeps improving after the dev MRR saturates at 1."""
    out = []
    for a, b in zip(dev["a"], dev["b"]):
        c = [x for x in cands if x != a]
        s = np.asarray(ltm_scores(model, mats, a, c), dtype=np.float64)
        m = s.max()
        out.append(float(m + np.log(np.exp(s - m).sum()) - s[c.index(b)]))
    return float(np.mean(out))


def ltm_scores(model: LTMB, mats: dict, a: str, cands) -> np.ndarray:
    """Logits (n,) float32 of document ``a`` against each of ``cands`` (ids), eval mode, no grad."""
    model.eval()
    n = model.cfg.max_segments
    with torch.no_grad():
        x, xm = pad([mats[a]] * len(cands), n)
        y, ym = pad([mats[c] for c in cands], n)
        return model(x, xm, y, ym).numpy().astype(np.float32)
