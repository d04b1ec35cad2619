"""Choosing the answer span from the ranker's scores (SPEC §9): minimum-Bayes-risk decoding.

The ranker scores many overlapping candidates of one document (a sentence, its clauses, runs of them, the
window around it, the stretch between the question's echoes). Its single best span is often a near-miss in
extent while the mass of high-scoring spans agrees on a core. Minimum-Bayes-risk decoding (Kumar & Byrne
2004; for extractive QA, the expected-F1 span choice of the SQuAD literature) picks the candidate with the
highest expected char-F1 against the others, each weighted by ``softmax(score / temperature)``:

    choice = argmax_i  sum_j p_j · F1(span_i, span_j)

F1 of two spans of one document is that of their character ranges (overlap / mean length: the char-F1 of
:mod:`answers.metrics` when the overlap's characters are the shared ones). A temperature of 0 is the plain
argmax. The temperature is fitted on held-out folds of the training questions (:func:`answers.fit.fit_scorer`).
"""
from __future__ import annotations

import numpy as np


def range_f1(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """(n, n) char-F1 of every pair of half-open character ranges ``[starts[i], ends[i])`` of one text:
    ``2·overlap / (len_i + len_j)``; 0 for disjoint or empty ranges."""
    s, e = np.asarray(starts, dtype=np.float64), np.asarray(ends, dtype=np.float64)
    ov = np.clip(np.minimum(e[:, None], e[None, :]) - np.maximum(s[:, None], s[None, :]), 0.0, None)
    tot = (e - s)[:, None] + (e - s)[None, :]
    return np.divide(2.0 * ov, tot, out=np.zeros_like(ov), where=tot > 0)


def mbr_choice(starts, ends, scores, temperature: float, top_n: int = 40) -> int:
    """Index (into the inputs) of the minimum-Bayes-risk span among candidates of one document.

    Args:
        starts, ends: (n,) char offsets of the candidates (end exclusive).
        scores: (n,) ranking scores (higher is better; only differences matter).
        temperature: softmax temperature of the scores (> 0); 0 or less: the argmax of ``scores``.
        top_n: only the ``top_n`` best-scored candidates take part (as hypotheses and as evidence).

    Raises:
        ValueError: empty or mismatched inputs.
    """
    scores = np.asarray(scores, dtype=np.float64)
    if not len(scores) or len(starts) != len(scores) or len(ends) != len(scores):
        raise ValueError(f"{len(starts)} starts, {len(ends)} ends and {len(scores)} scores: need equal, non-zero")
    best = int(np.argmax(scores))
    if temperature <= 0 or len(scores) == 1:
        return best
    top = np.argsort(-scores, kind="stable")[:top_n]
    z = (scores[top] - scores[top[0]]) / temperature
    p = np.exp(z)
    p /= p.sum()
    gain = range_f1(np.asarray(starts)[top], np.asarray(ends)[top]) @ p
    return int(top[int(np.argmax(gain))])
