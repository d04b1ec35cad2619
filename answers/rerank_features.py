"""The cross-encoder's sentence scores as span features of the answer scorer (SPEC §9; the cascade of Wang, Lin
& Metzler 2011 with a learned second stage, Nogueira & Cho 2019, "Passage Re-ranking with BERT").

The answer stage's cascade keeps, per candidate document, the sentences the question's BM25 ranks first and the
one after each (:func:`answers.features.focus_sentences`); a cross-encoder (:class:`retrieval.cross_encoder.
CrossEncoder`, trained on question → answer sentence groups, :func:`retrieval.rerank_data.ncpqa_sentence_groups`)
scores exactly those sentences, and every span gets the score of the sentence it starts in as three features
(:data:`CE_FEATURES`), all relative within the question so that the scorer does not depend on the logits' scale:

- ``ce_rel``: the sentence's score minus the best scored sentence of the question's candidate documents;
- ``ce_doc_rel``: minus the best of its own document;
- ``ce_rank_log``: ``log1p`` of its rank among the question's scored sentences (0 = the best).

A span whose sentence was not scored (outside the focus: only in fitting, which reads every span) has NaN there,
which the trees route as missing.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

CE_FEATURES = ("ce_rel", "ce_doc_rel", "ce_rank_log")
Score = Callable[[str, Sequence[str]], np.ndarray]  # (question, sentences) -> (n,) scores, higher is better


def sentence_scores(question: str, docs: Sequence, score: Score, top: int = 3, after: int = 1) -> list[np.ndarray]:
    """Per candidate document (:class:`answers.features.DocCandidates`) a (n_sentences,) float64 array: ``score``
    of the question against each sentence of the cascade's focus (:func:`answers.features.focus_sentences` of the
    document's BM25 with ``top`` / ``after``; sentences that are questions excluded), NaN elsewhere. All the
    question's sentences go to ``score`` in one call.

    Raises:
        ValueError: ``score`` returned another number of scores than sentences."""
    from answers.features import focus_sentences

    picked, texts = [], []
    for d in docs:
        keep = np.flatnonzero(focus_sentences(d.bm, top, after) & ~d.entry.asks) if len(d.sentences) else []
        picked.append(keep)
        texts += [d.text[d.sentences[i][0]:d.sentences[i][1]] for i in keep]
    flat = np.asarray(score(question, texts), dtype=np.float64) if texts else np.zeros(0)
    if flat.shape != (len(texts),):
        raise ValueError(f"the sentence scorer returned {flat.shape} scores for {len(texts)} sentences")
    out, pos = [], 0
    for d, keep in zip(docs, picked):
        s = np.full(len(d.sentences), np.nan)
        s[keep] = flat[pos:pos + len(keep)]
        out.append(s)
        pos += len(keep)
    return out


def ce_matrix(docs: Sequence, scores: Sequence[np.ndarray]) -> np.ndarray:
    """(n_spans, |CE_FEATURES|) float32 for the spans of ``docs`` in order (each document's ``spans`` with their
    ``static`` rows, whose ``first`` column is the sentence a span starts in), from :func:`sentence_scores`."""
    from answers.features import STATIC

    first = STATIC.index("first")
    every = np.concatenate([s[~np.isnan(s)] for s in scores] or [np.zeros(0)])
    best = float(every.max()) if len(every) else math.nan
    ranked = np.sort(every)[::-1]
    rows = []
    for d, s in zip(docs, scores):
        have = s[~np.isnan(s)]
        d_best = float(have.max()) if len(have) else math.nan
        for row in d.static:
            v = s[int(row[first])] if len(s) else math.nan
            rank = float(np.searchsorted(-ranked, -v, side="left")) if not math.isnan(v) else math.nan
            rows.append((v - best, v - d_best, math.log1p(rank)))
    return np.asarray(rows, dtype=np.float32).reshape(-1, len(CE_FEATURES))
