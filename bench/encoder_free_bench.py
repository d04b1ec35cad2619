"""The encoder-free answer scorer beside the encoder's own (SPEC §9; ``answers.features.ENCODER_FEATURES``): both
fitted on the NCPQA train questions over the data dir they were fitted on (``--fit-dir``, an e5 version), then
scored on the test questions (split by document, seed 13, as ``flows.answer_eval``) over that version and over a
version of another encoder (``--other-dir``, e.g. a ``tiny`` run over the same documents), beside BM25 over the
sentences of the other version. Prints JSON (hit@1, hit@3, char-F1, documents recall@1 per row).

    python -m flows.pipeline --input ../shared/qa/ncpqa_docs.jsonl --id-column doc_id --title-column title \\
        --data-dir data-ncpqa-tiny --profile tiny
    .venv/bin/python -m bench.encoder_free_bench --fit-dir data-ncpqa --other-dir data-ncpqa-tiny
"""
from __future__ import annotations

import argparse
import json
import sys

KEYS = ("hit@1", "hit@3", "char_f1", "questions", "doc_recall@1")


def test_examples(data_dir: str, questions: str, test_share: float, seed: int):
    """(backend, store, test question rows, test examples as a user gets them) over ``data_dir``'s version."""
    from answers.answer import AnswerConfig
    from answers.backend import SearchBackend
    from answers.fit import build_examples
    from answers.ncpqa import duplicate_targets
    from evaluation.sets import NcpqaLoader

    backend = SearchBackend(f"{data_dir}/index")
    q = NcpqaLoader(questions).load(backend.store, duplicate_targets(data_dir), test_share, seed).splits["all"]
    test = q[q["split"] == "test"]
    return backend, list(test.itertuples(index=False)), build_examples(
        test, backend, backend.store, AnswerConfig(), with_gold_doc=False, log=lambda s: None)


def run(fit_dir: str, other_dir: str, questions: str, test_share: float = 0.3, seed: int = 13) -> dict:
    """The bench's rows (module doc)."""
    from answers.evaluate import bm25_sentence_baseline, evaluate_scorer, pool_sentences
    from answers.features import ENCODER_FEATURES
    from answers.fit import fit_scorer
    from flows.answer_eval import prepare_sets

    _, _, _, tr, te = prepare_sets(fit_dir, questions, test_share, seed, log=lambda s: None)
    full, free = fit_scorer(tr), fit_scorer(tr, ignore=ENCODER_FEATURES)
    backend, rows, other = test_examples(other_dir, questions, test_share, seed)
    got = {"fit version, the encoder's scorer": evaluate_scorer(te, full)[0],
           "fit version, encoder-free scorer": evaluate_scorer(te, free)[0],
           "other version, encoder-free scorer": evaluate_scorer(other, free)[0],
           "other version, the fit encoder's scorer": evaluate_scorer(other, full)[0],
           "other version, BM25 over all sentences": bm25_sentence_baseline(rows, pool_sentences(backend.store),
                                                                            backend.tokenize)}
    return {k: {m: v.get(m) for m in KEYS} for k, v in got.items()}


def main(argv: list[str] | None = None) -> int:
    from flows.answer_eval import DEFAULT_QUESTIONS

    p = argparse.ArgumentParser(prog="python -m bench.encoder_free_bench")
    p.add_argument("--fit-dir", required=True)
    p.add_argument("--other-dir", required=True)
    p.add_argument("--questions", default=DEFAULT_QUESTIONS)
    a = p.parse_args(argv)
    print(json.dumps(run(a.fit_dir, a.other_dir, a.questions), ensure_ascii=False, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
