"""Retrieval at 21x (SPEC §10), in one run over the lawrefbook corpus (3,419 documents, 19.5 M chars):

- exact (flat) vs HNSW vs IVF: build time, single-query p50/p95 latency on one FAISS thread (k=10 and k=100, the
  depth hybrid search asks of the dense side; ``omp``: k=10 on FAISS's default thread count, where a busy machine
  makes OpenMP's spin-waits dominate exact search), recall@10 against exact search on held-out queries (document titles, not indexed) and
  the recall the build records (indexed vectors as queries, self left out: ``retrieval.dense.ann_recall_report``);
- which kind ``IndexConfig()`` (``kind="auto"``) picks at this size;
- refresh after editing one document vs a full build, through the real index-building function
  (``retrieval.build.refresh_index``: dense + BM25 side + fusion fit), and the BM25 side alone
  (``retrieval.sparse_build.build_sparse_side``: full vs composing the previous version's term counts). A refresh
  edits the HNSW graph in place and carries the fusion weights over (``retrieval.ann_update``, ``FusionConfig.refit_share``).

Vectors: by default a fixed, untrained text encoder that is cheap enough for 33k chunks on 2 cores: hashed char
1-2-gram counts (scikit-learn ``HashingVectorizer``, 2^18 features, log1p tf) through a seeded sparse random
projection to 128 dims (the cpu-small hidden size), L2-normalised. ``--model DIR`` embeds with a PolicyBERT
checkpoint instead (slow on CPU). Embedding is then a small part of a full build, so the refresh/full ratio
measured with the default encoder is an upper bound of the ratio with a neural encoder, whose full build
embeds every chunk. Chunks are cut from the imported text (the cleaning stage is not run).

    python bench/ann_bench.py [--corpus ../shared/corpora/lawrefbook.jsonl.gz] [--model DIR] [--queries 500]
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import faiss
import numpy as np
import pandas as pd

from crawler.records_import import read_records
from retrieval.chunks import ChunkConfig, build_chunks
from retrieval.build import refresh_index
from retrieval.dense import IndexConfig, build_index_with_report, resolve_kind
from retrieval.encoders import Encoder
from retrieval.encoding import TextEncoder
from retrieval.fusion import FusionConfig
from retrieval.mining import mine_queries
from retrieval.pinning import model_id
from retrieval.sparse import SparseConfig, make_tokenizer
from retrieval.sparse_build import build_sparse_side

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "lawrefbook.jsonl.gz"


class HashingEncoder:
    """A :class:`retrieval.encoding.TextEncoder` whose vectors are (n, dim) float32 unit vectors: hashed char
    1-2-gram log1p counts, seeded sparse random projection (Achlioptas 2003 / Li et al. 2006 as in
    scikit-learn). A fixed function of the text, the same for queries and passages."""

    model_id = "hashing-char12-2^18-srp128-seed13"

    def __init__(self, dim: int = 128, seed: int = 13):
        from sklearn.feature_extraction.text import HashingVectorizer
        from sklearn.random_projection import SparseRandomProjection

        self.hv = HashingVectorizer(analyzer="char", ngram_range=(1, 2), n_features=2 ** 18, alternate_sign=False,
                                    norm=None)
        self.proj = SparseRandomProjection(dim, dense_output=True, random_state=seed).fit(self.hv.transform(["x"]))

    def encode_corpus(self, texts: list[str]) -> np.ndarray:
        x = self.hv.transform(list(texts)).astype(np.float64)
        x.data = np.log1p(x.data)
        v = np.asarray(self.proj.transform(x), dtype=np.float32)
        n = np.linalg.norm(v, axis=1, keepdims=True)
        return v / np.where(n == 0, 1, n)

    def encode_queries(self, texts: list[str]) -> np.ndarray:
        return self.encode_corpus(texts)


def _latency_ms(index, q: np.ndarray, k: int, threads: int = 1) -> np.ndarray:
    """Per-query search times (ms), one query at a time, FAISS on ``threads`` OpenMP threads (restored after)."""
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        index.search(q[:1], k)  # warm-up
        out = []
        for row in q:
            t = time.perf_counter()
            index.search(row[None, :], k)
            out.append((time.perf_counter() - t) * 1000)
    finally:
        faiss.omp_set_num_threads(before)
    return np.asarray(out)


def compare_kinds(vecs: np.ndarray, ids: np.ndarray, qv: np.ndarray, base: IndexConfig) -> None:
    """Print build time, latency and recall@10 (held-out and build-time) of flat, hnsw and ivf."""
    exact_ids = None
    print(f"{'kind':5s} {'build s':>8s} {'p50@10 ms':>10s} {'p95@10 ms':>10s} {'p50@100 ms':>11s} "
          f"{'p50@10 omp ms':>12s} {'recall@10 titles':>17s} {'recall@10 at build':>19s}  params")
    for kind in ("flat", "hnsw", "ivf"):
        index, rep = build_index_with_report(vecs, ids, replace(base, kind=kind))
        _, got = index.search(qv, 10)
        if kind == "flat":
            exact_ids = got
        rec = np.mean([len(set(e) & set(g[g >= 0])) / 10 for e, g in zip(exact_ids, got)])
        l10, l100 = _latency_ms(index, qv, 10), _latency_ms(index, qv, 100)
        l2 = _latency_ms(index, qv, 10, threads=faiss.omp_get_max_threads())
        params = {k: rep[k] for k in ("nlist", "nprobe", "hnsw_m", "ef_construction", "ef_search") if k in rep}
        print(f"{kind:5s} {rep['build_seconds']:8.2f} {np.percentile(l10, 50):10.3f} {np.percentile(l10, 95):10.3f} "
              f"{np.percentile(l100, 50):11.3f} {np.percentile(l2, 50):12.3f} {rec:17.4f} {rep.get('recall@10', 1.0):19.4f}  {params}")


def edit_one(docs: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """``docs`` with one sentence added in the middle of the longest-but-one document (as bench/retrieval_bench)."""
    docs = docs.copy()
    i = int(docs["text"].str.len().rank(method="first", ascending=False).sub(2).abs().idxmin())
    text = docs.at[i, "text"]
    mid = max(text.find("。", len(text) // 2), 0)
    docs.at[i, "text"] = text[:mid] + "，并作如下补充说明" + text[mid:]
    return docs, str(docs.at[i, "doc_id"])


def refresh_vs_full(docs: pd.DataFrame, enc: TextEncoder, model_id: str, cfg: IndexConfig, tmp: Path) -> None:
    """Full index build (dense + sparse + fusion) vs refresh after one edited document; BM25 side alone."""
    tok = make_tokenizer(SparseConfig().segmenter)
    fusion = FusionConfig()
    ch1 = build_chunks(docs, ChunkConfig())
    docs2, edited = edit_one(docs)
    ch2 = build_chunks(docs2, ChunkConfig())
    kw = dict(sparse=SparseConfig(), tokenizer=lambda: tok, fusion=fusion,
              query_embed_factory=lambda: enc.encode_queries)
    root = tmp / "index"
    full = refresh_index(root, ch1, enc.encode_corpus, model_id, cfg, fusion_queries=mine_queries(docs, fusion), **kw)
    inc = refresh_index(root, ch2, enc.encode_corpus, model_id, cfg, fusion_queries=mine_queries(docs2, fusion), **kw)
    print(f"\nindex stage path (refresh_index: dense {full['index_kind']} + BM25 side + fusion fit), "
          f"segmenter {tok[1]['backend']}:")
    print(f"  full build: {full['seconds']:7.2f} s  embedded {full['embedded']}, tokenized "
          f"{full['sparse_tokenized']}, ANN build {full['index_build_seconds']:.2f} s, "
          f"recall@10 at build {full['ann_recall@10']}")
    print(f"  refresh:    {inc['seconds']:7.2f} s  embedded {inc['embedded']}, reused {inc['reused']}, removed "
          f"{inc['removed']}, tokenized {inc['sparse_tokenized']}, ANN {'edited in place' if inc['index_in_place'] else 'rebuilt'} "
          f"in {inc['index_build_seconds']:.2f} s, fusion {'refitted' if inc['fusion_refit'] else 'carried over'} "
          f"(document {edited} edited)")
    print(f"  ratio refresh/full: {inc['seconds'] / full['seconds']:.3f} (target <= 0.10)")
    plan_full = {"previous": None, "model_id": model_id}
    plan_inc = {"previous": inc["previous"], "model_id": model_id}  # v1: its tokens are reused
    times = {}
    for name, plan, ch in (("full", plan_full, ch2), ("refresh", plan_inc, ch2)):
        t = time.perf_counter()
        side = build_sparse_side(root, plan, ch, None, SparseConfig(), lambda: tok, None,
                                 lambda: enc.encode_queries, fusion)
        times[name] = time.perf_counter() - t
        print(f"  BM25 side {name:7s}: {times[name]:7.2f} s  tokenized {side.stats['sparse_tokenized']}, "
              f"reused {side.stats['sparse_reused']}")
    print(f"  BM25 side ratio refresh/full: {times['refresh'] / times['full']:.3f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default=str(CORPUS), help="JSON Lines corpus (id, title, text)")
    ap.add_argument("--model", default=None, help="PolicyBERT checkpoint to embed with (default: hashing encoder)")
    ap.add_argument("--queries", type=int, default=500, help="held-out title queries for latency and recall")
    ap.add_argument("--skip-refresh", action="store_true", help="only compare the index kinds")
    args = ap.parse_args()
    t = time.perf_counter()
    docs, _, _ = read_records(args.corpus)
    chunks = build_chunks(docs, ChunkConfig())
    print(f"corpus {args.corpus}: {len(docs)} documents, {int(docs['text'].str.len().sum()):,} chars, "
          f"{len(chunks):,} chunks ({time.perf_counter() - t:.1f} s to read and chunk)")
    if args.model:
        enc, mid, what = Encoder.from_checkpoint(args.model), model_id(args.model), f"PolicyBERT {args.model}"
    else:
        enc, mid, what = HashingEncoder(), HashingEncoder.model_id, HashingEncoder.model_id
    t = time.perf_counter()
    vecs = enc.encode_corpus(chunks["text"].tolist())
    print(f"vectors: {what}, {vecs.shape[0]:,} x {vecs.shape[1]} in {time.perf_counter() - t:.1f} s")
    cfg = IndexConfig()
    print(f"IndexConfig() = {asdict(cfg)}\n  -> kind chosen for {len(chunks):,} vectors: "
          f"{resolve_kind(cfg, len(chunks))} (exact below {cfg.ann_min_vectors:,})")
    titles = docs["title"].dropna().drop_duplicates()
    titles = titles.sample(min(args.queries, len(titles)), random_state=13).tolist()
    qv = enc.encode_queries(titles)
    compare_kinds(vecs, chunks["chunk_id"].to_numpy(np.int64), qv, cfg)
    if not args.skip_refresh:
        tmp = Path(tempfile.mkdtemp(prefix="bench-ann-"))
        try:
            refresh_vs_full(docs, enc, mid, cfg, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
