"""Do answers improve when the search's reranker slot holds a cross-encoder? (SPEC §7, §9)

    python bench/answer_rerank_bench.py --data-dir DATA_NCPQA [--version v3] [--part DIR ...] [--threads 2]
        [--no-window] [--out FILE.json]

On the answer evaluation's split (NCPQA, by document, test share 0.3, seed 13: ``flows.answer_eval``), for each
system in the version's reranker slot (none: the hybrid search as published; ``bm25-window``: the window-BM25
reranker, window 200, weight 0.5, depth 20; each cross-encoder ``--part``, trained with ``flows.train_reranker``
on the training documents' questions only), the scorer recipe (:func:`answers.fit.fit_scorer`) is fitted on the
training questions' examples built over that query pipeline and measured on the held-out questions as a user
gets them (hit@1/3, char-F1, EM, the gold document's recall in the candidates), with the paired hit@1 against
the search alone. This is what publishing a version with that ``reranker`` part and fitting its scorer over it
(``--set reranker=... --set answer_questions=...``) serves, without rebuilding the index: the version's
pipeline is swapped for one with that reranker (:class:`retrieval.pipeline.QueryPipeline`).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def use_reranker(backend, reranker) -> None:
    """Put ``reranker`` (None: none) in the slot of ``backend``'s query pipeline (the search stays the version's)."""
    from retrieval.pipeline import QueryPipeline

    backend.bundle.__dict__["pipeline"] = QueryPipeline(backend.bundle.retriever,
                                                        (reranker,) if reranker is not None else ())


def measure(backend, store, q, name: str, log=print) -> tuple[dict, list]:
    """(metrics row, per-question hit@1) of the scorer fitted and evaluated over ``backend``'s current pipeline."""
    from answers.answer import AnswerConfig
    from answers.evaluate import evaluate_scorer
    from answers.fit import build_examples, fit_scorer, fitting_examples

    t = time.perf_counter()
    train, test = q[q["split"] == "train"], q[q["split"] == "test"]
    quiet = lambda m: None  # noqa: E731
    tr = fitting_examples(train, backend, store, quiet)
    te = build_examples(test, backend, store, AnswerConfig(), with_gold_doc=False, log=quiet)
    row, per = evaluate_scorer(te, fit_scorer(tr), name)
    row["seconds"] = round(time.perf_counter() - t, 1)
    log(f"{name:40s} hit@1 {row['hit@1']:.3f}  hit@3 {row['hit@3']:.3f}  char-F1 {row['char_f1']:.3f}  "
        f"EM {row['exact_match']:.3f}  ({row['questions']} held-out questions, {row['seconds']} s)")
    return row, list(per["hit1"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/answer_rerank_bench.py", description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--version", default=None)
    ap.add_argument("--part", action="append", default=[], help="cross-encoder part folder (repeatable)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-window", action="store_true", help="skip the bm25-window reranker")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    import torch

    from answers.backend import SearchBackend
    from answers.ncpqa import duplicate_targets
    from bench.answer_ce_bench import paired
    from evaluation.sets import NcpqaLoader
    from flows.answer_eval import DEFAULT_QUESTIONS
    from retrieval.cross_encoder import load_cross_encoder
    from retrieval.rerankers import WindowBM25Reranker

    torch.set_num_threads(args.threads)
    backend = SearchBackend(Path(args.data_dir) / "index", args.version)
    if backend.bundle.pipeline.rerankers:
        raise SystemExit(f"index {backend.version} already has a reranker: bench a version without one")
    store = backend.store
    q = NcpqaLoader(DEFAULT_QUESTIONS).load(store, duplicate_targets(args.data_dir), 0.3, 13).splits["all"]
    b = backend.bundle
    systems = {"hybrid search (no reranker)": None}
    if not args.no_window:
        texts = dict(zip(b.texts["doc_id"], b.texts["text"]))
        systems["bm25-window reranker"] = WindowBM25Reranker(texts, b.retriever.tokenize, 200, 0.5, 20)
    for p in args.part:
        systems[f"cross-encoder {Path(p).name}"] = load_cross_encoder(p, b.retriever.encoder, b.model_id)
    rows, hits = [], {}
    for name, rr in systems.items():
        use_reranker(backend, rr)
        row, hits[name] = measure(backend, store, q, name)
        rows.append(row)
    base = next(iter(hits))
    report = {"data_dir": args.data_dir, "version": backend.version, "threads": args.threads, "table": rows,
              "paired_hit@1_vs_search": {n: paired(hits[base], h) for n, h in hits.items() if n != base},
              "parts": {n: getattr(r, "info", {}) for n, r in systems.items() if hasattr(r, "info")}}
    print(json.dumps(report["paired_hit@1_vs_search"], ensure_ascii=False))
    if args.out:
        Path(args.out).write_text(json.dumps(report, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
