"""Evaluation of the fused related ranking on a citation-stripped split (SPEC §12; :mod:`docmatch.fusion`).

Pool (what an index version of LawRefBook would hold): every law, the sampled citation regulations
(:mod:`docmatch.citations`, each with its parent's citation stripped) and the title-pattern regulations
(:mod:`docmatch.pairs`, all law titles stripped). Each held-out (``test``) regulation ranks its parent among ALL
laws. LTM-B is trained on the title-pattern pairs plus the ``train`` / ``dev`` citation pairs (split by law: no
test law is trained on); the fusion weights are fitted on the ``train`` citation queries and the title-pattern
train queries; figures are reported on the held-out ones: each signal alone, BM25, fused.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from docmatch.fusion import SIGNALS, SignalPool, fit_weights, metrics, query_features


def build_pool(corpus: pd.DataFrame, cite: pd.DataFrame, title_pairs: pd.DataFrame, mats: dict, ltm=None
               ) -> SignalPool:
    """The :class:`~docmatch.fusion.SignalPool` of the module docstring over ``mats`` (id -> segment matrix)."""
    from docmatch.citations import stripped_texts
    from docmatch.pairs import LAW_LEVEL, load_texts

    laws = corpus.loc[corpus["level"] == LAW_LEVEL, "id"].tolist()
    texts = stripped_texts(corpus, cite)
    tp = load_texts(corpus, set(title_pairs["a"]))
    ids = sorted(set(laws) | set(cite["a"]) | set(tp))
    texts = {d: tp.get(d, texts[d]) for d in ids}
    titles = dict(zip(corpus["id"], corpus["title"]))
    m = np.stack([mats[d].mean(0) for d in ids])
    m /= np.maximum(np.linalg.norm(m, axis=1, keepdims=True), 1e-12)
    return SignalPool(ids, texts, titles, m.astype(np.float32), ltm)


def run_fused(corpus: pd.DataFrame, cite: pd.DataFrame, title_pairs: pd.DataFrame, mats: dict, seed: int = 13,
              log=print) -> dict:
    """Train LTM-B, fit the fusion weights, report every system on the held-out queries (module docstring).
    Returns {"weights", "fit", "citation_test": {system: metrics}, "title_test": {...}, "ltm": history}."""
    from docmatch.ltm import LTMConfig
    from docmatch.pairs import LAW_LEVEL
    from docmatch.train import TrainConfig, ltm_scores, train_ltm

    laws = sorted(corpus.loc[corpus["level"] == LAW_LEVEL, "id"])
    cpos = cite[cite["split"] != "test"][["a", "b", "split", "label"]]
    pairs = pd.concat([title_pairs[["a", "b", "split", "label"]], cpos], ignore_index=True)
    pairs = pairs[pairs["split"] != "test"]
    dim = next(iter(mats.values())).shape[1]
    model, hist = train_ltm(pairs, mats, LTMConfig(dim=dim, max_segments=1), TrainConfig(seed=seed),
                            dev_candidates=laws, log=log)
    pool = build_pool(corpus, cite, title_pairs, mats, lambda a, c: ltm_scores(model, mats, a, c))
    tpos = title_pairs[title_pairs["label"] == 1]
    fit_q = pd.concat([cite[cite["split"] == "train"], tpos[tpos["split"] == "train"]])
    f_fit, g_fit = query_features(pool, fit_q["a"], fit_q["b"], laws)
    weights, fig = fit_weights(f_fit, g_fit)
    out = {"weights": weights, "fit": fig, "ltm": {"epochs": len(hist["epochs"]), "seconds": round(hist["seconds"], 1)}}
    for name, q in (("citation_test", cite[cite["split"] == "test"]), ("title_test", tpos[tpos["split"] == "test"])):
        f, g = query_features(pool, q["a"], q["b"], laws)
        rows = {s: metrics(f, g, {s: 1.0}) for s in SIGNALS}
        rows["fused"] = metrics(f, g, weights)
        alone_fit = {s: fit_weights(f_fit, g_fit, only=(s, "link"))[0] for s in ("bm25", "mean", "ltm")}
        rows.update({f"{s}+link": metrics(f, g, w) for s, w in alone_fit.items()})
        out[name] = rows
    return out


def run_version_pool(corpus: pd.DataFrame, cite: pd.DataFrame, means: np.ndarray | None = None) -> dict:
    """The fused ranking as a version of the whole corpus serves it (SPEC §12): the pool is EVERY document of
    ``corpus`` (n), the sampled citation regulations ``cite`` (all splits) with their parent's citation stripped,
    every other text as it is, so their neighbours keep their own ``根据《…》`` clauses (what ``knn_link`` reads).
    ``means``: (n, dim) L2-normalised mean vectors in ``corpus`` order, or None (``mean`` and ``ltm`` 0, the fit
    then weighs ``bm25``, ``link``, ``knn_link`` and ``cited`` only). Weights are fitted on the ``train`` citation queries;
    returns {"weights", "fit", "pool", and per split ``train`` / ``dev`` / ``test``: {system: metrics}} with each
    signal alone, ``bm25+knn_link``, ``fused without cited`` (every signal but the ``cited`` prior, fitted the same
    way) and ``fused``.

    Raises:
        ValueError: ``means`` does not have one row per corpus document.
    """
    from docmatch.citations import stripped_texts
    from docmatch.pairs import LAW_LEVEL

    ids = corpus["id"].tolist()
    if means is None:
        means, only = np.zeros((len(ids), 1), dtype=np.float32), ("bm25", "link", "knn_link", "cited")
    else:
        only = None
    if len(means) != len(ids):
        raise ValueError(f"means has {len(means)} rows for {len(ids)} corpus documents")
    pool = SignalPool(ids, stripped_texts(corpus, cite), dict(zip(corpus["id"], corpus["title"])), means)
    laws = corpus.loc[corpus["level"] == LAW_LEVEL, "id"].tolist()
    feats = {s: query_features(pool, q["a"], q["b"], laws) for s, q in cite.groupby("split")}
    weights, fig = fit_weights(*feats["train"], only=only)
    pair_w, _ = fit_weights(*feats["train"], only=("bm25", "knn_link"))
    no_cited, _ = fit_weights(*feats["train"], only=tuple(x for x in (only or SIGNALS) if x != "cited"))
    out = {"weights": weights, "fit": fig, "pool": len(ids), "bm25+knn_link_weights": pair_w,
           "without_cited_weights": no_cited}
    for s, (f, g) in feats.items():
        rows = {x: metrics(f, g, {x: 1.0}) for x in SIGNALS}
        out[s] = {**rows, "bm25+knn_link": metrics(f, g, pair_w), "fused without cited": metrics(f, g, no_cited),
                  "fused": metrics(f, g, weights)}
    return out
