"""Does the cross-encoder's sentence score help the answer scorer? (SPEC §9; :mod:`answers.rerank_features`)

    python bench/answer_ce_bench.py --data-dir DATA_NCPQA --reranker DIR [--version v3] [--examples CACHE.pkl]
        [--threads 2] [--cross-fit STEPS] [--out FILE.json]

On the answer evaluation's split (NCPQA, by document, test share 0.3, seed 13: ``flows.answer_eval``), the same
scorer recipe (:func:`answers.fit.fit_scorer`) is fitted on the training questions twice, with the span features
of today and with them plus :data:`answers.rerank_features.CE_FEATURES` (the reranker ``DIR``, a cross-encoder
part trained on the training documents' questions alone, ``flows.train_reranker --sources ncpqa-sentence``, or on
no NCPQA question at all, ``--sources lecoqa,mined``), and both are measured on the held-out questions, with the
paired difference of hit@1 (questions won / lost); with ``--cross-fit`` a third scorer reads cross-fitted features
(:func:`cross_fitted`). It also prints how often, inside the gold document, the cross-encoder's best sentence
holds the answer, beside BM25's (:func:`sentence_picks`), on the held-out and the training questions: a gap
between the two splits is the memorising that makes in-sample features leak. The examples (search, candidates,
features: minutes) are cached in ``--examples``.
"""
from __future__ import annotations

import argparse
import json
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def examples(data_dir: str, version: str | None, cache: str | None, log=print):
    """(backend, q, tr, te) of :func:`flows.answer_eval.prepare_sets`, the examples pickled in ``cache``."""
    from answers.backend import SearchBackend
    from flows.answer_eval import DEFAULT_QUESTIONS, prepare_sets

    if cache and Path(cache).is_file():
        q, tr, te = pickle.loads(Path(cache).read_bytes())
        return SearchBackend(Path(data_dir) / "index", version), q, tr, te
    backend, _, q, tr, te = prepare_sets(data_dir, DEFAULT_QUESTIONS, 0.3, 13, log, version)
    if backend.answer_reranker is not None:
        raise ValueError(f"index {backend.version} already holds an answer cross-encoder: its examples carry its "
                         "features; bench a version without one")
    if cache:
        Path(cache).write_bytes(pickle.dumps((q, tr, te)))
    return backend, q, tr, te


def with_ce(exs: list, ce) -> list:
    """Each (row, Prepared) with the CE_FEATURES columns appended to its span matrix; ``ce``: a cross-encoder,
    or a function row -> the (question, sentences) -> scores function to use for that row."""
    from answers.rerank_features import ce_matrix, sentence_scores

    out = []
    for row, prep in exs:
        score = ce.score if hasattr(ce, "score") else ce(row)
        scores = sentence_scores(prep.question, prep.docs, score)
        out.append((row, replace(prep, span_x=np.hstack([prep.span_x, ce_matrix(prep.docs, scores)]))))
    return out


def cross_fitted(backend, q, tr: list, te: list, steps: int, log=print) -> tuple[list, list, dict]:
    """Cross-fitted features (the stacking remedy): the training documents split in two (seeded); a
    cross-encoder trained on each half's questions (sentence groups, the ``flows.train_reranker --sources
    ncpqa-sentence`` recipe at ``steps``) scores the other half's training examples; held-out examples get the
    mean of the two. Returns (train examples, test examples, training records)."""
    from answers.candidates import sentence_offsets
    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, TrainConfig, train
    from retrieval.rerank_data import located_questions, ncpqa_sentence_groups, to_groups

    train_q = located_questions(q, "train")
    docs = np.random.default_rng(13).permutation(sorted(set(train_q["doc_id"])))
    fold = {d: i % 2 for i, d in enumerate(docs)}
    texts = dict(zip(backend.bundle.texts["doc_id"], backend.bundle.texts["text"]))
    ces, records = [], []
    for k in (0, 1):
        part = train_q[train_q["doc_id"].map(fold) == k]
        groups = ncpqa_sentence_groups(part, texts, backend.tokenize, sentence_offsets)
        ce = CrossEncoder.from_encoder(backend.bundle.retriever.encoder, backend.model_id,
                                       CrossEncoderConfig(layers=4, max_len=128, max_query=48))
        records.append({"fold": k, "groups": len(groups), **train(
            ce, to_groups(groups), TrainConfig(steps=steps, batch=8, negatives=7, lr=5e-5, max_seconds=3600),
            log=lambda m: log(f"fold {k}: {m}") if m.startswith("step 1:") or "00:" in m else None)})
        log(f"fold {k}: {records[-1]}")
        ces.append(ce)
    other = lambda row: ces[1 - fold.get(row.doc_id, 0)].score  # noqa: E731 (the half that did not see it)
    mean = lambda qn, ts: (ces[0].score(qn, ts) + ces[1].score(qn, ts)) / 2  # noqa: E731
    return with_ce(tr, other), with_ce(te, lambda row: mean), records


def sentence_picks(exs: list, score) -> dict:
    """Inside the gold document, how often the best sentence holds the gold span: BM25's best of all its
    sentences against the cross-encoder's best of the cascade's focus (:func:`answers.rerank_features.
    sentence_scores`). ``exs``: (row, Prepared) pairs whose row has ``doc_id``, ``gold_start`` and ``gold_end``
    (offsets into the cleaned text, chars; a negative or missing start: no gold span); ``score``: (question,
    sentences) -> (n,) scores. Questions whose gold document is not a candidate, whose span lies in no
    sentence or whose document has no focus sentence are left out (not counted in ``questions``).
    Returns ``{"questions", "bm25", "cross_encoder"}`` (the two shares in [0, 1])."""
    from answers.rerank_features import sentence_scores

    n = bm_ok = ce_ok = 0
    for row, prep in exs:
        start, end = getattr(row, "gold_start", None), getattr(row, "gold_end", None)
        doc = next((d for d in prep.docs if d.doc_id == row.doc_id), None)
        if doc is None or start is None or start < 0:
            continue
        gold = {i for i, (s, e) in enumerate(doc.sentences) if s < end and e > start}
        ce = sentence_scores(prep.question, [doc], score)[0]
        if not gold or np.isnan(ce).all():
            continue
        n += 1
        bm_ok += int(np.argmax(doc.bm)) in gold
        ce_ok += int(np.nanargmax(ce)) in gold
    return {"questions": n, "bm25": round(bm_ok / max(n, 1), 3), "cross_encoder": round(ce_ok / max(n, 1), 3)}


def paired(a, b) -> dict:
    """Questions where ``b`` hits and ``a`` misses (won) and the reverse (lost)."""
    a, b = np.asarray(a, bool), np.asarray(b, bool)
    return {"won": int((b & ~a).sum()), "lost": int((a & ~b).sum())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench/answer_ce_bench.py")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--reranker", required=True)
    ap.add_argument("--version", default=None)
    ap.add_argument("--examples", default=None)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    ap.add_argument("--cross-fit", type=int, default=0, metavar="STEPS",
                    help="also train two cross-encoders on halves of the training documents (STEPS each) and "
                         "measure the scorer on cross-fitted features")
    args = ap.parse_args(argv)
    import torch

    from answers.evaluate import evaluate_scorer
    from answers.fit import fit_scorer
    from retrieval.cross_encoder import load_cross_encoder

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    backend, q, tr, te = examples(args.data_dir, args.version, args.examples)
    print(f"examples: {len(tr)} train / {len(te)} test ({time.perf_counter() - t0:.0f} s)", flush=True)
    ce = load_cross_encoder(args.reranker, backend.bundle.retriever.encoder, backend.model_id)
    t1 = time.perf_counter()
    tr_ce, te_ce = with_ce(tr, ce), with_ce(te, ce)
    ce_secs = time.perf_counter() - t1
    n_pairs = sum(int(np.isfinite(p.span_x[:, -1]).any()) for _, p in te_ce)
    print(f"cross-encoder features: {ce_secs:.0f} s for {len(tr) + len(te)} questions", flush=True)
    picks = {"test": sentence_picks(te, ce.score), "train": sentence_picks(tr, ce.score)}
    print(f"gold document, best sentence holds the answer: {picks}", flush=True)
    base, plus = fit_scorer(tr), fit_scorer(tr_ce)  # the span features named by the matrices' width
    r0, per0 = evaluate_scorer(te, base, "scorer (today's features)")
    r1, per1 = evaluate_scorer(te_ce, plus, "scorer + cross-encoder sentence features")
    report = {"data_dir": args.data_dir, "version": backend.version, "reranker": args.reranker,
              "reranker_info": ce.info, "threads": args.threads, "questions": {"train": len(tr), "test": len(te)},
              "ce_feature_seconds": round(ce_secs, 1), "test_questions_with_scored_sentences": n_pairs,
              "sentence_picks": picks,
              "table": [r0, r1], "paired_hit@1": paired(per0["hit1"], per1["hit1"]),
              "seconds": round(time.perf_counter() - t0, 1)}
    if args.cross_fit:
        tr_x, te_x, recs = cross_fitted(backend, q, tr, te, args.cross_fit)
        r2, per2 = evaluate_scorer(te_x, fit_scorer(tr_x), "scorer + cross-fitted cross-encoder features")
        report["table"].append(r2)
        report.update(cross_fit=recs, paired_hit1_cross_fit=paired(per0["hit1"], per2["hit1"]))
        print(f"paired hit@1 (cross-fitted CE vs today): {report['paired_hit1_cross_fit']}")
    for r in report["table"]:
        print(f"{r['system']:45s} hit@1 {r['hit@1']:.3f}  hit@3 {r['hit@3']:.3f}  char-F1 {r['char_f1']:.3f}  "
              f"EM {r['exact_match']:.3f}  ({r['questions']} held-out questions)")
    print(f"paired hit@1 (CE vs today): {report['paired_hit@1']}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, ensure_ascii=False, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
