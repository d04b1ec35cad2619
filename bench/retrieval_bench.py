"""Retrieval benchmark (SPEC §7), in one run over a finished pipeline data dir:

- full index build (dense + sparse side + fusion fit) vs refresh after changing 1 document (time ratio,
  chunks re-embedded and re-tokenized; target <= 0.10);
- query latency p50/p95 on CPU of hybrid search vs dense alone (k=5; target <= 2x): ``pure-dense`` is
  embed + FAISS only, ``dense`` the Retriever's dense mode (which also scores BM25 for ``sparse_score``).

    python bench/retrieval_bench.py --data-dir data [--model DIR]    # after `make run`
"""
from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from transformers.utils import logging as hf_logging

from retrieval.chunks import ChunkConfig
from retrieval.sparse import make_tokenizer
from retrieval.retrievers import Retriever
from retrieval.stages import index_stage
from storage import layout as L
from storage import read_table, write_table


def _latency(r: Retriever, queries: list[str], mode: str) -> np.ndarray:
    r.search(queries[0], k=5, mode=mode)  # warm-up
    lat = []
    for q in queries:
        t = time.perf_counter()
        r.search(q, k=5, mode=mode)
        lat.append((time.perf_counter() - t) * 1000)
    return np.asarray(lat)


def _pure_dense(r: Retriever, queries: list[str]) -> np.ndarray:
    """Embed + FAISS search alone (the dense search before hybrid: no tokenization, no BM25)."""
    lat = []
    for q in [queries[0]] + queries:
        t = time.perf_counter()
        r.dense.search(q, 5)
        lat.append((time.perf_counter() - t) * 1000)
    return np.asarray(lat[1:])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True, help="a data dir with documents_clean and a fine-tuned model")
    ap.add_argument("--model", default=None, help="encoder checkpoint (default: the data dir's fine-tuned model)")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    data = Path(args.data_dir)
    ckpt = Path(args.model) if args.model else data / L.FINETUNED_MODEL
    tmp = Path(tempfile.mkdtemp(prefix="bench-retrieval-"))
    try:
        docs = read_table(data / L.DOCUMENTS_CLEAN)
        t = time.perf_counter()
        full = index_stage(data / L.DOCUMENTS_CLEAN, ckpt, tmp / "index", ChunkConfig())
        t_full = time.perf_counter() - t
        # change 1 of the documents: rewrite one sentence in the middle of the longest-but-one document
        i = int(docs["n_chars"].rank(method="first", ascending=False).sub(2).abs().idxmin())
        text = docs.at[i, "text"]
        mid = text.find("。", len(text) // 2)
        docs.at[i, "text"] = text[:mid] + "，并作如下补充说明" + text[mid:]
        write_table(docs, tmp / "clean2", name="documents_clean")
        t = time.perf_counter()
        inc = index_stage(tmp / "clean2", ckpt, tmp / "index", ChunkConfig())
        t_inc = time.perf_counter() - t
        print(f"documents {len(docs)}, chunks {full['chunks']}; fusion w_dense {full.get('fusion_w_dense')}")
        print(f"full build:          {t_full:7.2f} s  embedded {full['embedded']} chunks, tokenized "
              f"{full.get('sparse_tokenized')}, fit queries embedded {full.get('fusion_queries_embedded')}")
        print(f"incremental refresh: {t_inc:7.2f} s  embedded {inc['embedded']}, reused {inc['reused']}, "
              f"removed {inc['removed']}, tokenized {inc.get('sparse_tokenized')}, fit queries embedded "
              f"{inc.get('fusion_queries_embedded')} (1 document edited: {docs.at[i, 'doc_id']})")
        print(f"ratio incremental/full: {t_inc / t_full:.3f} (target <= 0.10)")
        r = Retriever(tmp / "index", tokenizer=make_tokenizer("auto"))
        queries = (docs["title"].tolist() * 10)[: args.queries]
        lat = {"pure-dense": _pure_dense(r, queries), **{m: _latency(r, queries, m) for m in ("dense", "hybrid", "sparse")}}
        for m, v in lat.items():
            print(f"query latency {m:6s} over {len(v)} queries (k=5): p50 {np.percentile(v, 50):.1f} ms, "
                  f"p95 {np.percentile(v, 95):.1f} ms")
        for base in ("pure-dense", "dense"):
            print(f"hybrid/{base} p50 {np.percentile(lat['hybrid'], 50) / np.percentile(lat[base], 50):.2f}x, "
                  f"p95 {np.percentile(lat['hybrid'], 95) / np.percentile(lat[base], 95):.2f}x (target <= 2x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
