"""The neural span reader as a served reader part, end to end on NCPQA (SPEC §9; answers.span_reader):

    python -m flows.pipeline --input ../shared/qa/ncpqa_docs.jsonl --id-column doc_id --title-column title \\
        --data-dir DATA --set part_files.span_reader=PART [...]
    .venv/bin/python bench/span_reader_bench.py --data-dir DATA [--seed 0] [--n 0] [--threads 2]

``DATA``'s serving version holds the span reader part (exported by ``python -m answers.span_reader`` from a
reader ``flows.train_reader`` trained with ``--seed``). Every question about the documents that reader never saw
(``flows.train_reader.split_docs``: 20 % of the NCPQA documents) is asked through ``Answerer.answer``, the served
path (hybrid search, 5 documents, the reader over their focus passages), its gold span located in the cleaned
text (:func:`answers.ncpqa.locate_gold`); beside it, BM25 over every sentence of the version (the baseline that
cannot learn). Prints hit@1, hit@3 (the gold document and an overlapping span), top-1 char-F1 and EM, how often
the answer's document is the gold one, and p50 / p95 seconds a question, warm.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
QUESTIONS = Path(__file__).resolve().parents[2] / "shared" / "qa" / "ncpqa_questions.jsonl"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/span_reader_bench.py")
    p.add_argument("--data-dir", required=True)
    p.add_argument("--seed", type=int, default=0, help="flows.train_reader's split seed")
    p.add_argument("--n", type=int, default=0, help="held-out questions asked (0: all)")
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    import torch

    from answers.answer import Answerer
    from answers.evaluate import bm25_sentence_baseline, pool_sentences
    from answers.metrics import char_f1, exact_match, overlaps
    from answers.ncpqa import duplicate_targets, load_questions, locate_gold
    from flows.train_reader import load_ncpqa, split_docs

    torch.set_num_threads(a.threads)
    answerer = Answerer(a.data_dir)
    backend = answerer.backend()  # one loaded version for the reader, the questions' gold and the baseline
    reader = backend.reader()
    _, docs = load_ncpqa()
    held = split_docs(docs, a.seed)
    q = locate_gold(load_questions(QUESTIONS), backend.store, duplicate_targets(a.data_dir))
    q = q[q["ext_doc"].isin(held) & q["doc_id"].notna()]
    rows = list(q.head(a.n).itertuples() if a.n else q.itertuples())
    print(f"version {backend.version}; reader {type(reader).__name__}; {len(rows)} questions about the {len(held)} "
          f"held-out documents, the version holds {len(backend.store.text)}")
    answerer.warm()
    hit1 = hit3 = same = 0
    f1, em, secs = [], [], []
    for r in rows:
        t = time.perf_counter()
        out = answerer.answer(r.question, k=3)["answers"]
        secs.append(time.perf_counter() - t)
        ok = [x["doc_id"] == r.doc_id and r.gold_start >= 0 and overlaps(x["start"], x["end"], r.gold_start,
                                                                          r.gold_end) for x in out]
        hit1, hit3 = hit1 + bool(ok and ok[0]), hit3 + any(ok)
        same += bool(out and out[0]["doc_id"] == r.doc_id)
        f1.append(char_f1(out[0]["text"], r.answer) if out else 0.0)
        em.append(exact_match(out[0]["text"], r.answer) if out else 0.0)
    n = max(1, len(rows))
    print(f"{type(reader).__name__} (served): hit@1 {hit1 / n:.3f} hit@3 {hit3 / n:.3f} char-F1 {np.mean(f1):.3f} "
          f"EM {np.mean(em):.3f}; answer's document = gold {same / n:.3f}; p50 {np.percentile(secs, 50):.2f} s, "
          f"p95 {np.percentile(secs, 95):.2f} s a question (warm)")
    base = bm25_sentence_baseline(rows, pool_sentences(backend.store), backend.tokenize)
    print(f"baseline: {json.dumps(base, ensure_ascii=False)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
