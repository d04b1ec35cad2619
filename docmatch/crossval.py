"""Cross-validated related-document evaluation by law (SPEC §12), both directions, in one run.

- Forward: every title-pattern regulation (LawRefBook: 163) ranks its parent among ALL laws (317); recall@1,
  MRR. Reverse: every parent law ranks its implementing regulations among a capped pool of regulations
  (:func:`docmatch.folds.reverse_pool`); recall@10, MRR, MAP.
- Folds by law (:mod:`docmatch.folds`): per seed, ``k`` folds; LTM-B is trained on the other folds (dev carved
  from them) and scores its fold's queries only, so every query is scored once per seed by a model that never
  saw its law. Figures pool all queries of all folds; LTM-B rows are mean ± std over seeds.
- Baselines score every query (untrained; BM25 is :class:`docmatch.baselines.SparseBM25`, the project kernel's
  formula as one sparse product): ``truncation`` / ``mean`` (cosine of first / mean segment
  vectors), ``bm25`` (char bigrams of the first segments LTM-B sees), and BM25 over the WHOLE texts with the
  two strippings: ``bm25 whole, pair-stripped`` (SPEC §12: only what names the other document of the pair is
  removed, :func:`docmatch.baselines.pair_stripped_scores`; the default) and ``bm25 whole, all titles
  stripped`` (every law title removed from every text, :func:`docmatch.pairs.load_texts`, as the segment
  vectors are embedded: one text and one cached embedding per document).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from docmatch.baselines import SparseBM25, cosine_scores, pair_stripped_scores
from docmatch.ltm import LTMConfig
from docmatch.ranking import rank_metrics, rerank, set_metrics
from docmatch.train import TrainConfig, ltm_scores, train_ltm


@dataclass(frozen=True)
class CVSetup:
    """folds: k; seeds: fold-assignment and LTM-B seeds; max_segments: rows per document; reverse_others:
    non-pattern regulations added to the reverse pool; rerank_k / reverse_k: candidates LTM-B re-ranks
    forward / reverse; recall_k: the reverse recall cut-off."""

    folds: int = 5
    seeds: tuple[int, ...] = (13, 14, 15)
    max_segments: int = 1
    reverse_others: int = 600
    rerank_k: int = 10
    reverse_k: int = 50
    recall_k: int = 10


def scorers(mats: dict, seen: dict, stripped: dict, raw: dict, titles: dict, cands: list[str]) -> dict:
    """name -> score(query, cands') for the baselines (module docstring) over the candidate set ``cands``
    (every ``cands'`` must be a subset of it)."""
    index = {c: i for i, c in enumerate(cands)}
    seg, whole, pair = (SparseBM25([seen[c] for c in cands]), SparseBM25([stripped[c] for c in cands]),
                        SparseBM25([raw[c] for c in cands]))
    fns = {k: (lambda a, c, k=k: cosine_scores(mats[a], [mats[x] for x in c], k)) for k in ("truncation", "mean")}
    fns["bm25"] = lambda a, c: seg.scores(seen[a])[[index[x] for x in c]]
    fns["bm25 whole, all titles stripped"] = lambda a, c: whole.scores(stripped[a])[[index[x] for x in c]]
    fns["bm25 whole, pair-stripped"] = lambda a, c: pair_stripped_scores(
        pair, raw[a], titles[a], cands, raw, titles)[[index[x] for x in c]]
    return fns


def pooled(parts: list[dict]) -> dict:
    """Query-weighted means of per-fold metric dicts (keys ``fwd …`` / ``rev …``, each prefix with its own
    ``… queries`` count): the figure over all queries of all folds."""
    out = {}
    for pre in sorted({k.split(" ")[0] for k in parts[0]}):
        n = sum(p[f"{pre} queries"] for p in parts)
        for k in (k for k in parts[0] if k.startswith(pre + " ") and k != f"{pre} queries"):
            out[k] = sum(p[k] * p[f"{pre} queries"] for p in parts) / max(n, 1)
        out[f"{pre} queries"] = n
    return out


def fold_rows(corpus, mats, folds: dict, seed: int, setup: CVSetup, fwd: tuple, rev: tuple,
              tcfg: TrainConfig, log=print) -> list[dict]:
    """LTM-B (scoring all / re-ranking) per fold for one seed, pooled over folds: one row per system with
    the forward and reverse metrics. ``fwd`` / ``rev``: ``(candidates, queries, first-stage scorer)``;
    forward queries a DataFrame ``a, b``, reverse a dict law -> set of regulation ids."""
    from docmatch.folds import fold_pairs
    from docmatch.pairs import PairConfig

    dim = next(iter(mats.values())).shape[1]
    cfg, parts = LTMConfig(dim=dim, max_segments=setup.max_segments), {}
    for f in range(setup.folds):
        pairs = fold_pairs(corpus, folds, f, PairConfig(seed=seed))
        model, hist = train_ltm(pairs, mats, cfg, replace(tcfg, seed=seed), fwd[0], log=lambda *_: None)
        fn = lambda a, c, m=model: ltm_scores(m, mats, a, c)  # noqa: E731
        test_laws = {b for b, g in folds.items() if g == f}
        q_f = fwd[1][fwd[1]["b"].isin(test_laws)]
        q_r = {b: r for b, r in rev[1].items() if b in test_laws}
        for name, s_f, s_r in (("ltm-b", fn, fn), ("ltm-b@rerank", rerank(fwd[2], fn, setup.rerank_k),
                                                   rerank(rev[2], fn, setup.reverse_k))):
            m = {**{f"fwd {k}": v for k, v in rank_metrics(s_f, q_f, fwd[0]).items()},
                 **{f"rev {k}": v for k, v in set_metrics(s_r, q_r, rev[0], setup.recall_k).items()}}
            parts.setdefault(name, []).append(m)
        log(f"seed {seed} fold {f}: {len(q_f)} queries, {len(hist['epochs'])} epochs, {hist['seconds']:.0f} s")
    return [{"system": k, "seed": seed, **pooled(v)} for k, v in parts.items()]


def baseline_table(fns: dict, fwd_q: pd.DataFrame, rev_q: dict, cands: list[str], pool: list[str],
                   k: int) -> list[dict]:
    """One row per baseline: forward metrics over all queries, reverse over all parent laws."""
    rows = []
    for name, fn in fns.items():
        row = {"system": name, **{f"fwd {a}": v for a, v in rank_metrics(fn["fwd"], fwd_q, cands).items()}}
        row.update({f"rev {a}": v for a, v in set_metrics(fn["rev"], rev_q, pool, k).items()})
        rows.append(row)
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Mean and std (over seeds; baselines one run, std 0) of every metric per system."""
    df, out = pd.DataFrame(rows), []
    metrics = [c for c in df.columns if c.startswith(("fwd ", "rev ")) and not c.endswith("queries")]
    for name, g in df.groupby("system", sort=False):
        out.append({"system": name, "runs": int(len(g)), **{m: float(g[m].mean()) for m in metrics},
                    **{f"{m} std": float(g[m].std(ddof=0)) for m in metrics},
                    "fwd queries": int(g["fwd queries"].iloc[0]), "rev queries": int(g["rev queries"].iloc[0])})
    return out


def run_cv(corpus_path, encoder_dir, cache_dir, setup: CVSetup = CVSetup(), tcfg: TrainConfig = TrainConfig(),
           log=print) -> dict:
    """The whole cross-validated measurement (module docstring) on LawRefBook-shaped data. Returns
    ``{"rows", "summary", "embedding", "setup", "pool", ...}``.

    Raises:
        ValueError: too many folds, or a document with no text (:mod:`docmatch.folds`, :mod:`docmatch.segments`).
    """
    from docmatch.folds import law_folds, reverse_pool
    from docmatch.pairs import LAW_LEVEL, load_texts, parents, read_corpus
    from docmatch.segments import encoder_cache, segments

    corpus = read_corpus(corpus_path)
    laws, pos = corpus[corpus["level"] == LAW_LEVEL], parents(corpus)
    cands, pool = sorted(laws["id"]), reverse_pool(corpus, setup.reverse_others)
    stripped = load_texts(corpus, cands + pool)
    raw, titles = dict(zip(corpus["id"], corpus["text"])), dict(zip(corpus["id"], corpus["title"]))
    cache, t0 = encoder_cache(encoder_dir, cache_dir), time.perf_counter()
    mats = cache.matrices(stripped, setup.max_segments)
    emb = {**cache.stats, "documents": len(mats), "wall_s": round(time.perf_counter() - t0, 1)}
    log(f"embedding: {emb}")
    seen = {d: "".join(segments(t, cache.cfg, setup.max_segments)) for d, t in stripped.items()}
    f_fns, r_fns = (scorers(mats, seen, stripped, raw, titles, c) for c in (cands, pool))
    rev_q = {b: set(g["a"]) for b, g in pos.groupby("b")}
    fns = {k: {"fwd": f_fns[k], "rev": r_fns[k]} for k in f_fns}
    t1 = time.perf_counter()
    rows = baseline_table(fns, pos, rev_q, cands, pool, setup.recall_k)
    log(f"baselines: {time.perf_counter() - t1:.0f} s")
    best_f = max(rows, key=lambda r: (r["fwd recall@1"], r["fwd mrr"]))["system"]
    best_r = max(rows, key=lambda r: (r["rev map"], r["rev mrr"]))["system"]
    for seed in setup.seeds:
        folds = law_folds(laws, pos, setup.folds, seed)
        rows += fold_rows(corpus, mats, folds, seed, setup, (cands, pos, f_fns[best_f]),
                          (pool, rev_q, r_fns[best_r]), tcfg, log)
    return {"rows": rows, "summary": summarize(rows), "embedding": emb, "setup": asdict(setup),
            "train": asdict(tcfg), "best_baseline": {"fwd": best_f, "rev": best_r}, "candidates": len(cands),
            "pool": {"regulations": len(pool), "title_pattern": int(pos["a"].nunique()),
                     "others": len(pool) - int(pos["a"].nunique())}}
