"""The cross-encoder reranker against the hybrid search and the bm25-window reranker (SPEC §7, §9), on held-out
questions only (the splits of :mod:`flows.train_reranker`):

    python bench/rerank_bench.py --data-dir /work/data-ncpqa --part DIR [--part-b DIR] [--threads 1]
        [--cache data/rerank/cache] [--out data/rerank/bench.json] [--no-lecoqa] [--latency 30]

- NCPQA (the 129 questions of the answer evaluation's held-out documents, split by document, seed 13) over the
  serving search of the data dir's index version: document recall@1/3/5 of the top 20 chunks (documents in the
  order of their first chunk) as searched (hybrid), reranked by ``bm25-window`` (window 200, weight 0.5, the
  settings docs/retrieval.md measured) and by each cross-encoder part.
- LeCoQA (its held-out 20 %, :func:`retrieval.rerank_data.lecoqa_split`) over the 13,003 statute articles indexed
  as :mod:`retrieval.qa_eval` indexes them (title + article; pretrained e5 = the version's encoder; BM25; RRF
  weights fitted on mined pool queries): recall@1/5/10 and MRR@10 of the hybrid top 20, reranked.
- Latency: seconds to rerank 20 chunks (median, p90 over ``--latency`` held-out NCPQA questions) on
  ``--threads`` threads, and the search alone.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
DEPTH = 20


def doc_order(hits) -> list[str]:
    """Distinct documents of ``hits`` in the order of their first chunk."""
    return list(dict.fromkeys(str(h["doc_id"] if isinstance(h, dict) else h.doc_id) for h in hits))


def ncpqa_rows(bundle, test: pd.DataFrame, systems: dict, log=print) -> list[dict]:
    """Document recall@1/3/5 and MRR@10 of the top 20 chunks per system (``systems``: name → rerank function
    or None for the search's own order)."""
    from retrieval.metrics import doc_metrics

    searched = [bundle.retriever.search(q, DEPTH, mode="hybrid") for q in test["question"]]
    rows = []
    for name, rr in systems.items():
        t = time.perf_counter()
        ranked = [doc_order(rr(q, h) if rr else h) for q, h in zip(test["question"], searched)]
        m = doc_metrics(ranked, test["doc_id"].tolist(), ks=(1, 3, 5))
        rows.append({"set": "ncpqa", "system": name, **m, "seconds": round(time.perf_counter() - t, 1)})
        log(rows[-1])
    return rows


def cited_laws_pool(pool: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    """The small statute index: every article of every law (by title) that a gold article of ``test`` belongs
    to; the distractors are the cited laws' other articles."""
    gold = {str(g) for x in test["gold_article_ids"] for g in x}
    titles = set(pool.loc[pool["doc_id"].isin(gold), "title"])
    return pool[pool["title"].isin(titles)].reset_index(drop=True)


def lecoqa_candidates(sets: dict, encoder, encoder_id: str, cache: str) -> tuple[pd.DataFrame, list]:
    """(held-out LeCoQA questions, their hybrid top-20 pool rows) as :func:`retrieval.qa_eval.evaluate_qa`
    ranks them: pool vectors from ``encoder`` (cached under ``cache``), BM25, RRF weights fitted on mined pool
    queries against the lead-masked pool."""
    from retrieval.qa_eval import (QAEvalConfig, _dense_rows, _fit, _fused, _sparse_rankings, cached_embeddings,
                                   mined_pool_queries)

    cfg, lq = QAEvalConfig(), sets["lecoqa"]
    test = lq[lq["split"] == "test"].reset_index(drop=True)
    pool = sets["pool"] if sets.get("full_pool") else cited_laws_pool(sets["pool"], test)
    sets["pool"] = pool
    q = pd.DataFrame({"query": test["question"], "gold": [[str(g) for g in x] for x in test["gold_article_ids"]]})
    texts, ids = pool["text"].tolist(), pool["doc_id"].tolist()
    mined = mined_pool_queries(pool, cfg.fusion)
    sets_ = {"questions": q, "mined": mined}
    sparse, masked, _ = _sparse_rankings(texts, ids, sets_, sets["bundle"].retriever.tokenize, cfg, {"seconds": {}})
    vecs = cached_embeddings(encoder.encode_corpus, texts, encoder_id, cache)
    fit_vecs = vecs.copy()
    if masked:
        fit_vecs[list(masked)] = cached_embeddings(encoder.encode_corpus, list(masked.values()), encoder_id, cache)
    dense = {n: _dense_rows(fit_vecs if n == "mined" else vecs, encoder.encode_queries(s["query"].tolist()),
                            cfg.fusion.depth) for n, s in sets_.items()}
    fit = _fit(dense["mined"], sparse["mined"], ids, mined["gold"].tolist(), cfg.fusion)
    rows = _fused(dense["questions"], sparse["questions"], fit["w_dense"], cfg.fusion)
    return q.assign(w_dense=fit["w_dense"]), [r[:DEPTH] for r in rows]


def lecoqa_rows(sets: dict, q: pd.DataFrame, cand: list, systems: dict, log=print) -> list[dict]:
    """recall@1/5/10 and MRR@10 of the hybrid top 20 articles per system."""
    from retrieval.metrics import doc_metrics

    pool = sets["pool"]
    ids, texts = pool["doc_id"].tolist(), pool["text"].tolist()
    out = []
    for name, rr in systems.items():
        ranked = []
        for query, rows in zip(q["query"], cand):
            hits = [{"doc_id": ids[r], "start": 0, "end": len(texts[r]), "text": texts[r], "score": -i}
                    for i, r in enumerate(rows)]
            ranked.append(doc_order(rr(query, hits) if rr else hits))
        out.append({"set": "lecoqa", "system": name, **doc_metrics(ranked, q["gold"].tolist()),
                    "w_dense": float(q["w_dense"].iloc[0])})
        log(out[-1])
    return out


def ce_systems(name: str, ce, weights=(1.0, 0.5)) -> dict:
    """Rerank functions of one cross-encoder: its order alone and fused with the search's (each weight),
    scoring every (query, candidates) once."""
    cache: dict = {}

    def make(w):
        def rr(q, hits):
            head = list(hits[:ce.depth])
            key = (q, tuple(h["text"] if isinstance(h, dict) else h.text for h in head))
            if key not in cache:
                cache[key] = ce.score(q, list(key[1]))
            return ce.reorder(head, cache[key], w) + list(hits[ce.depth:])
        return rr

    return {f"{name}" + (" alone" if w >= 1 else f", fused with the search (weight {w})"): make(w) for w in weights}


def latency(bundle, questions: list[str], rerankers: dict) -> list[dict]:
    """Median and p90 seconds of the search (top 20) and of each reranker over those 20 chunks."""
    rows, searched = [], []
    ts = []
    for q in questions:
        t = time.perf_counter()
        searched.append(bundle.retriever.search(q, DEPTH, mode="hybrid"))
        ts.append(time.perf_counter() - t)
    rows.append({"system": "hybrid search (top 20)", "p50_s": float(np.median(ts)),
                 "p90_s": float(np.quantile(ts, 0.9))})
    for name, rr in rerankers.items():
        rr(questions[0], searched[0])  # warm
        ts = []
        for q, h in zip(questions, searched):
            t = time.perf_counter()
            rr(q, h)
            ts.append(time.perf_counter() - t)
        rows.append({"system": f"rerank 20: {name}", "p50_s": float(np.median(ts)),
                     "p90_s": float(np.quantile(ts, 0.9))})
    return rows


def parse_args(argv=None):
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--version", default=None)
    ap.add_argument("--part", action="append", default=[], help="cross-encoder part folder (repeatable)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cache", default="data/rerank/cache")
    ap.add_argument("--out", default="data/rerank/bench.json")
    ap.add_argument("--no-lecoqa", action="store_true")
    ap.add_argument("--no-ncpqa", action="store_true")
    ap.add_argument("--full-pool", action="store_true",
                    help="LeCoQA over all 13,003 articles (default: the cited laws')")
    ap.add_argument("--latency", type=int, default=30)
    ap.add_argument("--max-questions", type=int, default=None,
                    help="first n held-out questions of each set (a smoke run)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    import torch

    from flows.train_reranker import prepare
    from retrieval.cross_encoder import load_cross_encoder
    from retrieval.rerank_data import located_questions
    from retrieval.rerankers import WindowBM25Reranker

    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    sets = prepare(args.data_dir, args.version, with_groups=False)
    b = sets["bundle"]
    texts = dict(zip(b.texts["doc_id"], b.texts["text"]))
    window = WindowBM25Reranker(texts, b.retriever.tokenize, 200, 0.5, DEPTH)
    ces = {f"cross-encoder {Path(p).name}": load_cross_encoder(p, b.retriever.encoder, b.model_id) for p in args.part}
    ce_fns = {k: f for n, c in ces.items() for k, f in ce_systems(n, c).items()}
    systems = {"hybrid": None, "bm25-window": window.rerank, **ce_fns}
    nq = sets["ncpqa"]
    test = located_questions(nq, "test").reset_index(drop=True)
    test = test.head(args.max_questions) if args.max_questions else test
    report = {"threads": args.threads, "ncpqa_questions": len(test), "rows": []}
    if not args.no_ncpqa:
        report["rows"] = ncpqa_rows(b, test, systems)
    if args.latency:
        report["latency"] = latency(b, test["question"].head(args.latency).tolist(),
                                    {"bm25-window": window.rerank, **{n: c.rerank for n, c in ces.items()}})
        print(pd.DataFrame(report["latency"]).to_string(index=False))
    if not args.no_lecoqa:
        sets["full_pool"] = args.full_pool
        q, cand = lecoqa_candidates(sets, b.retriever.encoder, b.model_id, args.cache)
        report["lecoqa_pool"] = len(sets["pool"])
        if args.max_questions:
            q, cand = q.head(args.max_questions), cand[:args.max_questions]
        lsys = {"hybrid": None, **ce_fns}
        report["rows"] += lecoqa_rows(sets, q, cand, lsys)
        report["lecoqa_questions"] = len(q)
    report["parts"] = {n: c.info for n, c in ces.items()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, ensure_ascii=False, indent=1, default=str), encoding="utf-8")
    print(pd.DataFrame(report["rows"]).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
