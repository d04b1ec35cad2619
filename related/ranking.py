"""Ranking evaluation of related-document scorers (SPEC §12): each query document's related document (its
parent) ranked among a candidate pool; recall@1 and MRR."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pandas as pd


def gold_rank(scores: np.ndarray, cands: Sequence[str], gold: str) -> int:
    """1-based rank of ``gold`` in ``cands`` by ``scores`` (higher first); a tie counts against the gold
    (rank = 1 + candidates scoring at least as high, the gold excluded); ``len(cands) + 1`` when the gold is
    not a candidate."""
    cands = list(cands)
    if gold not in cands:
        return len(cands) + 1
    g = scores[cands.index(gold)]
    return 1 + int(np.sum(scores >= g)) - 1


def rank_metrics(score: Callable[[str, list[str]], np.ndarray], positives: pd.DataFrame,
                 cands: Sequence[str]) -> dict:
    """recall@1, MRR and the number of queries for the positive pairs ``positives`` (``a`` query, ``b`` gold)
    with ``score(a, cands) -> (len(cands),)``; a query's own id is never its candidate."""
    ranks = [gold_rank(*_own_out(score, a, cands), b) for a, b in zip(positives["a"], positives["b"])]
    r = np.asarray(ranks, dtype=np.float64)
    return {"recall@1": float(np.mean(r == 1)) if len(r) else 0.0, "mrr": float(np.mean(1 / r)) if len(r) else 0.0,
            "queries": int(len(r))}


def _own_out(score, a: str, cands: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    c = [x for x in cands if x != a]
    return np.asarray(score(a, c), dtype=np.float64), c
