"""Fitting the answer scorer (:mod:`answers.scorer`) from questions with gold answer spans (NCPQA): the
examples (:func:`build_examples`), the fit (:func:`fit_scorer`) and the whole fit on a question file over one
index version (:func:`fit_on_questions`: what ``flows.answer_eval --refit all`` saves and what the index stage
pins into a version when a question set is configured, SPEC §9)."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Callable

import numpy as np

from answers.answer import AnswerConfig, prepare, rank_answers
from answers.features import DOC_FEATURES, SPAN_FEATURES
from answers.metrics import char_f1, overlaps
from answers.scorer import AnswerScorer, LinearModel, TreeModel, zero_columns


def build_examples(questions, backend, store, cfg: AnswerConfig = AnswerConfig(), with_gold_doc: bool = True,
                   log: Callable[[str], None] = print, reranker=None) -> list[tuple]:
    """(row, Prepared) per question row (a namespace with question, doc_id, gold_start, gold_end, answer); the gold
    document is added to the candidates when retrieval missed it and ``with_gold_doc``. For fitting, pass a
    ``cfg`` with ``focus_sentences=0``: the ranker then learns from every span of a document (fitted on the
    cascade's focus alone it ranked worse: NCPQA 5-fold top-1 char-F1 0.422 against 0.439), and ranks the focus
    at serving time as it ranks everything (the same 5-fold figures). ``reranker``: an answer cross-encoder whose
    sentence scores end the span matrices (:mod:`answers.rerank_features`; see :func:`answers.answer.prepare`)."""
    from types import SimpleNamespace

    out = []
    for n, r in enumerate((SimpleNamespace(**rec) for rec in questions.to_dict("records")), 1):
        extra = r.doc_id if with_gold_doc and isinstance(r.doc_id, str) else None
        out.append((r, prepare(r.question.strip(), backend, store, cfg, extra_doc=extra,
                                cache=getattr(backend, "doc_cache", None), reranker=reranker)))
        if n % 100 == 0:
            log(f"  prepared {n}/{len(questions)} questions")
    return out


def fitting_examples(questions, backend, store, log: Callable[[str], None] = print) -> list[tuple]:
    """The fitting examples of ``questions`` (:func:`build_examples`): every span of a document
    (``focus_sentences=0``; serving scores the cascade's focus), the gold document added when retrieval missed
    it, with the sentence scores of the version's answer cross-encoder when it has one
    (``backend.answer_reranker``)."""
    return build_examples(questions, backend, store, replace(AnswerConfig(), focus_sentences=0),
                          with_gold_doc=True, log=log, reranker=getattr(backend, "answer_reranker", None))


def fit_on_questions(backend, path: str | os.PathLike, duplicates: dict[str, str] | None = None,
                     log: Callable[[str], None] = print) -> tuple[AnswerScorer, dict]:
    """A scorer fitted (:func:`fit_scorer`, default settings) on every usable question of the NCPQA-format
    file ``path`` over the index version of ``backend`` (:class:`answers.backend.SearchBackend`: its search,
    encoder, BM25 side and texts), with that version's provenance (:func:`answers.scorer.provenance`).

    A question is usable when its document (``doc_id``, the documents' ``external_id``; ``duplicates``: see
    :func:`answers.ncpqa.locate_gold`) is in the version's texts; the others are skipped and counted. Returns
    ``(scorer, figures)``: questions in the file, used, skipped (document not in the index), without a gold span
    in the cleaned text, fitted documents, the file's sha256, and the top-1 answer hit of the cross-fitted
    folds the calibration read (held out by document, :func:`fit_scorer`) and in sample.

    Raises:
        FileNotFoundError / ValueError: naming ``path``: no such file, not NCPQA JSON Lines, no usable question
            (none of its documents in the index), or nothing to learn from them.
    """
    from answers.ncpqa import load_questions, locate_gold
    from answers.scorer import provenance
    from retrieval.parts import version_identity
    from storage.hashing import file_sha256

    q = locate_gold(load_questions(path), backend.store, duplicates)
    usable = q[q["doc_id"].map(lambda d: isinstance(d, str))].reset_index(drop=True)
    if usable.empty:
        raise ValueError(f"question file {path}: none of its {len(q)} questions is about a document of index "
                         f"{backend.version} (doc_id against the documents' external_id): no usable question")
    figures = {"questions": int(len(q)), "used": int(len(usable)), "skipped_not_in_index": int(len(q) - len(usable)),
               "without_gold_span": int((usable["gold_start"] < 0).sum()), "file": Path(path).name,
               "sha256": file_sha256(path)}
    log(f"fitting the answer scorer on {len(usable)} questions of {path} ({figures['skipped_not_in_index']} "
        f"skipped: document not in index {backend.version})")
    ident = version_identity(backend.bundle.manifest)
    prov = provenance(backend.model_id, ident["segmenter"],
                      f"{len(usable)} questions (NCPQA format) of {Path(path).name} on "
                      f"{int(usable['doc_id'].nunique())} documents of index {backend.version}",
                      ident.get("answer_reranker") if getattr(backend, "answer_reranker", None) is not None else None)
    examples = fitting_examples(usable, backend, backend.store, log)
    try:
        scorer = fit_scorer(examples, info={"index_version": backend.version, "model_id": backend.model_id,
                                            "fitted_questions": len(examples), "provenance": prov})
    except ValueError as exc:
        raise ValueError(f"question file {path}: {exc}") from None
    hits = [bool(top) and is_hit(top[0], row) for row, prep in examples for top in [rank_answers(prep, scorer, 1)]]
    figures.update({"fitted_documents": len(scorer.info["fitted_documents"]),
                    "held_out_top1_hit": scorer.info.get("calibration_top1_hit"),
                    "in_sample_top1_hit": round(float(np.mean(hits)), 4) if hits else None})
    return scorer, figures


def span_target(prep, g: int, row) -> np.ndarray:
    """Soft targets of the spans of document ``g``: char-F1 with the answer where the span overlaps the gold
    span, else 0."""
    d = prep.docs[g]
    idx = np.flatnonzero(prep.span_doc == g)
    out = np.zeros(len(idx))
    if d.doc_id != row.doc_id or row.gold_start < 0:
        return out
    for k, i in enumerate(idx):
        sp = prep.spans[i]
        if overlaps(sp.start, sp.end, row.gold_start, row.gold_end):
            out[k] = char_f1(d.text[sp.start:sp.end], row.answer)
    return out


def fit_scorer(examples: list[tuple], c: float = 0.1, threshold: float = 0.3, info: dict | None = None,
               model: str = "ranker", grades: int = 10, calib_folds: int = 5,
               mbr_temperature: float = 0.25, ignore: tuple[str, ...] = ()) -> AnswerScorer:
    """Fit the document model (retrieved documents; label: the gold document; trees, or a logistic regression
    for ``linear``), the span model on the spans of each gold document (target :func:`span_target`) and the
    Platt calibration of the top answers' raw scores against "overlaps the gold span", all on ``examples``
    (from :func:`build_examples`). Span models: ``ranker`` (LambdaRank, relevance the target in ``grades``
    integer grades, questions whose gold span no candidate overlaps left out; ``combine="rank"``), ``trees``
    (a regression of the target; ``combine="product"``) or ``linear`` (inverse regularisation ``c``).

    The calibration reads the top answers of models that did not see the question: ``calib_folds``-fold
    cross-fitting by document (in-sample scores of boosted trees are overconfident); with fewer documents
    than folds, in-sample. ``mbr_temperature``: the softmax temperature of the minimum-Bayes-risk choice of
    each document's span (:mod:`answers.decode`; 0: the best-scored span; used by the ranker only). 0.25 was
    chosen by 3 × 5-fold cross-validation by document on NCPQA's training questions: against the argmax,
    hit@1 0.504 → 0.520 for char-F1 0.453 → 0.450 (0.5: 0.544 / 0.440); what it trades on the held-out folds is
    kept in ``info``, with ``fitted_documents``, the ids of the documents whose questions it was fitted on
    (:func:`answers.evaluate.evaluate_scorer` refuses to score questions about them). ``ignore``: features
    read as 0 in fitting and serving (:attr:`answers.scorer.AnswerScorer.ignores`;
    :data:`answers.features.ENCODER_FEATURES` fits an encoder-free scorer).

    Raises:
        ValueError: an unknown ``model``, the examples hold no positive document or span (nothing to learn), or
            ``linear`` on examples with the answer cross-encoder's features (NaN outside the focus).
    """
    if model not in ("ranker", "trees", "linear"):
        raise ValueError(f"model = {model!r}: 'ranker', 'trees' or 'linear'")
    examples = masked_examples(examples, tuple(ignore))
    doc, span, counts = _fit_models(examples, model, c, grades)
    combine = "rank" if model == "ranker" else "product"
    scorer = AnswerScorer(doc, span, threshold=threshold, info=dict(info or {}), combine=combine,
                          ignores=tuple(ignore))
    parts = _calibration_parts(examples, scorer, model, c, grades, calib_folds)
    if combine != "rank":  # the temperature is on the ranker's scale; the product's scores are in [0, 1]
        mbr_temperature = 0.0
    tops = {t: _held_out_top1(parts, t) for t in sorted({0.0, float(mbr_temperature)})}
    scorer.mbr_temperature = mbr_temperature
    levels = np.asarray([lv for lv, _, _ in tops[float(mbr_temperature)] if lv is not None])
    hit = np.asarray([h for lv, h, _ in tops[float(mbr_temperature)] if lv is not None])
    scorer.calib_a, scorer.calib_b = _platt(levels, hit)
    by_t = {str(t): {"hit@1": round(float(np.mean([h for _, h, _ in r])), 4) if r else None,
                     "char_f1": round(float(np.mean([f for _, _, f in r])), 4) if r else None} for t, r in tops.items()}
    scorer.info.update({"span_model": model, **counts, "calibration_top1_hit": float(np.mean(hit)) if len(hit) else None,
                        "held_out_top1_by_mbr_temperature": by_t,
                        "fitted_documents": sorted({row.doc_id for row, _ in examples if isinstance(row.doc_id, str)})})
    return scorer


def masked_examples(examples: list[tuple], ignore: tuple[str, ...]) -> list[tuple]:
    """``examples`` with the feature columns named in ``ignore`` set to 0 in each prepared question's document
    and span matrices (copies; ``examples`` itself when ``ignore`` is empty).

    Raises:
        ValueError: ``ignore`` names a feature neither matrix has."""
    if not ignore:
        return examples
    out = []
    for row, prep in examples:
        doc_names, span_names_ = DOC_FEATURES, span_names(prep.span_x.shape[1])
        unknown = sorted(set(ignore) - set(doc_names) - set(span_names_))
        if unknown:
            raise ValueError(f"ignore names features the scorer does not compute: {unknown}")
        out.append((row, replace(prep, doc_x=zero_columns(prep.doc_x, doc_names, ignore),
                                 span_x=zero_columns(prep.span_x, span_names_, ignore))))
    return out


def _held_out_top1(parts, temperature: float) -> list[tuple]:
    """(calibration level of the top answer or None without one, hit, char-F1) per held-out question of
    ``parts`` (from :func:`_calibration_parts`), each answered by the scorer that did not see it under the
    minimum-Bayes-risk ``temperature`` (:mod:`answers.decode`): the Platt scaling reads the levels, the scorer's
    info what each temperature trades."""
    out = []
    for part, scored_by in parts:
        scored_by = replace(scored_by, mbr_temperature=temperature)
        for row, prep in part:
            top = rank_answers(prep, scored_by, 1)
            out.append((scored_by.level(top[0]["raw_score"]), float(is_hit(top[0], row)),
                        char_f1(top[0]["text"], row.answer)) if top else (None, 0.0, 0.0))
    return out


def _fit_models(examples: list[tuple], model: str, c: float, grades: int):
    """(document model, span model, row counts) fitted on ``examples`` (see :func:`fit_scorer`)."""
    dx, dy, sx, sy = [], [], [], []
    for row, prep in examples:
        for g, d in enumerate(prep.docs):
            if not d.extra:
                dx.append(prep.doc_x[g])
                dy.append(float(d.doc_id == row.doc_id))
            if d.doc_id == row.doc_id and row.gold_start >= 0:
                order = _text_order(prep, g)
                sx.append(prep.span_x[prep.span_doc == g][order])
                sy.append(span_target(prep, g, row)[order])
    if not sum(dy) or not len(sx):
        raise ValueError("no training question has its document retrieved: nothing to learn")
    names = span_names(sx[0].shape[1])
    if model == "linear" and np.isnan(np.vstack(sx)).any():
        raise ValueError("the linear span model cannot read the answer cross-encoder's features (NaN outside "
                         "the cascade's focus): use 'ranker' or 'trees'")
    if model == "linear":
        return (LinearModel.fit(DOC_FEATURES, np.asarray(dx), np.asarray(dy), c),
                LinearModel.fit(names, np.vstack(sx), np.concatenate(sy), c), {})
    doc = TreeModel.fit(DOC_FEATURES, np.asarray(dx), np.asarray(dy), classifier=True)
    if model == "trees":
        span = TreeModel.fit(names, np.vstack(sx), np.concatenate(sy), classifier=False)
    else:
        keep = [i for i, y in enumerate(sy) if y.max() > 0]
        if not keep:
            raise ValueError("no candidate span overlaps a gold span: nothing to rank")
        span = TreeModel.fit_ranker(names, np.vstack([sx[i] for i in keep]),
                                    np.concatenate([np.rint(sy[i] * grades) for i in keep]),
                                    [len(sy[i]) for i in keep])
    return doc, span, {"doc_rows": len(dy), "doc_positives": int(sum(dy)), "span_rows": int(sum(map(len, sy)))}


def span_names(width: int) -> tuple[str, ...]:
    """The span features of a span matrix ``width`` columns wide: :data:`answers.features.SPAN_FEATURES`, then
    :data:`answers.rerank_features.CE_FEATURES` when the answer cross-encoder's scores were appended.

    Raises:
        ValueError: any other width."""
    from answers.rerank_features import CE_FEATURES

    for names in (SPAN_FEATURES, SPAN_FEATURES + CE_FEATURES):
        if width == len(names):
            return names
    raise ValueError(f"a span matrix of {width} columns: expected {len(SPAN_FEATURES)} or "
                     f"{len(SPAN_FEATURES) + len(CE_FEATURES)} (with the answer cross-encoder's)")


def _text_order(prep, g: int) -> np.ndarray:
    """The spans of document ``g`` in text order (start, end, kind): LambdaRank starts from all-equal scores
    and breaks their ties by row order, so rows in the order the candidates happened to be generated made the
    fitted ranker depend on it (three orders of the same NCPQA rows: 5-fold hit@1 0.47–0.51)."""
    idx = np.flatnonzero(prep.span_doc == g)
    sp = [prep.spans[i] for i in idx]
    return np.lexsort(([s.kind for s in sp], [s.end for s in sp], [s.start for s in sp]))


def _calibration_parts(examples, scorer, model, c, grades, folds):
    """(held-out examples, scorer fitted without them) per fold by document; [(examples, scorer)] when there
    are fewer documents than folds or a fold's remainder cannot be fitted."""
    docs = sorted({str(row.doc_id) for row, _ in examples})
    if folds < 2 or len(docs) < folds:
        return [(examples, scorer)]
    fold_of = {d: i % folds for i, d in enumerate(np.random.default_rng(0).permutation(docs))}
    parts = []
    for k in range(folds):
        held = [e for e in examples if fold_of[str(e[0].doc_id)] == k]
        try:
            doc, span, _ = _fit_models([e for e in examples if fold_of[str(e[0].doc_id)] != k], model, c, grades)
        except ValueError:
            return [(examples, scorer)]
        parts.append((held, AnswerScorer(doc, span, combine=scorer.combine, ignores=scorer.ignores)))
    return parts


def is_hit(ans: dict, row) -> bool:
    """Whether an answer dict overlaps the row's gold span in its gold document."""
    return ans["doc_id"] == row.doc_id and row.gold_start >= 0 and overlaps(ans["start"], ans["end"], row.gold_start,
                                                                            row.gold_end)


def _platt(level: np.ndarray, hit: np.ndarray) -> tuple[float, float]:
    """(a, b) of P(hit) = sigmoid(a·level + b) (Platt 1999), by logistic regression, ``level`` the raw scores
    as :meth:`AnswerScorer.calibrate` reads them; (1, 0) when the labels hold one class."""
    from sklearn.linear_model import LogisticRegression

    if len(set(hit.tolist())) < 2:
        return 1.0, 0.0
    lr = LogisticRegression(C=100.0).fit(np.asarray(level, dtype=np.float64)[:, None], hit)
    return float(lr.coef_[0, 0]), float(lr.intercept_[0])
