"""Training LTM-B (SPEC §12) on labelled pairs over document matrices, on CPU, with dev-based early stopping.

Each epoch trains on the pair file's ``train`` pairs (label 0/1, binary cross-entropy: match / no match) plus,
for every positive, ``random_negatives`` fresh negatives drawn from the train split's own ``b`` documents (never a
known positive of that ``a``). After each epoch the dev positives' ``b`` is ranked among ``dev_candidates``
(default: every ``b`` of the dev split) and the epoch with the best dev MRR is kept; training stops after
``patience`` epochs without improvement, after ``epochs``, or past ``max_seconds``.
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from docmatch.ltm import LTMB, LTMConfig, pad
from docmatch.ranking import rank_metrics


@dataclass(frozen=True)
class TrainConfig:
    """seed; epochs (most); lr, weight_decay (AdamW); batch_size (pairs); random_negatives per positive per
    epoch; patience (epochs without a better dev MRR); max_seconds (wall budget); threads (torch CPU threads)."""

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
    """This epoch's ``(a, b, label)``: the train pairs plus ``k`` random in-split negatives per positive."""
    train = pairs[pairs["split"] == "train"]
    pool = sorted(set(train["b"]))
    known = set(zip(train.loc[train["label"] == 1, "a"], train.loc[train["label"] == 1, "b"]))
    out = list(zip(train["a"], train["b"], train["label"].astype(int)))
    for a in train.loc[train["label"] == 1, "a"]:
        negs = [b for b in rng.sample(pool, min(len(pool), k + 2)) if (a, b) not in known]
        out += [(a, b, 0) for b in negs[:k]]
    rng.shuffle(out)
    return out


def train_ltm(pairs: pd.DataFrame, mats: dict, cfg: LTMConfig, tcfg: TrainConfig = TrainConfig(),
              dev_candidates=None, log=print) -> tuple[LTMB, dict]:
    """Train LTM-B (module docstring) on ``pairs`` (columns ``a, b, label, split``) over ``mats`` (id ->
    float32 (rows, dim)). Returns the best-dev model (eval mode) and the history (per-epoch dev MRR, seconds).

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
    torch.set_num_threads(tcfg.threads)
    torch.manual_seed(tcfg.seed)
    rng, model = random.Random(tcfg.seed), LTMB(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=tcfg.lr, weight_decay=tcfg.weight_decay)
    best, best_nll, best_state, hist, t0, stale = -1.0, float("inf"), None, [], time.perf_counter(), 0
    for epoch in range(tcfg.epochs):
        loss = _epoch(model, opt, epoch_pairs(pairs, rng, tcfg.random_negatives), mats, tcfg.batch_size)
        mrr = rank_metrics(lambda a, c: ltm_scores(model, mats, a, c), dev, cands)["mrr"]
        nll = dev_nll(model, mats, dev, cands)
        hist.append({"epoch": epoch, "loss": loss, "dev_mrr": mrr, "dev_nll": nll, "seconds": time.perf_counter() - t0})
        log(f"epoch {epoch}: loss {loss:.4f} dev MRR {mrr:.4f} dev NLL {nll:.4f}")
        if (round(mrr, 9), -nll) > (round(best, 9), -best_nll):  # a saturated MRR still selects by NLL
            best, best_nll, stale = mrr, nll, 0
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        else:
            stale += 1
        if stale >= tcfg.patience or time.perf_counter() - t0 > tcfg.max_seconds:
            break
    model.load_state_dict(best_state)
    return model.eval(), {"epochs": hist, "best_dev_mrr": best, "seconds": time.perf_counter() - t0}


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


def _epoch(model: LTMB, opt, items, mats: dict, batch_size: int) -> float:
    """One pass over ``items`` ``(a, b, label)``; returns the mean loss."""
    model.train()
    losses, n = [], model.cfg.max_segments
    bce = torch.nn.BCEWithLogitsLoss()
    for i in range(0, len(items), batch_size):
        chunk = items[i:i + batch_size]
        a, am = pad([mats[x[0]] for x in chunk], n)
        b, bm = pad([mats[x[1]] for x in chunk], n)
        y = torch.tensor([float(x[2]) for x in chunk])
        loss = bce(model(a, am, b, bm), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return float(np.mean(losses))


def ltm_scores(model: LTMB, mats: dict, a: str, cands) -> np.ndarray:
    """Logits (n,) float32 of document ``a`` against each of ``cands`` (ids), eval mode, no grad."""
    model.eval()
    n = model.cfg.max_segments
    with torch.no_grad():
        x, xm = pad([mats[a]] * len(cands), n)
        y, ym = pad([mats[c] for c in cands], n)
        return model(x, xm, y, ym).numpy().astype(np.float32)
