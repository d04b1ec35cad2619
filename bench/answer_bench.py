"""Answer-stage latency (SPEC §9), one run:

    python bench/answer_bench.py --data-dir data-ncpqa [--n 50] [--screenshot docs/answer_page.png]

1. ``flows.ask`` vs ``flows.search`` on the same index, in one process after a warm-up: p50 of
   ``Answerer.answer(q, 3)`` against p50 of ``Retriever.search(q, 5)`` (the hybrid search ``flows.search``
   runs) over the first ``n`` NCPQA questions, and their ratio (target ≤ 1.5): cold (each document's
   question-free part built when a question first retrieves it) and warm (after ``Answerer.warm``, what
   ``flows.serve`` does at start; ``--rounds`` rounds of a search pass and an answer pass, so a slow stretch
   of the shared machine falls on both sides);
2. the page: ``flows.serve`` on the data dir, headless Chromium asking the same ``n`` questions one after
   another through the form; p50/p95 seconds from submit to page loaded (target p95 ≤ 2 s); the last page
   is saved as a screenshot.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
QUESTIONS = Path(__file__).resolve().parent.parent.parent / "shared" / "qa" / "ncpqa_questions.jsonl"


def _p(xs, q):
    return float(np.percentile(np.asarray(xs), q))


def api_latency(data_dir: str, questions: list[str], rounds: int = 3) -> dict:
    """p50 of the answer API and of the hybrid search over ``questions`` (seconds) and their ratio: cold (each
    document's question-free part built when a question first retrieves it, search and answer alternating),
    then warm, over ``rounds`` rounds of a search pass and an answer pass over every question, so a slow
    stretch of a shared machine falls on both (the p50s over all rounds, and each round's ratio)."""
    from answers import Answerer
    from retrieval.retrievers import Retriever

    retr = Retriever(Path(data_dir) / "index")
    ans = Answerer(data_dir)
    retr.search(questions[0], 5)
    ans.answer(questions[0], 3)
    s_cold, cold = [], []
    for q in questions:  # cold: each document's question-free part built on first sight
        t = time.perf_counter()
        retr.search(q, 5)
        s_cold.append(time.perf_counter() - t)
        t = time.perf_counter()
        ans.answer(q, 3)
        cold.append(time.perf_counter() - t)
    t = time.perf_counter()
    built = ans.warm()  # what flows.serve does at start: every document's question-free part
    warm_s = time.perf_counter() - t
    s, warm, per_round = [], [], []
    for _ in range(rounds):
        rs, ra = [], []
        for q in questions:
            t = time.perf_counter()
            retr.search(q, 5)
            rs.append(time.perf_counter() - t)
        for q in questions:
            t = time.perf_counter()
            ans.answer(q, 3)
            ra.append(time.perf_counter() - t)
        s += rs
        warm += ra
        per_round.append(round(_p(ra, 50) / _p(rs, 50), 3))
    return {"search_p50_s": _p(s, 50), "ask_p50_s": _p(warm, 50), "ratio_p50": _p(warm, 50) / _p(s, 50),
            "ratio_p50_per_round": per_round, "ask_cold_p50_s": _p(cold, 50),
            "ratio_cold_p50": _p(cold, 50) / _p(s_cold, 50), "search_p95_s": _p(s, 95), "ask_p95_s": _p(warm, 95),
            "warm_documents": built, "warm_s": warm_s, "questions": len(questions), "rounds": rounds}


def page_latency(data_dir: str, questions: list[str], screenshot: str | None) -> dict:
    """p50/p95 of the page answering ``questions`` one after another in headless Chromium."""
    from ops.answer_page import ask_in_browser, served

    with served(data_dir) as url:
        got = ask_in_browser(url, questions, screenshot)
    secs = [g["seconds"] for g in got]
    return {"page_p50_s": _p(secs, 50), "page_p95_s": _p(secs, 95), "page_max_s": max(secs),
            "statuses": sorted({g["status"] for g in got}), "questions": len(got)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--questions", default=str(QUESTIONS))
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--screenshot", default=None)
    ap.add_argument("--rounds", type=int, default=3, help="warm rounds (a search pass and an answer pass each)")
    ap.add_argument("--skip-page", action="store_true")
    args = ap.parse_args(argv)
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    qs = [json.loads(x)["question"].strip() for x in open(args.questions, encoding="utf-8")][:args.n]
    out = {"api": api_latency(args.data_dir, qs, args.rounds)}
    print(json.dumps(out["api"]), flush=True)
    if not args.skip_page:
        out["page"] = page_latency(args.data_dir, qs, args.screenshot)
        print(json.dumps(out["page"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
