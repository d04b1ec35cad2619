"""Fit and evaluate the answer stage on the shared NCPQA questions (SPEC §9), no Prefect:

    python -m flows.pipeline --input ../shared/qa/ncpqa_docs.jsonl --id-column doc_id --title-column title \\
        --data-dir data-ncpqa            # the 599 documents through the pipeline (any profile)
    python -m flows.answer_eval --data-dir data-ncpqa [--questions ../shared/qa/ncpqa_questions.jsonl]
        [--test-share 0.3 --seed 13] [--install] [--cv SEEDS] [--refit all|train] [--encoder-free]

The questions are split by document (seeded): a scorer is fitted on the questions of 70 % of the documents
and every figure is measured on the questions of the other 30 %, beside the baselines "BM25 over all
sentences" and "first sentence of the top BM25 chunk", the earlier pointwise span model and the ceiling of the
candidates; with ``--cv``, first repeated 5-fold cross-validation by document on the training questions alone
(the figures settings are chosen by). Written to ``DATA/eval/answers/answer_eval.json`` and printed.

The scorer saved as ``DATA/eval/answers/scorer.json`` (``--install``: also as the scorer the repository ships,
``answers/data/scorer.json``, which every index version installs when its encoder and segmenter are the ones
recorded in the scorer's ``info.provenance``; a data dir uses another one with
``--set answer_scorer=FILE`` on its next pipeline run, or has the pipeline fit one on its own index with
``--set answer_questions=FILE``: :func:`answers.fit.fit_on_questions`, the fit of ``--refit all``) is refitted, same settings, on every question (``--refit all``, the default: what scikit-learn's
``refit`` does after model selection; on NCPQA, 5-fold cross-validation by document over all questions gives the
refit's ~40 % more questions +1–2 points of char-F1, see README); ``--refit train`` saves the 70 % fit itself. The
saved scorer lists the documents it was fitted on (``info["fitted_documents"]``), and
:func:`answers.evaluate.evaluate_scorer` refuses to score questions about them.

``--encoder-free`` fits every model with :data:`answers.features.ENCODER_FEATURES` read as 0 and a provenance that
names no encoder (``scorer-encoder-free.json``; ``--install``: :data:`SHIPPED_ENCODER_FREE`, the scorer a version
of any other encoder installs, ``PipelineConfig.answer_scorer_fallback``); its report is ``answer_eval-encoder-free.json``.
"""
from __future__ import annotations

import argparse
import json
from dataclasses import replace
import sys
import time
from pathlib import Path

SHIPPED = Path(__file__).resolve().parent.parent / "answers" / "data" / "scorer.json"  # PipelineConfig.answer_scorer
# PipelineConfig.answer_scorer_fallback: the encoder-free scorer (--encoder-free), installed where SHIPPED is refused
SHIPPED_ENCODER_FREE = SHIPPED.with_name("scorer-encoder-free.json")
DEFAULT_QUESTIONS = str(Path(__file__).resolve().parent.parent.parent / "shared" / "qa" / "ncpqa_questions.jsonl")


def prepare_sets(data_dir: str, questions: str, test_share: float, seed: int, log=print,
                 version: str | None = None):
    """(backend, store, questions frame with gold and split, train examples with the gold document added,
    test examples as a user would get them), over index ``version`` (default the serving one)."""
    from answers.answer import AnswerConfig
    from answers.backend import SearchBackend
    from answers.fit import build_examples
    from answers.ncpqa import duplicate_targets
    from evaluation.sets import NcpqaLoader

    cfg = AnswerConfig()
    backend = SearchBackend(Path(data_dir) / "index", version)
    store = backend.store  # the texts the index version's offsets point into
    q = NcpqaLoader(questions).load(store, duplicate_targets(data_dir), test_share, seed).splits["all"]
    train, test = q[q["split"] == "train"], q[q["split"] == "test"]
    log(f"{len(q)} questions: {len(train)} train / {len(test)} test (split by document, seed {seed}); gold "
        f"documents {q['gold_via'].value_counts().to_dict()}; {int((q['gold_start'] < 0).sum())} without a gold "
        f"span in the cleaned text")
    tr = fit_examples(train, backend, store, log)
    te = build_examples(test, backend, store, cfg, with_gold_doc=False, log=log, reranker=backend.answer_reranker)
    return backend, store, q, tr, te


def fit_examples(questions, backend, store, log=print) -> list[tuple]:
    """The fitting examples of ``questions`` (:func:`answers.fit.fitting_examples`, as the index stage fits its
    scorer)."""
    from answers.fit import fitting_examples

    return fitting_examples(questions, backend, store, log)


def fit_and_report(data_dir: str, backend, store, q, tr, te, seed: int, test_share: float, install: bool,
                   log=print, cv: dict | None = None, refit: list | None = None, encoder_free: bool = False) -> dict:
    """Fit on ``tr``, score ``te`` beside the baselines, write the report; save the scorer fitted on ``tr``, or,
    given ``refit`` (the test questions' fitting examples), the one refitted on ``tr + refit``.
    ``encoder_free``: every fit reads :data:`answers.features.ENCODER_FEATURES` as 0 and its provenance pins no
    encoder (saved as ``scorer-encoder-free.json``; :data:`SHIPPED_ENCODER_FREE` with ``install``). Returns the
    report."""
    import pandas as pd

    from answers.evaluate import (bm25_sentence_baseline, calibration, evaluate_scorer, first_sentence_baseline,
                                  oracle_row, pool_sentences)
    from answers.features import ENCODER_FEATURES
    from answers.fit import fit_scorer
    from answers.scorer import provenance
    from retrieval.parts import version_identity
    from storage import atomic_write_text

    ignore = ENCODER_FEATURES if encoder_free else ()

    train, test = q[q["split"] == "train"], q[q["split"] == "test"]
    info = {"split": "by document", "seed": seed, "test_share": test_share,
            "train_questions": len(train), "train_documents": int(train["ext_doc"].nunique()),
            "test_questions": len(test), "test_documents": int(test["ext_doc"].nunique()),
            "index_version": backend.version, "encoder": backend.encoder_name, "model_id": backend.model_id,
            "provenance": provenance(None if encoder_free else backend.model_id, version_identity(backend.bundle.manifest)["segmenter"],
                                     f"{len(q)} questions (NCPQA format) on {int(q['ext_doc'].nunique())} "
                                     f"documents of data dir {Path(data_dir).name}",
                                     version_identity(backend.bundle.manifest).get("answer_reranker")
                                     if backend.answer_reranker is not None else None)}
    scorer = fit_scorer(tr, info=info, ignore=ignore)
    learned, per = evaluate_scorer(te, scorer, "answers (span ranker, minimum-Bayes-risk span)")
    argmax, _ = evaluate_scorer(te, replace(scorer, mbr_temperature=0.0), "answers (span ranker, best-scored span)")
    pointwise, _ = evaluate_scorer(te, fit_scorer(tr, info=info, model="trees", ignore=ignore),
                                  "answers (pointwise span trees)")
    rows = [learned, argmax, pointwise, oracle_row(te)]
    test_rows = list(test.itertuples(index=False))
    rows.append(bm25_sentence_baseline(test_rows, pool_sentences(store), backend.tokenize))
    rows.append(first_sentence_baseline(test_rows, lambda qq, k: backend.search(qq, k, mode="sparse"), store))
    report = {"split": "test: questions of held-out documents", "table": rows,
              "calibration": calibration(per, scorer.threshold),
              "scorer": {k: v for k, v in {**info, **scorer.info}.items() if k != "fitted_documents"}}
    if cv is not None:
        report["cross_validation_train"] = cv
    report["saved_scorer"] = save_scorer(data_dir, scorer, tr, refit, info, install, log, ignore)
    out = Path(data_dir) / "eval" / "answers"
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / ("answer_eval-encoder-free.json" if encoder_free else "answer_eval.json"), json.dumps(report, ensure_ascii=False, indent=1, default=str))
    log(pd.DataFrame(rows).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    log(f"calibration (test): {json.dumps(report['calibration'], ensure_ascii=False)}")
    return report


def save_scorer(data_dir: str, scorer, tr: list, refit: list | None, info: dict, install: bool, log=print,
                ignore: tuple[str, ...] = ()) -> dict:
    """Save ``scorer`` (fitted on ``tr``) as ``DATA/eval/answers/scorer.json`` (and as the repository's shipped
    scorer :data:`SHIPPED` with ``install``), or, given ``refit`` (more fitting examples), a scorer refitted the same way on ``tr + refit``;
    ``ignore``: the features the refit reads as 0 (an encoder-free scorer: saved as ``scorer-encoder-free.json``,
    installed as :data:`SHIPPED_ENCODER_FREE`); returns what was saved (questions, documents, whether refitted)."""
    from answers.fit import fit_scorer

    if refit:
        log(f"refitting the scorer on all {len(tr) + len(refit)} questions (the figures above are those of the "
            f"fit on {len(tr)})")
        kept = {k: v for k, v in info.items() if not k.startswith(("train_", "test_"))}
        scorer = fit_scorer(tr + refit, info={**kept, "refit": "every question, after the held-out report",
                                              "fitted_questions": len(tr) + len(refit),
                                              "held_out_figures_of": f"the fit on {len(tr)} train questions"},
                            ignore=ignore)
    shipped = SHIPPED_ENCODER_FREE if ignore else SHIPPED
    path = scorer.save(Path(data_dir) / "eval" / "answers" / shipped.name)
    if install:
        scorer.save(shipped)
    log(f"scorer (fitted on {len(tr) + len(refit or [])} questions): {path}" + (f" and {shipped}" if install else ""))
    return {"fitted_questions": len(tr) + len(refit or []), "refit": bool(refit),
            "fitted_documents": len(scorer.info["fitted_documents"]), "path": str(path)}


def cross_validation(backend, store, q, tr, seeds: int, log=print) -> dict:
    """Repeated 5-fold cross-validation by document on the training questions alone (``seeds`` repeats): the
    figures to choose features and settings by, leaving the test questions untouched."""
    from answers.answer import AnswerConfig
    from answers.evaluate import cross_validate
    from answers.fit import build_examples

    serve = build_examples(q[q["split"] == "train"], backend, store, AnswerConfig(), with_gold_doc=False, log=log,
                           reranker=backend.answer_reranker)
    cv = cross_validate(tr, serve, seeds=tuple(range(seeds)))
    for t, r in cv.items():
        log(f"cross-validation on the training questions ({seeds} × 5 folds by document), minimum-Bayes-risk "
            f"temperature {t}: hit@1 {r['hit@1']:.3f} (se {r['hit@1_se']:.3f}), char-F1 {r['char_f1']:.3f} "
            f"(se {r['char_f1_se']:.3f})")
    return cv


def check_installable(data_dir: str, version: str | None = None) -> None:
    """Refuse ``--install`` before any fitting (from the manifest alone) when the version holds an answer
    cross-encoder the pipeline does not ship: a scorer fitted on it would read that part, and every later
    version, published without it, would refuse the scorer.

    Raises:
        ValueError: as above, with the reason. FileNotFoundError / retrieval.versions.IndexLoadError: the
            version's manifest is missing or unreadable (:func:`retrieval.versions.read_manifest`).
    """
    from flows.profiles import PipelineConfig
    from answers.parts import ANSWER_RERANKER_PART
    from retrieval.parts import part_installed
    from retrieval.versions import current_version, read_manifest

    index = Path(data_dir) / "index"
    name = version or current_version(index)
    if name and part_installed(read_manifest(index, name), ANSWER_RERANKER_PART.name) and not PipelineConfig().answer_reranker:
        raise ValueError("--install: this version's scorer would read its answer cross-encoder, which the "
                         "pipeline does not ship (PipelineConfig.answer_reranker is empty): every later "
                         "version would refuse it; evaluate without --install")


def run(data_dir: str, questions: str, test_share: float, seed: int, install: bool, log=print,
        cv_seeds: int = 0, refit: str = "all", encoder_free: bool = False) -> dict:
    """Fit on the train documents' questions, evaluate on the test documents'; with ``cv_seeds``, first the
    cross-validation on the training questions (:func:`cross_validation`); save the scorer refitted on every
    question (``refit="all"``) or the train fit (``"train"``). Returns the report dict.

    Raises:
        ValueError: ``refit`` is neither ``all`` nor ``train``; ``install`` over a version with an answer
            cross-encoder while the pipeline ships none (every later version would refuse that scorer).
    """
    if refit not in ("all", "train"):
        raise ValueError(f"refit = {refit!r}: 'all' or 'train'")
    t0 = time.perf_counter()
    if install:
        check_installable(data_dir)
    backend, store, q, tr, te = prepare_sets(data_dir, questions, test_share, seed, log)
    cv = cross_validation(backend, store, q, tr, cv_seeds, log) if cv_seeds > 0 else None
    more = fit_examples(q[q["split"] == "test"], backend, store, log) if refit == "all" else None
    report = fit_and_report(data_dir, backend, store, q, tr, te, seed, test_share, install, log, cv, more,
                            encoder_free)
    log(f"{time.perf_counter() - t0:.0f} s")
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.answer_eval")
    ap.add_argument("--data-dir", required=True, help="a data dir whose index holds the NCPQA documents")
    ap.add_argument("--questions", default=DEFAULT_QUESTIONS)
    ap.add_argument("--test-share", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--install", action="store_true", help=f"also save the scorer as the one the repository ships ({SHIPPED})")
    ap.add_argument("--cv", type=int, default=0, metavar="SEEDS",
                    help="first report SEEDS repeats of 5-fold cross-validation by document on the training "
                         "questions (for choosing settings without the test questions; ~1 min a repeat)")
    ap.add_argument("--refit", choices=("all", "train"), default="all",
                    help="the scorer saved: refitted on every question after the report (all, default) or the "
                         "fit on the train documents' questions that the report measured (train)")
    ap.add_argument("--encoder-free", action="store_true",
                    help="fit a scorer that reads none of the encoder's features (answers.features.ENCODER_FEATURES) "
                         f"and pins no encoder; --install saves it as {SHIPPED_ENCODER_FREE.name}")
    args = ap.parse_args(argv)
    if args.cv < 0:
        print("error: --cv must be >= 0", file=sys.stderr)
        return 2
    for p in (args.questions, Path(args.data_dir) / "index"):
        if not Path(p).exists():
            print(f"error: {p} not found", file=sys.stderr)
            return 2
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    run(args.data_dir, args.questions, args.test_share, args.seed, args.install, cv_seeds=args.cv, refit=args.refit,
        encoder_free=args.encoder_free)
    return 0


if __name__ == "__main__":
    sys.exit(main())
