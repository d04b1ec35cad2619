"""Related-document evaluation (SPEC §12): baselines and LTM-B (with its ablations) in one run.

Each held-out (``test``) positive pair's query ``a`` ranks its ``b`` among a candidate pool (for LawRefBook:
ALL laws of the corpus); recall@1 and MRR (:mod:`docmatch.ranking`). Rows: ``truncation``, ``mean`` (cosine of
the first / mean segment vectors), ``bm25`` (bigram BM25 of the text of the same first segments LTM-B sees:
every system reads the same text; over the whole texts BM25 is perfect on this data, docs/related.md), then per
seed LTM-B scoring every candidate (``ltm-b``), LTM-B re-ranking the best cheap baseline's top ``rerank_k``
(``ltm-b@rerank``), and the ablations (``-positions``, ``-transformer``, ``cosine``).

With ``--folds K`` the measurement is cross-validated by law instead (:func:`docmatch.crossval.run_cv`): every
title-pattern regulation a test query once per seed, both directions (a regulation -> its law among all laws;
a law -> its regulations among a capped regulation pool of ``--reverse-others`` non-pattern regulations plus
all pattern ones), baselines including whole-text BM25 with SPEC §12's pair-specific stripping; no pair file.

CLI: ``python -m docmatch.evaluate --corpus FILE (--pairs FILE | --folds K) --encoder CKPT --cache DIR
[--max-segments 1] [--seeds 13 14 15] [--reverse-others 600] [--out FILE.json]``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from docmatch.baselines import BigramBM25, cosine_scores
from docmatch.ltm import LTMConfig
from docmatch.ranking import rank_metrics, rerank
from docmatch.train import TrainConfig, ltm_scores, train_ltm

ABLATIONS = {"ltm-b": {}, "ltm-b -positions": {"positions": False},
             "ltm-b -transformer": {"transformer": False}, "ltm-b cosine": {"interaction": "cosine"}}


@dataclass(frozen=True)
class EvalSetup:
    """max_segments: rows per document (1: the LawRefBook default set, 480 documents, embeds in ~3 min on 2
    cores; docs/related.md); seeds: LTM-B training seeds; rerank_k: candidates LTM-B re-ranks;
    ablations: also train the three ablations."""

    max_segments: int = 1
    seeds: tuple[int, ...] = (13, 14, 15)
    rerank_k: int = 10
    ablations: bool = True


def baseline_rows(pairs: pd.DataFrame, mats: dict, texts: dict, cands: list[str], split: str = "test") -> dict:
    """name -> (metrics, score function) of the three baselines on ``split``'s positives."""
    pos = pairs[(pairs["split"] == split) & (pairs["label"] == 1)]
    bm = BigramBM25([texts[c] for c in cands])
    index = {c: i for i, c in enumerate(cands)}
    fns = {k: (lambda a, c, k=k: cosine_scores(mats[a], [mats[x] for x in c], k)) for k in ("truncation", "mean")}
    fns["bm25"] = lambda a, c: bm.scores(texts[a])[[index[x] for x in c]]
    return {k: (rank_metrics(f, pos, cands), f) for k, f in fns.items()}


def ltm_rows(pairs, mats, cands, setup: EvalSetup, base, dim: int, tcfg: TrainConfig = TrainConfig(),
             log=print) -> list[dict]:
    """One row per (variant, seed): test metrics, dev MRR, train seconds, epochs; plus ``ltm-b@rerank``
    (re-ranking ``base``'s top ``setup.rerank_k``)."""
    test = pairs[(pairs["split"] == "test") & (pairs["label"] == 1)]
    rows = []
    for name, switch in (ABLATIONS if setup.ablations else {"ltm-b": {}}).items():
        cfg = LTMConfig(dim=dim, max_segments=setup.max_segments, **switch)
        for seed in setup.seeds:
            model, hist = train_ltm(pairs, mats, cfg, replace(tcfg, seed=seed), cands, log=lambda *_: None)
            fn = lambda a, c, m=model: ltm_scores(m, mats, a, c)  # noqa: E731
            info = {"seed": seed, "dev_mrr": hist["best_dev_mrr"], "train_s": round(hist["seconds"], 1),
                    "epochs": len(hist["epochs"])}
            rows.append({"system": name, **rank_metrics(fn, test, cands), **info})
            if name == "ltm-b":
                rows.append({"system": "ltm-b@rerank", **rank_metrics(rerank(base, fn, setup.rerank_k), test, cands),
                             **info})
            log(json.dumps(rows[-1], ensure_ascii=False))
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and std over seeds of recall@1 and MRR per system (baselines have one row, std 0)."""
    df = pd.DataFrame(rows)
    out = []
    for name, g in df.groupby("system", sort=False):
        out.append({"system": name, "runs": int(len(g)),
                    "recall@1": float(g["recall@1"].mean()), "recall@1_std": float(g["recall@1"].std(ddof=0)),
                    "mrr": float(g["mrr"].mean()), "mrr_std": float(g["mrr"].std(ddof=0)),
                    "queries": int(g["queries"].iloc[0])})
    return out


def run(corpus_path, pairs_path, encoder_dir, cache_dir, setup: EvalSetup = EvalSetup(),
        tcfg: TrainConfig = TrainConfig(), log=print) -> dict:
    """The whole measurement on LawRefBook-shaped data: pairs (:func:`docmatch.pairs.read_pairs`), stripped
    texts, matrices (:func:`docmatch.segments.encoder_cache`, first ``setup.max_segments`` segments), the
    candidate pool = every law of the corpus. Returns ``{"rows", "summary", "embedding", "setup"}``."""
    from docmatch.pairs import LAW_LEVEL, load_texts, read_corpus, read_pairs
    from docmatch.segments import encoder_cache, segments

    corpus, pairs = read_corpus(corpus_path), read_pairs(pairs_path)
    cands = sorted(corpus.loc[corpus["level"] == LAW_LEVEL, "id"])
    ids = sorted(set(pairs["a"]) | set(pairs["b"]) | set(cands))
    texts = load_texts(corpus, ids)
    cache = encoder_cache(encoder_dir, cache_dir)
    t0 = time.perf_counter()
    mats = cache.matrices(texts, setup.max_segments)
    emb = {**cache.stats, "documents": len(ids), "wall_s": round(time.perf_counter() - t0, 1),
           "segments": int(sum(len(m) for m in mats.values()))}
    log(json.dumps({"embedding": emb}))
    seen = {d: "".join(segments(t, cache.cfg, setup.max_segments)) for d, t in texts.items()}
    base = baseline_rows(pairs, mats, seen, cands)
    rows = [{"system": k, **m} for k, (m, _) in base.items()]
    best = max(base, key=lambda k: (base[k][0]["recall@1"], base[k][0]["mrr"]))
    dim = next(iter(mats.values())).shape[1]
    rows += ltm_rows(pairs, mats, cands, setup, base[best][1], dim, tcfg, log)
    return {"rows": rows, "summary": summarize(rows), "embedding": emb, "best_baseline": best,
            "setup": asdict(setup), "train": asdict(tcfg), "candidates": len(cands)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m docmatch.evaluate", description=__doc__.split("\n\n")[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--pairs", help="pair file (the fixed-split measurement)")
    p.add_argument("--folds", type=int, help="cross-validate by law with K folds instead of a pair file")
    p.add_argument("--reverse-others", type=int, default=600, help="non-pattern regulations in the reverse pool")
    p.add_argument("--encoder", required=True, help="encoder checkpoint (the version's pinned one)")
    p.add_argument("--cache", required=True, help="segment-vector cache folder")
    p.add_argument("--max-segments", type=int, default=EvalSetup.max_segments)
    p.add_argument("--seeds", type=int, nargs="+", default=list(EvalSetup.seeds))
    p.add_argument("--no-ablations", action="store_true")
    p.add_argument("--out")
    a = p.parse_args(argv)
    if (a.pairs is None) == (a.folds is None):
        p.error("give exactly one of --pairs and --folds")
    try:
        res = _run(a)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if a.out:
        from storage import atomic_write_text

        atomic_write_text(a.out, json.dumps(res, ensure_ascii=False, indent=1))
    for r in res["summary"]:
        print(json.dumps(r, ensure_ascii=False))
    return 0


def _run(a) -> dict:
    """The fixed-split run (``--pairs``) or the cross-validated one (``--folds``) for parsed arguments ``a``."""
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    if a.folds is not None:
        from docmatch.crossval import CVSetup, run_cv

        return run_cv(a.corpus, a.encoder, a.cache, CVSetup(folds=a.folds, seeds=tuple(a.seeds),
                                                            max_segments=a.max_segments,
                                                            reverse_others=a.reverse_others), log=log)
    setup = EvalSetup(max_segments=a.max_segments, seeds=tuple(a.seeds), ablations=not a.no_ablations)
    return run(a.corpus, a.pairs, a.encoder, a.cache, setup, log=log)


if __name__ == "__main__":
    raise SystemExit(main())
