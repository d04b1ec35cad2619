"""Known-item evaluation of an index version (SPEC §7): document titles and citations as queries, a hit is
any chunk of the query's document in the top k; recall@1/5/10 and MRR@10 (:mod:`retrieval.metrics`).

Everything is read from the version itself, nothing is built twice: the dense row ranks the version's stored
vectors with its pinned encoder's query vectors, the BM25 row is the version's own sparse side (bm25s, tokens
of the segmenter that built it), the hybrid row its fitted fusion (:class:`retrieval.retrievers.Retriever`).
The baseline that cannot learn, the same architecture randomly initialised, must embed every chunk again: up to
``EvalConfig.untrained_max_chunks`` chunks it ranks the whole version; above that it ranks a seeded sample of
whole documents holding at most ``EvalConfig.untrained_sample_chunks`` chunks (their queries only), with the
version's own dense vectors ranked over the same sample beside it (``policybert@sample``), so the two rows compare
like with like at a bounded cost. The documents are read shard by shard.
The recall@10 of IVF and HNSW indexes over the stored vectors against exact search, on the evaluation's
query vectors, is reported beside the table (:func:`retrieval.metrics.ann_recall`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from retrieval.dense import IndexConfig, build_index
from retrieval.encoders import Encoder
from retrieval.metrics import ann_recall, doc_metrics
from retrieval.retrievers import DenseRetriever, Hit, Retriever, encoder_dir_of
from storage.tables import iter_table


@dataclass(frozen=True)
class EvalConfig:
    """untrained_max_chunks: largest version (chunks) for which the untrained-encoder row is computed (it
    embeds every chunk again; None: always, 0: never); k: hits ranked per query (recall@k up to it); seed: the
    untrained encoder's initialisation."""

    untrained_max_chunks: int | None = 20_000
    k: int = 10
    seed: int = 13
    # above untrained_max_chunks: the untrained row over a document sample of at most this many chunks (0: none)
    untrained_sample_chunks: int = 0

    def __post_init__(self):
        if self.untrained_max_chunks is not None and self.untrained_max_chunks < 0:
            raise ValueError(f"untrained_max_chunks must be >= 0 or None, got {self.untrained_max_chunks!r}")
        if self.untrained_sample_chunks < 0:
            raise ValueError(f"untrained_sample_chunks must be >= 0, got {self.untrained_sample_chunks!r}")


def make_queries(docs: pd.DataFrame) -> pd.DataFrame:
    """(query, doc_id, kind) from titles and citations of ``documents_clean``; empty/duplicate queries dropped."""
    rows = []
    for r in docs.itertuples(index=False):
        for kind, q in (("title", r.title), ("citation", getattr(r, "citation", None))):
            if isinstance(q, str) and q.strip():
                rows.append((q.strip(), r.doc_id, kind))
    q = pd.DataFrame(rows, columns=["query", "doc_id", "kind"])
    return q.drop_duplicates(["query", "doc_id"]).drop_duplicates("query", keep=False).reset_index(drop=True)


def read_queries(clean_dir: str | os.PathLike) -> pd.DataFrame:
    """:func:`make_queries` over ``documents_clean``, read shard by shard (only doc_id, title, citation)."""
    parts = [make_queries(df) for df in iter_table(clean_dir, ["doc_id", "title", "citation"])]
    rows = pd.concat(parts, ignore_index=True) if parts else make_queries(pd.DataFrame(columns=["doc_id", "title"]))
    return rows.drop_duplicates(["query", "doc_id"]).drop_duplicates("query", keep=False).reset_index(drop=True)


def hit_docs(retriever: Retriever, hits: list[list[Hit]]) -> list[list[str]]:
    """Doc ids of ranked hits (chunk rows of ``retriever``'s version)."""
    doc = retriever.chunks["doc_id"].astype(str).to_numpy()
    return [[doc[h.row] for h in hh] for hh in hits]


def version_rows(retriever: Retriever, queries: pd.DataFrame, cfg: EvalConfig = EvalConfig()) -> list[dict]:
    """Rows (system, recall@1/5/10, mrr@10, queries) of the version's dense side (``policybert``), its BM25
    side (``bm25-<segmenter>``) and its hybrid (``hybrid``); a version without a sparse side has the dense row
    only."""
    q, gold = queries["query"].tolist(), queries["doc_id"].astype(str).tolist()
    modes = [("policybert", "dense")]
    if retriever.sparse is not None:
        backend = retriever.manifest["sparse"]["backend"].split("-")[0]
        modes += [(f"bm25-{backend}", "sparse"), ("hybrid", "hybrid")]
    return [{"system": name, **doc_metrics(hit_docs(retriever, retriever.hybrid.search_many(q, cfg.k, mode)), gold)}
            for name, mode in modes]


def sample_rows(chunks: pd.DataFrame, queries: pd.DataFrame, max_chunks: int, seed: int) -> np.ndarray:
    """Chunk rows of a seeded sample of whole documents (documents that have a query first, in a seeded order)
    holding at most ``max_chunks`` chunks; shape ``(n,)``, ascending."""
    doc = chunks["doc_id"].astype(str).to_numpy()
    asked = set(queries["doc_id"].astype(str))
    order = [d for d in pd.unique(doc) if d in asked]
    np.random.default_rng(seed).shuffle(order)
    sizes = pd.Series(doc).value_counts()
    keep, total = set(), 0
    for d in order:
        if total + sizes[d] > max_chunks:
            continue
        keep.add(d)
        total += int(sizes[d])
    return np.flatnonzero(np.isin(doc, list(keep)))


def _dense_row(name: str, retriever: Retriever, rows: np.ndarray, vecs: np.ndarray, query_vecs: np.ndarray,
               queries: pd.DataFrame, k: int) -> dict:
    index = build_index(np.asarray(vecs, dtype=np.float32), np.arange(len(rows), dtype=np.int64))
    hits = DenseRetriever(index, None).search_vectors(query_vecs, k)
    doc = retriever.chunks["doc_id"].astype(str).to_numpy()[rows]
    return {"system": name, **doc_metrics([[doc[h.row] for h in hh] for hh in hits],
                                          queries["doc_id"].astype(str).tolist())}


def untrained_rows(retriever: Retriever, index_root, queries: pd.DataFrame, cfg: EvalConfig,
                   precision: str | None = None) -> list[dict]:
    """The rows of the same encoder architecture randomly initialised (``untrained``: what training adds), its
    passages embedded under ``precision`` (the index's ``embed_precision``; None: the encoder kind's default).

    Up to ``cfg.untrained_max_chunks`` chunks: one row over the whole version. Above it, with
    ``cfg.untrained_sample_chunks``: ``untrained@sample`` and ``policybert@sample`` (the version's stored
    vectors) over the same document sample (:func:`sample_rows`) and its queries. Else: no row.
    """
    n = len(retriever.chunks)
    rows = np.arange(n)
    if cfg.untrained_max_chunks is not None and n > cfg.untrained_max_chunks:
        if not cfg.untrained_sample_chunks or retriever.vectors is None:
            return []
        rows = sample_rows(retriever.chunks, queries, cfg.untrained_sample_chunks, cfg.seed)
        in_sample = set(retriever.chunks["doc_id"].astype(str).to_numpy()[rows])
        queries = queries[queries["doc_id"].astype(str).isin(in_sample)].reset_index(drop=True)
        if not len(rows) or not len(queries):
            return []
    enc = Encoder.untrained_like(encoder_dir_of(index_root, retriever.manifest), cfg.seed, precision)
    vecs = enc.encode_corpus(retriever.chunks["text"].to_numpy()[rows].tolist())
    out = [_dense_row("untrained" if len(rows) == n else "untrained@sample", retriever, rows, vecs,
                      enc.encode_queries(queries["query"].tolist()), queries, cfg.k)]
    if len(rows) < n:
        out.append(_dense_row("policybert@sample", retriever, rows, np.asarray(retriever.vectors)[rows],
                              retriever.encoder.encode_queries(queries["query"].tolist()), queries, cfg.k))
    return out


def ann_recalls(retriever: Retriever, queries: pd.DataFrame, k: int = 10) -> dict:
    """recall@k of an IVF and an HNSW index over the version's stored vectors against exact search, with the
    evaluation's query vectors: ``{"ivf_recall@10_vs_exact", "hnsw_recall@10_vs_exact"}`` ({} without stored
    vectors)."""
    if retriever.vectors is None or not len(queries):
        return {}
    vecs = np.asarray(retriever.vectors, dtype=np.float32)
    ids = retriever.chunks["chunk_id"].to_numpy(np.int64)
    qv = retriever.encoder.encode_queries(queries["query"].tolist())
    return {f"{kind}_recall@{k}_vs_exact": ann_recall(build_index(vecs, ids, IndexConfig(kind=kind)), vecs, ids, qv, k)
            for kind in ("ivf", "hnsw")}
