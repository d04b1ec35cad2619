"""Fitting the fused related ranking's weights at part build (SPEC §12; :mod:`docmatch.fusion`).

The pool is every document of the index version (texts from its chunks, :func:`docmatch.fused_serve.version_texts`;
pair ids the version holds as an ``external_id`` are read as its documents, :func:`docmatch.stage.to_version_ids`)
and the corpus documents of the pair file and the candidates outside it: the fit ranks against what serving ranks
against, and the neighbours whose links ``knn_link`` reads are the version's. A document's text for
BM25 and links is its text, a regulation of a positive pair with what names its parent stripped
(:func:`docmatch.pairs.strip_other`: the recipe of the citation-stripped split, :mod:`docmatch.citations`),
whether it comes from the version or the corpus; a corpus document's mean vector is the mean of its (embedded)
segment rows, a document of the version uses the mean of ALL its chunk vectors, as served (a positive pair's
regulation without its chunks that name the parent: :func:`docmatch.stage.citing_names`). Weights are fitted on
the ``train`` positives (each ``a`` ranking its ``b`` among the candidates) and reported on the ``test`` ones
beside each signal alone. With no train positive the weights stay :data:`docmatch.fusion.DEFAULT_WEIGHTS` (LTM-B
off), recorded as unfitted; a fit whose pairs never show a typed link keeps the default link weight (there is
nothing to fit it on).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from docmatch.fusion import (DEFAULT_WEIGHTS, LTM_DEPTH, SIGNALS, SignalPool, fit_weights, metrics,
                             nearest_by_mean, query_features)


def pool_texts(version_dir, ids, corpus=None, pairs: pd.DataFrame | None = None) -> tuple[dict, dict]:
    """(id -> text, id -> title) of ``ids``: the version's own from its chunks, the rest from ``corpus`` (module
    docstring's stripping for the ``a`` of a positive pair whose ``b`` the corpus titles)."""
    from docmatch.fused_serve import version_texts
    from docmatch.pairs import read_corpus, strip_other

    texts = {d: t for d, t in version_texts(version_dir).items() if d in set(ids)}
    titles = _version_titles(version_dir, texts)
    rest = set(ids) - set(texts)
    if rest and corpus is not None:
        c = read_corpus(corpus)
        sub = c[c["id"].isin(rest)]
        texts.update(zip(sub["id"], sub["text"]))
        titles.update(zip(sub["id"], sub["title"]))
    if pairs is not None:  # the version's own regulations too: the fit ranks as the stripped split does
        pos = pairs[(pairs["label"] == 1) & pairs["a"].isin(set(texts)) & pairs["b"].isin(set(titles))]
        for a, b in zip(pos["a"], pos["b"]):
            if titles[b]:
                texts[a] = strip_other(texts[a], titles[b])
    return texts, titles


def _version_ids(version_dir) -> set[str]:
    from pathlib import Path

    return set(pd.read_parquet(Path(version_dir) / "chunks.parquet", columns=["doc_id"])["doc_id"].astype(str))


def _version_titles(version_dir, texts: dict) -> dict:
    from pathlib import Path

    c = pd.read_parquet(Path(version_dir) / "chunks.parquet", columns=["doc_id", "title"]).drop_duplicates("doc_id")
    return {str(d): (t or "") for d, t in zip(c["doc_id"], c["title"]) if str(d) in texts}


def fit_fusion(version_dir, pairs: pd.DataFrame, mats: dict, ltm, cands, corpus=None, drop: dict | None = None
               ) -> dict:
    """The part's ``fusion`` record: ``weights`` (signal -> weight), ``fitted`` (bool), ``fit`` (grid figures on
    the train queries), ``test`` (system -> recall@1 / MRR on the test positives: each signal alone and
    ``fused``), ``pool`` (documents).

    The pool is EVERY document of the version (as serving ranks against them: their texts are the neighbours
    ``knn_link`` reads, and they set the z-normalisation) plus the pair documents outside it. ``mats``: id ->
    segment matrix of every pair id; ``ltm``: ``(a, cand ids) -> logits``, scored where serving scores it: on
    the :data:`docmatch.fusion.LTM_DEPTH` documents nearest by mean vector, of those the ones ``mats`` holds (the
    others get the lowest logit); ``drop``: the version's regulations'
    chunks left out of their mean (:func:`docmatch.stage.citing_names`).
    """
    own = _version_ids(version_dir)
    ids = sorted(((set(pairs["a"]) | set(pairs["b"]) | set(cands)) & set(mats)) | own)
    texts, titles = pool_texts(version_dir, ids, corpus, pairs)
    dim = next(iter(mats.values())).shape[1]
    m = np.zeros((len(ids), dim), dtype=np.float32)
    inside = [k for k, d in enumerate(ids) if d in own]
    outside = [k for k, d in enumerate(ids) if d not in own]
    if outside:  # corpus copies: the mean of their embedded segments
        m[outside] = np.stack([mats[ids[k]].mean(0) for k in outside])
        m[outside] /= np.maximum(np.linalg.norm(m[outside], axis=1, keepdims=True), 1e-12)
    if inside:  # the version's own documents: the mean of ALL their chunk vectors, as served
        from docmatch.fused_serve import version_means

        m[inside] = version_means(version_dir, [ids[k] for k in inside], drop)
    row = {d: k for k, d in enumerate(ids)}
    pool = SignalPool(ids, texts, titles, m, _on_known(ltm, mats, lambda a, c: _nearest(m, row, a, c)))
    pos = pairs[pairs["label"] == 1]
    cands = [c for c in cands if c in pool.row]
    train = pos[pos["split"] == "train"]
    f, g = query_features(pool, train["a"], train["b"], cands)
    if not len(g):
        return {"weights": dict(DEFAULT_WEIGHTS), "fitted": False, "pool": len(ids),
                "reason": "no train positive among the candidates"}
    weights, fig = fit_weights(f, g)
    if not f[..., SIGNALS.index("link")].any():
        weights["link"], fig["link"] = DEFAULT_WEIGHTS["link"], "default: no typed link among the fit pairs"
    out = {"weights": weights, "fitted": True, "fit": fig, "pool": len(ids)}
    test = pos[pos["split"] == "test"]
    ft, gt = query_features(pool, test["a"], test["b"], cands)
    if len(gt):
        out["test"] = {**{s: metrics(ft, gt, {s: 1.0}) for s in SIGNALS}, "fused": metrics(ft, gt, weights)}
    return out


def _nearest(means: np.ndarray, row: dict, a: str, cands: list[str], depth: int = LTM_DEPTH) -> set[int]:
    """Positions in ``cands`` of the ``depth`` nearest to ``a`` by mean vector (``means`` rows by ``row``): the
    documents :class:`docmatch.fused_serve.FusedRanker` scores with LTM-B (:func:`docmatch.fusion.nearest_by_mean`)."""
    rows = np.array([row[c] for c in cands], dtype=np.int64)
    return set(nearest_by_mean(means, row[a], rows, depth).tolist())


def _on_known(ltm, mats: dict, served=None):
    """``ltm`` scored only on the candidates ``mats`` holds and, given ``served`` (``(a, cands) -> positions``),
    among those serving scores (:func:`_nearest`): the fit then sees LTM-B as serving ranks with it, where a
    document past the depth gets the lowest logit even when it is the gold. The others get the lowest logit
    computed (0 when none is)."""
    def score(a: str, cands: list[str]) -> np.ndarray:
        keep = served(a, cands) if served is not None else range(len(cands))
        known = [k for k, c in enumerate(cands) if c in mats and k in keep]
        s = np.asarray(ltm(a, [cands[k] for k in known]), dtype=np.float64) if known else np.zeros(0)
        out = np.full(len(cands), float(s.min()) if len(s) else 0.0)
        out[known] = s
        return out
    return score


def build_own_part(version_dir, out_file, max_segments: int = 1, seed: int = 13, reason: str = "") -> dict:
    """The ``related`` part of a version with no labelled pair (no pair file, no corpus with pairs: e.g. the
    ``tiny`` profile): the fused ranking over the version's own documents with :data:`DEFAULT_WEIGHTS` (BM25,
    mean vectors and typed links; LTM-B, untrained, weighs 0) written to ``out_file``. Returns the figures.

    Raises:
        FileNotFoundError: the version keeps no chunk vectors.
    """
    import json
    from pathlib import Path

    import torch

    from docmatch.ltm import LTMB, LTMConfig, save
    from docmatch.segments import version_matrices
    from retrieval.parts import version_identity

    vdir = Path(version_dir)
    manifest = json.loads((vdir / "manifest.json").read_text(encoding="utf-8"))
    mats = version_matrices(vdir, max_segments=max_segments)
    torch.manual_seed(seed)
    model = LTMB(LTMConfig(dim=next(iter(mats.values())).shape[1], max_segments=max_segments)).eval()
    fusion = {"weights": dict(DEFAULT_WEIGHTS), "fitted": False, "pool": len(mats),
              "reason": reason or "no labelled pair: the version's own documents, default weights"}
    figs = {"own_documents": len(mats), "fusion": fusion}
    Path(out_file).parent.mkdir(parents=True, exist_ok=True)
    save(model, out_file, {"provenance": version_identity(manifest), "figures": figs, "fusion": fusion})
    return figs
