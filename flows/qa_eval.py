"""Retrieval on real questions (SPEC §7), a thin CLI over :mod:`retrieval.qa_eval` (no Prefect):

    python -m flows.qa_eval --questions ../shared/qa/lecoqa_train.jsonl --pool ../shared/qa/statutes.jsonl \\
        --model data/models/finetune-policysm1 [--retrieval-model data/models/retrieval] [--out DIR]

Indexes the pool (one document per article), runs the questions and the mined pool queries, and writes
recall@1/5/10 and MRR@10 per system (BM25, dense fine-tuned, dense untrained, dense retrieval-trained,
and the hybrid of each dense encoder) to ``DIR/qa_eval.parquet`` (+ ``qa_eval.json``), and prints the table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m flows.qa_eval")
    ap.add_argument("--questions", required=True)
    ap.add_argument("--pool", required=True)
    ap.add_argument("--model", required=True, help="fine-tuned encoder checkpoint dir")
    ap.add_argument("--retrieval-model", action="append", default=[], help="retrieval-trained checkpoint dir(s)")
    ap.add_argument("--out", default="eval/qa")
    ap.add_argument("--cache-dir", default=None, help="passage embedding cache (default OUT/cache)")
    ap.add_argument("--pool-text", choices=("title+article", "article"), default="title+article")
    ap.add_argument("--max-questions", type=int, default=None)
    ap.add_argument("--no-untrained", action="store_true")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args(argv)
    for p in [args.questions, args.pool, args.model, *args.retrieval_model]:
        if not Path(p).exists():
            print(f"error: {p} not found", file=sys.stderr)
            return 2
    # loaded after the arguments are checked: a wrong path is answered without loading torch and the models
    from transformers.utils import logging as hf_logging

    from retrieval.qa_eval import (QAEvalConfig, dense_system, evaluate_qa, format_table, load_pool, load_questions,
                                   write_results)

    hf_logging.set_verbosity_error()
    cfg = QAEvalConfig(pool_text=args.pool_text, max_questions=args.max_questions)
    systems = [dense_system("finetuned", args.model, batch_size=args.batch_size)]
    if not args.no_untrained:
        systems.append(dense_system("untrained", args.model, untrained=True, batch_size=args.batch_size))
    for i, d in enumerate(args.retrieval_model):
        systems.append(dense_system("retrieval" if i == 0 else f"retrieval{i + 1}", d, batch_size=args.batch_size))
    table, info = evaluate_qa(load_questions(args.questions, cfg.max_questions), load_pool(args.pool, cfg.pool_text),
                              systems, cfg, cache_dir=args.cache_dir or Path(args.out) / "cache")
    path = write_results(table, info, cfg, args.out)
    print(format_table(table))
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
