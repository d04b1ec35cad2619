"""Cross-validation by law for the related-documents evaluation (SPEC §12: split by law, no law on both sides).

Every law of the corpus gets one of ``k`` folds (:func:`law_folds`): the laws that have title-pattern
regulations (:func:`docmatch.pairs.parents`) are dealt, in a seeded order and largest first, to the fold with the
fewest regulations so far (folds of near-equal query counts); the other laws round-robin. A regulation follows
its parent law. Fold ``f`` (:func:`fold_pairs`) tests the regulations of fold ``f``'s laws; the other folds'
laws are split train / dev (a seeded ``dev`` share of them, dev carved from the training folds), with
negatives drawn as :func:`docmatch.pairs.derive_pairs` draws them (same category, then same level) from the
pair's own split only. Over the ``k`` folds every regulation is a test query exactly once.

The reverse direction's pool (:func:`reverse_pool`): every title-pattern regulation plus the first ``n`` of a
seeded shuffle of the corpus's other regulations (levels :data:`REGULATION_LEVELS`), which implement no law by
title.
"""
from __future__ import annotations

import random

import pandas as pd

from docmatch.pairs import LAW_LEVEL, PairConfig, parents

REGULATION_LEVELS = ("地方性法规", "行政法规", "部门规章")


def law_folds(laws: pd.DataFrame, pos: pd.DataFrame, k: int, seed: int) -> dict[str, int]:
    """law id -> fold in ``0..k-1`` (module docstring). ``laws``: ``id`` column; ``pos``: ``a, b`` (b a law id).

    Raises:
        ValueError: ``k`` < 2 or more folds than laws with regulations.
    """
    counts = pos.groupby("b").size()
    if k < 2 or k > len(counts):
        raise ValueError(f"folds must be in 2..{len(counts)} (laws with regulations), got {k}")
    rng = random.Random(seed)
    parents_ = sorted(counts.index)
    rng.shuffle(parents_)
    parents_.sort(key=lambda b: -int(counts[b]))  # stable: seeded order within equal counts
    load, out = [0] * k, {}
    for b in parents_:
        f = min(range(k), key=lambda i: (load[i], i))
        out[b], load[f] = f, load[f] + int(counts[b])
    rest = sorted(set(laws["id"]) - set(out))
    rng.shuffle(rest)
    out.update({b: i % k for i, b in enumerate(rest)})
    return out


def fold_pairs(corpus: pd.DataFrame, folds: dict[str, int], fold: int, cfg: PairConfig = PairConfig()
               ) -> pd.DataFrame:
    """Pairs ``a, b, label, split, kind, law`` for fold ``fold``: its laws' regulations are ``test``; the
    other laws ``dev`` (a seeded ``cfg.dev`` share of them) or ``train``; negatives per positive from the
    pair's own split (``cfg.category_negatives`` of the parent's category, ``cfg.level_negatives`` others)."""
    laws = corpus[corpus["level"] == LAW_LEVEL]
    rest = sorted(i for i, f in folds.items() if f != fold)
    rng = random.Random(cfg.seed * 1000 + fold)
    dev = set(rng.sample(rest, round(len(rest) * cfg.dev)))
    split = {i: "test" if folds[i] == fold else "dev" if i in dev else "train" for i in laws["id"]}
    laws = laws.assign(split=laws["id"].map(split))
    cat, title = dict(zip(laws["id"], laws["category"])), dict(zip(laws["id"], laws["title"]))
    rows = []
    for r in parents(corpus).itertuples(index=False):
        s = split[r.b]
        pool = laws[(laws["split"] == s) & (laws["id"] != r.b)]
        hard = sorted(pool.loc[pool["category"] == cat[r.b], "id"])
        picked = rng.sample(hard, min(cfg.category_negatives, len(hard)))
        level = rng.sample(sorted(set(pool["id"]) - set(picked)), min(cfg.level_negatives, len(pool) - len(picked)))
        rows.append((r.a, r.b, 1, s, "parent", title[r.b]))
        rows += [(r.a, b, 0, s, kd, title[r.b]) for b, kd in
                 [(b, "category") for b in picked] + [(b, "level") for b in level]]
    return pd.DataFrame(rows, columns=["a", "b", "label", "split", "kind", "law"])


def reverse_pool(corpus: pd.DataFrame, others: int, seed: int = 13) -> list[str]:
    """Candidate regulation ids for the reverse direction (module docstring): every title-pattern regulation
    plus the first ``others`` of the seeded shuffle of the sorted ids of the other regulations."""
    pat = set(parents(corpus)["a"])
    rest = sorted(corpus.loc[corpus["level"].isin(REGULATION_LEVELS) & ~corpus["id"].isin(pat), "id"])
    random.Random(seed).shuffle(rest)
    return sorted(pat) + rest[:others]
