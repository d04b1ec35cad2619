"""The sparse side of an index version and its fitted hybrid weights (SPEC §7), built at publish time.

Called by :func:`retrieval.build.publish_staged`. Reuses what the previous version already computed
(chunk term counts under the same segmenter and BM25 config, :mod:`retrieval.term_counts`; fit-query vectors
under the same encoder), so a refresh after editing one document tokenizes and embeds only what changed. The
fusion weights are fitted again only when the encoder or the sparse side's key changed, or when the chunks
added or removed since the last fit exceed ``FusionConfig.refit_share`` of the corpus; otherwise they are
carried over, with the fit's caches, and the manifest says from which version (``fusion.fitted_in``).
"""
from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import faiss
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from retrieval.dense import build_index, search_rows
from retrieval.fusion import FusionConfig, fit_fusion
from retrieval.mining import mask_leads
from retrieval.sparse import SparseConfig, SparseIndex, Tokenize, make_tokenizer, read_tokens, sparse_key
from retrieval.term_counts import TermCounts

Embed = Callable[[list[str]], np.ndarray]
SPARSE_DIR = "sparse"
FUSION_DIR = "fusion"


@dataclass
class SparseSide:
    """What publishing adds to a version: manifest keys, stats, and ``write(version_dir)``."""

    manifest: dict
    stats: dict
    sparse: SparseIndex
    counts: TermCounts
    fit_queries: pd.DataFrame | None = None
    masked: pd.DataFrame | None = None
    carried: list[Path] = field(default_factory=list)

    def write(self, vdir: Path) -> None:
        """Write ``sparse/`` (bm25s files + term counts) and the fusion fit's caches (``fusion/queries.parquet``,
        ``fusion/masked.parquet``; copied from the previous version when the weights were carried over)."""
        d = vdir / SPARSE_DIR
        d.mkdir()
        self.sparse.save(d)
        self.counts.save(d)
        if self.fit_queries is not None or self.masked is not None or self.carried:
            (vdir / FUSION_DIR).mkdir()
        for f in self.carried:
            shutil.copy2(f, vdir / FUSION_DIR / f.name)
        if self.fit_queries is not None:
            q = self.fit_queries
            table = pa.table({"query": q["query"].tolist(), "doc_id": q["doc_id"].astype(str).tolist(),
                              "kind": q.get("kind", pd.Series([""] * len(q))).astype(str).tolist(),
                              "tokens": pa.array(q["tokens"].tolist(), type=pa.list_(pa.string())),
                              "vector": pa.array([np.asarray(v, np.float32).tolist() for v in q["vector"]],
                                                 type=pa.list_(pa.float32()))})
            pq.write_table(table, vdir / FUSION_DIR / "queries.parquet", compression="zstd")
        if self.masked is not None:
            m = self.masked
            pq.write_table(pa.table({"chunk_id": pa.array(m["chunk_id"].to_numpy(np.int64)), "text": m["text"].tolist(),
                                     "vector": pa.array([np.asarray(v, np.float32).tolist() for v in m["vector"]],
                                                        type=pa.list_(pa.float32()))}),
                           vdir / FUSION_DIR / "masked.parquet", compression="zstd")


def _prev_manifest(root: Path, prev: str | None) -> dict:
    if prev is None or not (root / prev / "manifest.json").is_file():
        return {}
    return json.loads((root / prev / "manifest.json").read_text(encoding="utf-8"))


def _prev_fit_cache(root: Path, prev: str | None) -> dict[str, tuple[list[str], np.ndarray]]:
    p = root / (prev or "") / FUSION_DIR / "queries.parquet"
    if prev is None or not p.is_file():
        return {}
    df = pd.read_parquet(p)
    return {q: (list(t), np.asarray(v, np.float32)) for q, t, v in zip(df["query"], df["tokens"], df["vector"])}


def build_sparse_side(root: Path, plan: dict, chunks: pd.DataFrame, index: faiss.Index, cfg: SparseConfig,
                      tokenizer: Callable[[], tuple[Tokenize, dict]] | None, fusion_queries: pd.DataFrame | None,
                      query_embed_factory: Callable[[], Embed], fusion: FusionConfig | None,
                      vectors: np.ndarray | None = None, passage_embed_factory: Callable[[], Embed] | None = None,
                      search_params=None) -> SparseSide:
    """BM25 over the chunks (term counts reused from the previous version where its sparse key matches) and,
    with ``fusion_queries`` (query, doc_id), the hybrid weights: carried over from the previous version when
    :func:`_carry_fusion` allows, else fitted. With ``fusion.mask_leads`` the fit
    ranks a copy of the corpus whose chunks containing a lead query have it cut out
    (:func:`retrieval.mining.mask_leads`); those chunks are re-tokenized and re-embedded with
    ``passage_embed_factory()`` (needs ``vectors``; their vectors are reused from the previous version).
    ``search_params``: FAISS search parameters for ``index`` (:func:`retrieval.dense.search_params`).

    Returns a :class:`SparseSide` whose ``manifest`` holds ``sparse`` (key, vocabulary size) and
    ``fusion`` (:func:`retrieval.fusion.fit_fusion`'s result, plus ``refit``, ``changed_since_fit``, and
    ``fitted_in`` when carried over).
    """
    fusion = fusion or FusionConfig()
    tokenize, ident = (tokenizer or (lambda: make_tokenizer(cfg.segmenter)))()
    key = sparse_key(cfg, ident)
    prev = plan.get("previous")
    pm = _prev_manifest(root, prev)
    same_sparse = pm.get("sparse", {}).get("key") == key
    ids = chunks["chunk_id"].to_numpy(np.int64)
    counts, n_todo = _chunk_counts(root / prev / SPARSE_DIR if same_sparse and prev else None, ids, chunks, tokenize)
    sp = SparseIndex.from_counts(counts, cfg)
    man = {"sparse": {"dir": SPARSE_DIR, "key": key, "vocab": int(len(sp.bm25.vocab_dict)),
                      "backend": ident["backend"], "segmenter_model_id": ident["model_id"]}}
    stats = {"sparse_tokenized": n_todo, "sparse_reused": len(ids) - n_todo}
    side = SparseSide(man, stats, sp, counts)
    if fusion_queries is None or not len(fusion_queries):
        man["fusion"] = {"w_dense": 0.5, "w_sparse": 0.5, "rrf_k": fusion.rrf_k, "depth": fusion.depth,
                         "method": fusion.method,
                         "fitted": False, "queries": 0}
        return side
    reuse = same_sparse and pm.get("model_id") == plan["model_id"]
    changed = (len(plan.get("todo", ids)) + int(plan.get("removed", 0))) / max(len(ids), 1)
    carried = _carry_fusion(root, prev, pm, fusion, changed) if reuse else None
    if carried is not None:
        man["fusion"], side.carried = carried
        stats.update(fusion_w_dense=man["fusion"]["w_dense"], fusion_queries_embedded=0, fusion_refit=False)
        return side
    fit = _FitInputs(root, prev if reuse else None, chunks, ids, counts, tokenize, cfg)
    q = fit.queries(fusion_queries, query_embed_factory)
    fit_index, fit_sp, masked, mvecs = index, sp, {}, None
    if fusion.mask_leads and vectors is not None and passage_embed_factory is not None:
        masked = mask_leads(chunks["text"].tolist(), chunks["doc_id"].astype(str).tolist(), q)
        fit_index, fit_sp, stats["fusion_masked_embedded"], mvecs = fit.masked_corpus(masked, vectors,
                                                                                   passage_embed_factory)
        search_params = None if fit_index is not index else search_params
    dense, dense_scores = search_rows(fit_index, np.stack(q["vector"].tolist()), fusion.depth,
                                      {int(c): k for k, c in enumerate(ids)}, params=search_params)[:2]
    tops = [fit_sp.top(t, fusion.depth) for t in q["tokens"]]
    sparse, sparse_scores = [r.tolist() for r, _ in tops], [sc.tolist() for _, sc in tops]
    gold = q["doc_ids"].tolist() if "doc_ids" in q else q["doc_id"].astype(str).tolist()
    man["fusion"] = {**fit_fusion(dense, sparse, chunks["doc_id"].astype(str).tolist(), gold, fusion,
                                  dense_scores, sparse_scores),
                     "masked_chunks": len(masked), "refit": True, "changed_since_fit": 0.0}
    stats.update(fusion_w_dense=man["fusion"]["w_dense"], fusion_queries_embedded=fit.embedded_queries,
                 fusion_refit=True)
    side.fit_queries, side.masked = q, masked_cache_frame(masked, ids, mvecs)
    return side


def _carry_fusion(root: Path, prev: str | None, pm: dict, cfg: FusionConfig, changed: float
                  ) -> tuple[dict, list[Path]] | None:
    """(the previous version's fusion manifest, the fit cache files to copy) when its weights still hold: they
    were fitted with this ``cfg`` (same encoder and sparse key, checked by the caller) and the share of chunks
    added or removed since that fit, ``changed`` included, is at most ``cfg.refit_share``; else None."""
    f = pm.get("fusion", {})
    since = float(f.get("changed_since_fit", 0.0)) + changed
    same_cfg = _fit_config(f.get("config") or {}) == _fit_config(asdict(cfg))
    if prev is None or not f.get("fitted") or not same_cfg or since > cfg.refit_share:
        return None
    files = [p for p in (root / prev / FUSION_DIR / n for n in ("queries.parquet", "masked.parquet")) if p.is_file()]
    return {**f, "refit": False, "fitted_in": f.get("fitted_in") or prev, "changed_since_fit": round(since, 6)}, files


def _fit_config(cfg: dict) -> dict:
    """What of a fusion config the fitted weights depend on (all but ``refit_share``; a config recorded before
    ``method`` existed was RRF)."""
    return {"method": "rrf", **{k: v for k, v in cfg.items() if k != "refit_share"}}


def _chunk_counts(prev_dir: Path | None, ids: np.ndarray, chunks: pd.DataFrame, tokenize: Tokenize
                  ) -> tuple[TermCounts, int]:
    """Term counts of every chunk (rows of chunks counted in ``prev_dir`` copied by chunk id; a version written
    before term counts gives its ``tokens.parquet``) and how many chunks were tokenized."""
    old = TermCounts.load(prev_dir) if prev_dir is not None else None
    if old is not None:
        known = set(old.chunk_ids.tolist())
        todo = [k for k, c in enumerate(ids) if int(c) not in known]
        fresh = TermCounts.from_texts(ids[todo], chunks["text"].iloc[todo].tolist(), tokenize, old.vocab)
        return old.compose(ids, todo, fresh), len(todo)
    if prev_dir is not None and (prev_dir / "tokens.parquet").is_file():
        tokens, n = _chunk_tokens(prev_dir, ids, chunks, tokenize)
        return TermCounts.from_tokens(ids, tokens), n
    return TermCounts.from_texts(ids, chunks["text"].tolist(), tokenize), len(ids)


def _chunk_tokens(prev_dir: Path | None, ids: np.ndarray, chunks: pd.DataFrame, tokenize: Tokenize
                  ) -> tuple[list[list[str]], int]:
    """Tokens of every chunk (those stored in ``prev_dir``'s ``tokens.parquet`` reused by chunk id) and how
    many were tokenized."""
    old = read_tokens(prev_dir) if prev_dir is not None else {}
    todo = [k for k, c in enumerate(ids) if int(c) not in old]
    fresh = tokenize(chunks["text"].iloc[todo].tolist()) if todo else []
    tokens = [old.get(int(c)) for c in ids]
    for k, t in zip(todo, fresh):
        tokens[k] = t
    return tokens, len(todo)


@dataclass
class _FitInputs:
    """What the fusion fit ranks: the fit queries (vectors and tokens, reused from ``prev``'s cache when
    given) and the masked corpus (:meth:`masked_corpus`)."""

    root: Path
    prev: str | None
    chunks: pd.DataFrame
    ids: np.ndarray
    counts: TermCounts
    tokenize: Tokenize
    cfg: SparseConfig
    embedded_queries: int = 0

    def queries(self, fusion_queries: pd.DataFrame, embed_factory: Callable[[], Embed]) -> pd.DataFrame:
        """``fusion_queries`` with ``vector`` and ``tokens`` columns (only uncached queries embedded)."""
        cache = _prev_fit_cache(self.root, self.prev)
        q = fusion_queries.reset_index(drop=True).copy()
        miss = [i for i, t in enumerate(q["query"]) if t not in cache]
        vecs = embed_factory()(q["query"].iloc[miss].tolist()) if miss else None
        qtoks = self.tokenize(q["query"].iloc[miss].tolist()) if miss else []
        vec_col = [cache[t][1] if t in cache else None for t in q["query"]]
        tok_col = [cache[t][0] if t in cache else None for t in q["query"]]
        for j, i in enumerate(miss):
            vec_col[i], tok_col[i] = vecs[j], qtoks[j]
        q["vector"], q["tokens"] = vec_col, tok_col
        self.embedded_queries = len(miss)
        return q

    def masked_corpus(self, masked: dict[int, str], vectors: np.ndarray, embed_factory: Callable[[], Embed]):
        """(flat dense index, BM25 index, texts embedded, {row: masked vector}) over the corpus with ``masked``
        rows replaced; masked vectors reused from ``prev``'s ``fusion/masked.parquet``."""
        old = {}
        p = self.root / (self.prev or "") / FUSION_DIR / "masked.parquet"
        if self.prev and p.is_file():
            df = pd.read_parquet(p)
            old = {(int(c), t): np.asarray(v, np.float32) for c, t, v in zip(df["chunk_id"], df["text"], df["vector"])}
        rows = sorted(masked)
        todo = [r for r in rows if (int(self.ids[r]), masked[r]) not in old]
        fresh = embed_factory()([masked[r] for r in todo]) if todo else None
        mvecs = {r: old.get((int(self.ids[r]), masked[r])) for r in rows}
        for j, r in enumerate(todo):
            mvecs[r] = fresh[j]
        fit_vecs = np.array(vectors, dtype=np.float32, copy=True)
        for r in rows:
            fit_vecs[r] = mvecs[r]
        fresh = TermCounts.from_texts(self.ids[rows], [masked[r] for r in rows], self.tokenize, self.counts.vocab)
        fit_counts = self.counts.compose(self.ids, rows, fresh)
        return build_index(fit_vecs, self.ids), SparseIndex.from_counts(fit_counts, self.cfg), len(todo), mvecs


def masked_cache_frame(masked: dict[int, str], ids: np.ndarray, vecs: dict | None) -> pd.DataFrame | None:
    """chunk_id, text, vector of the masked chunks (reused by the next refresh)."""
    if not masked or vecs is None:
        return None
    rows = sorted(masked)
    return pd.DataFrame({"chunk_id": [int(ids[r]) for r in rows], "text": [masked[r] for r in rows],
                         "vector": [vecs[r] for r in rows]})
