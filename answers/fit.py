"""Fitting the answer scorer (:mod:`answers.scorer`) from questions with gold answer spans (NCPQA)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from answers.answer import AnswerConfig, prepare, rank_answers
from answers.features import DOC_FEATURES, SPAN_FEATURES
from answers.metrics import char_f1, overlaps
from answers.scorer import AnswerScorer, LinearModel, TreeModel


def build_examples(questions, backend, store, cfg: AnswerConfig = AnswerConfig(), with_gold_doc: bool = True,
                   log: Callable[[str], None] = print) -> list[tuple]:
    """(row, Prepared) per question row (a namespace with question, doc_id, gold_start, gold_end, answer); the gold
    document is added to the candidates when retrieval missed it and ``with_gold_doc``."""
    from types import SimpleNamespace

    out = []
    for n, r in enumerate((SimpleNamespace(**rec) for rec in questions.to_dict("records")), 1):
        extra = r.doc_id if with_gold_doc and isinstance(r.doc_id, str) else None
        out.append((r, prepare(r.question.strip(), backend, store, cfg, extra_doc=extra)))
        if n % 100 == 0:
            log(f"  prepared {n}/{len(questions)} questions")
    return out


def span_target(prep, g: int, row) -> np.ndarray:
    """Soft targets of the spans of document ``g``: char-F1 with the answer where the span overlaps the gold
    span, else 0."""
    d = prep.docs[g]
    idx = np.flatnonzero(prep.span_doc == g)
    out = np.zeros(len(idx))
    if d["doc_id"] != row.doc_id or row.gold_start < 0:
        return out
    for k, i in enumerate(idx):
        sp = prep.spans[i]
        if overlaps(sp.start, sp.end, row.gold_start, row.gold_end):
            out[k] = char_f1(d["text"][sp.start:sp.end], row.answer)
    return out


def fit_scorer(examples: list[tuple], c: float = 0.1, threshold: float = 0.3, info: dict | None = None,
               model: str = "trees") -> AnswerScorer:
    """Fit the document model (retrieved documents; label: the gold document), the span model (spans of
    the gold document; target :func:`span_target`), both ``trees`` (:class:`~answers.scorer.TreeModel`) or
    ``linear`` (:class:`~answers.scorer.LinearModel`, inverse regularisation ``c``), and the Platt
    calibration of the top answers' raw scores against "overlaps the gold span", all on ``examples`` (from
    :func:`build_examples`).

    Raises:
        ValueError: the examples hold no positive document or span (nothing to learn).
    """
    dx, dy, sx, sy = [], [], [], []
    for row, prep in examples:
        for g, d in enumerate(prep.docs):
            if not d.get("extra"):
                dx.append(prep.doc_x[g])
                dy.append(float(d["doc_id"] == row.doc_id))
            if d["doc_id"] == row.doc_id and row.gold_start >= 0:
                sx.append(prep.span_x[prep.span_doc == g])
                sy.append(span_target(prep, g, row))
    if not sum(dy) or not len(sx):
        raise ValueError("no training question has its document retrieved: nothing to learn")
    if model == "trees":
        doc = TreeModel.fit(DOC_FEATURES, np.asarray(dx), np.asarray(dy), classifier=True)
        span = TreeModel.fit(SPAN_FEATURES, np.vstack(sx), np.concatenate(sy), classifier=False)
    else:
        doc = LinearModel.fit(DOC_FEATURES, np.asarray(dx), np.asarray(dy), c)
        span = LinearModel.fit(SPAN_FEATURES, np.vstack(sx), np.concatenate(sy), c)
    scorer = AnswerScorer(doc, span, threshold=threshold, info=dict(info or {}))
    raw, hit = [], []
    for row, prep in examples:
        top = rank_answers(prep, scorer, 1)
        if top:
            raw.append(top[0]["raw_score"])
            hit.append(float(is_hit(top[0], row)))
    a, b = _platt(np.asarray(raw), np.asarray(hit))
    scorer.calib_a, scorer.calib_b = a, b
    scorer.info.update({"doc_rows": len(dy), "doc_positives": int(sum(dy)), "span_rows": int(sum(map(len, sy))),
                        "train_top1_hit": float(np.mean(hit)) if hit else None})
    return scorer


def is_hit(ans: dict, row) -> bool:
    """Whether an answer dict overlaps the row's gold span in its gold document."""
    return ans["doc_id"] == row.doc_id and row.gold_start >= 0 and overlaps(ans["start"], ans["end"], row.gold_start,
                                                                            row.gold_end)


def _platt(raw: np.ndarray, hit: np.ndarray) -> tuple[float, float]:
    """(a, b) of P(hit) = sigmoid(a·logit(raw) + b) (Platt 1999), by logistic regression; (1, 0) when the
    labels hold one class."""
    from sklearn.linear_model import LogisticRegression

    if len(set(hit.tolist())) < 2:
        return 1.0, 0.0
    r = np.clip(raw, 1e-9, 1 - 1e-9)
    lr = LogisticRegression(C=100.0).fit(np.log(r / (1 - r))[:, None], hit)
    return float(lr.coef_[0, 0]), float(lr.intercept_[0])
