"""Retrieval benchmark (issue: retrieval), in one run over a finished pipeline data dir:
full index build vs incremental refresh after changing 1 document (time ratio, chunks re-embedded),
and query latency p50/p95 on CPU.

    python bench/retrieval_bench.py --data-dir data     # after `make run`
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
from retrieval.stages import Retriever, index_stage
from storage import layout as L
from storage import read_table, write_table


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True, help="a data dir with documents_clean and a fine-tuned model")
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    data = Path(args.data_dir)
    ckpt = data / L.FINETUNED_MODEL
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
        print(f"documents {len(docs)}, chunks {full['chunks']}")
        print(f"full build:          {t_full:7.2f} s  embedded {full['embedded']} chunks")
        print(f"incremental refresh: {t_inc:7.2f} s  embedded {inc['embedded']}, reused {inc['reused']}, "
              f"removed {inc['removed']} (1 document edited: {docs.at[i, 'doc_id']})")
        print(f"ratio incremental/full: {t_inc / t_full:.3f} (target <= 0.10)")
        r = Retriever(tmp / "index")
        queries = (docs["title"].tolist() * 10)[: args.queries]
        r.search(queries[0])  # warm-up
        lat = []
        for q in queries:
            t = time.perf_counter()
            r.search(q, k=5)
            lat.append((time.perf_counter() - t) * 1000)
        print(f"query latency over {len(lat)} queries (embed + search, k=5): p50 {np.percentile(lat, 50):.1f} ms, "
              f"p95 {np.percentile(lat, 95):.1f} ms")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
