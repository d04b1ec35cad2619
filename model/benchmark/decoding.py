"""Constrained decoding of tag sequences (SPEC §10, token tasks): the best sequence of a token classifier's
per-token log-probabilities that obeys the tag scheme, by Viterbi over allowed transitions with no learned
transition scores (the ``allowed_transitions`` rule of AllenNLP's CRF tagger, applied at prediction time only;
Lample et al. 2016, "Neural Architectures for Named Entity Recognition", for the CRF that learns them).

- ``bio`` (NER): ``I-X`` only after ``B-X`` or ``I-X``, and never first in a sentence;
- ``bmes`` (CWS): ``B``/``M`` are followed by ``M``/``E``, ``E``/``S`` by ``B``/``S``; a sentence starts with
  ``B``/``S`` and ends with ``E``/``S``;
- ``first`` (POS and other flat tag sets): every sequence is allowed, so decoding is the per-token argmax.

A window that starts inside a sentence (long sentences are cut into windows) is decoded without the start
rule.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from model.benchmark.metrics import tag_scheme


def _follows(prev: str, cur: str, scheme: str) -> bool:
    if scheme == "bio":
        return not cur.startswith("I-") or prev in (cur, "B-" + cur[2:])
    if scheme == "bmes":
        return (cur in ("M", "E")) == (prev in ("B", "M"))
    return True


def allowed_transitions(labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(start, trans, end)`` boolean masks of the labels' scheme (:func:`model.benchmark.metrics.tag_scheme`):
    ``start (L,)`` tags a sentence may start with, ``trans (L, L)`` ``[prev, cur]`` allowed successions,
    ``end (L,)`` tags a sentence may end with."""
    scheme = tag_scheme(labels)
    trans = np.array([[_follows(p, c, scheme) for c in labels] for p in labels], dtype=bool)
    start = np.array([not (t.startswith("I-") if scheme == "bio" else scheme == "bmes" and t in ("M", "E"))
                      for t in labels], dtype=bool)
    end = np.array([not (scheme == "bmes" and t in ("B", "M")) for t in labels], dtype=bool)
    return start, trans, end


def viterbi(log_probs: np.ndarray, trans: np.ndarray, start: np.ndarray | None = None,
            end: np.ndarray | None = None) -> list[int]:
    """The label ids of the highest-scoring sequence (sum of ``log_probs``) whose successive tags ``trans``
    allows, starting in ``start`` and ending in ``end`` (None: any tag).

    Args:
        log_probs: ``(n, L)`` per-position log-probabilities; n may be 0.
        trans: ``(L, L)`` boolean ``[prev, cur]``.

    Raises:
        ValueError: no sequence satisfies the masks (a scheme whose masks leave nothing).
    """
    n, n_labels = log_probs.shape
    if n == 0:
        return []
    forbid = np.where(trans, 0.0, -np.inf)
    score = log_probs[0] + (0.0 if start is None else np.where(start, 0.0, -np.inf))
    back = np.zeros((n, n_labels), dtype=np.int64)
    for i in range(1, n):
        cand = score[:, None] + forbid  # (prev, cur)
        back[i] = cand.argmax(0)
        score = cand.max(0) + log_probs[i]
    if end is not None:
        score = score + np.where(end, 0.0, -np.inf)
    if not np.isfinite(score.max()):
        raise ValueError("no tag sequence satisfies the scheme's transitions")
    path = [int(score.argmax())]
    for i in range(n - 1, 0, -1):
        path.append(int(back[i, path[-1]]))
    return path[::-1]


def decode_window(log_probs: np.ndarray, example: dict,
                  masks: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[int]:
    """The constrained label ids of one window's tokens (``[CLS]`` excluded, ``example["n_tokens"]`` or ``["n"]``
    of them), ``masks`` the labels' :func:`allowed_transitions` (computed once per prediction run): tokens that
    cover no char (a bare ``▁`` piece) keep their argmax and are skipped by the chain; the sentence's start rule
    applies when the window starts at its first char; the end rule is not applied (a window cut inside a
    sentence may end inside a word)."""
    n = example.get("n_tokens", example["n"])
    ids = log_probs[:n].argmax(-1).tolist()
    spans = example.get("token_spans")
    keep = [i for i in range(n) if spans is None or spans[i][1] > spans[i][0]]
    start, trans, _ = masks
    for i, p in zip(keep, viterbi(log_probs[keep], trans, start if example["start"] == 0 else None)):
        ids[i] = p
    return ids


__all__ = ["allowed_transitions", "decode_window", "viterbi"]
