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


def set_metrics(score: Callable[[str, list[str]], np.ndarray], queries: dict, cands: Sequence[str],
                k: int = 10) -> dict:
    """Ranking with several relevant documents per query (a law's implementing regulations): ``queries`` maps
    a query id to its set of relevant candidate ids; ``score(q, cands) -> (len(cands),)``. Returns the means
    over queries of recall@k (share of the relevant ranked in the first ``k``), MRR (first relevant) and
    average precision (MAP), ties counting against the relevant (each relevant ranked as by
    :func:`gold_rank` among the irrelevant; a relevant outside ``cands`` ranks last), and ``queries``.

    Raises:
        ValueError: a query with no relevant document.
    """
    rec, rr, ap = [], [], []
    for q, rel in queries.items():
        if not rel:
            raise ValueError(f"query {q!r} has no relevant document")
        s, c = _own_out(score, q, cands)
        pos = {x: i for i, x in enumerate(c)}
        irr = np.asarray([s[i] for i, x in enumerate(c) if x not in rel])
        ranks = sorted(1 + int(np.sum(irr >= s[pos[r]])) if r in pos else len(c) + 1 for r in rel)
        ranks = [r + j for j, r in enumerate(ranks)]  # the relevant above it count too
        rec.append(np.mean([r <= k for r in ranks]))
        rr.append(1 / ranks[0])
        ap.append(np.mean([(j + 1) / r for j, r in enumerate(ranks)]))
    return {f"recall@{k}": float(np.mean(rec)), "mrr": float(np.mean(rr)), "map": float(np.mean(ap)),
            "queries": len(queries)}


def rerank(first, second, k: int):
    """A scorer taking ``first``'s top ``k`` in ``second``'s order above the rest in ``first``'s order."""
    def score(a, c):
        s1 = np.asarray(first(a, c), dtype=np.float64)
        top = np.argsort(-s1, kind="stable")[:k]
        out = s1 - s1.max() - 1.0  # everything below the re-ranked ones
        s2 = np.asarray(second(a, [c[i] for i in top]), dtype=np.float64)
        out[top] = s2 - s2.min() + 1.0
        return out
    return score
