"""Related-policy matching (SPEC §12) on LawRefBook: baselines, LTM-B and its three ablations, 3 seeds, side by side.

    OMP_NUM_THREADS=1 .venv/bin/python bench/related_bench.py --encoder E5_DIR [--corpus FILE] [--work DIR]
        [--max-segments 1] [--seeds 13 14 15] [--out FILE.json]

Derives the title-pattern pairs (:mod:`related.pairs`, seed 13) unless ``--work/pairs.jsonl`` exists, embeds
(and caches under ``--work/segments``) the first ``--max-segments`` segments of every document the pairs and the
candidate laws need with the encoder, then runs :func:`related.evaluate.run`: each held-out regulation's parent
ranked among ALL laws of the corpus. Prints the budget (threads, documents, segments, seconds) and one row per
system: recall@1 and MRR as mean ± std over seeds.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "lawrefbook.jsonl.gz"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/related_bench.py")
    p.add_argument("--encoder", required=True, help="encoder checkpoint (python -m model.e5 convert)")
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--work", default="/work/cache-related")
    p.add_argument("--max-segments", type=int, default=1)
    p.add_argument("--seeds", type=int, nargs="+", default=[13, 14, 15])
    p.add_argument("--out")
    a = p.parse_args(argv)
    import torch

    from related.evaluate import EvalSetup, run
    from related.pairs import derive_pairs, read_corpus, write_pairs

    torch.set_num_threads(1)
    work = Path(a.work)
    pairs = work / "pairs.jsonl"
    if not pairs.is_file():
        write_pairs(derive_pairs(read_corpus(a.corpus)), pairs)
    t0 = time.perf_counter()
    res = run(a.corpus, pairs, a.encoder, work / "segments", EvalSetup(max_segments=a.max_segments,
                                                                        seeds=tuple(a.seeds)),
              log=lambda s: print(s, file=sys.stderr, flush=True))
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    e = res["embedding"]
    print(f"budget: 1 torch thread; {e['documents']} documents x first {a.max_segments} segments = {e['segments']} "
          f"segments ({e['embedded_segments']} embedded now in {e['embed_seconds']:.0f} s, "
          f"{e['cached_segments']} from the cache); {res['candidates']} candidate laws; run {res['wall_s']} s")
    print(f"{'system':<20} {'runs':>4} {'recall@1':>15} {'MRR':>15} {'queries':>7}")
    for r in res["summary"]:
        print(f"{r['system']:<20} {r['runs']:>4} {r['recall@1']:>8.3f} ± {r['recall@1_std']:.3f} "
              f"{r['mrr']:>8.3f} ± {r['mrr_std']:.3f} {r['queries']:>7}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
