"""Related-policy matching (SPEC §12) on LawRefBook: baselines, LTM-B and its three ablations, 3 seeds, side by side.

    OMP_NUM_THREADS=1 .venv/bin/python bench/related_bench.py --encoder E5_DIR [--corpus FILE] [--work DIR]
        [--max-segments 1] [--seeds 13 14 15] [--out FILE.json] [--folds 5 [--reverse-others 600]]

Derives the title-pattern pairs (:mod:`docmatch.pairs`, seed 13) unless ``--work/pairs.jsonl`` exists, embeds
(and caches under ``--work/segments``) the first ``--max-segments`` segments of every document the pairs and the
candidate laws need with the encoder, then runs :func:`docmatch.evaluate.run`: each held-out regulation's parent
ranked among ALL laws of the corpus. Prints the budget (threads, documents, segments, seconds) and one row per
system: recall@1 and MRR as mean ± std over seeds.

With ``--folds K`` it runs the cross-validation by law instead (:func:`docmatch.crossval.run_cv`): every
title-pattern regulation scored once per seed, both directions (regulation -> law among all laws; law -> its
regulations among all title-pattern regulations plus ``--reverse-others`` seeded non-pattern ones), beside the
baselines including whole-text BM25 with both strippings.

With ``--fused`` it measures the fused ranking (:mod:`docmatch.fusion`, :func:`docmatch.fused_eval.run_fused`) on
the citation-stripped split (:mod:`docmatch.citations`: regulations whose parent law is named only in a
``根据《…》`` citation, stripped; split by law, seed 13; a seeded sample of ``--cite-sample`` train / dev / test
regulations): each held-out regulation ranks its parent among ALL laws; one row per signal alone, each with the
link signal, and fused, on the citation test split and on the title-pattern test split.

    OMP_NUM_THREADS=1 .venv/bin/python bench/related_bench.py --fused --encoder E5_DIR [--work DIR]
        [--cite-sample 150 60 150] [--out FILE.json]

With ``--version-pool`` it measures the fused ranking as a version of the WHOLE corpus serves it
(:func:`docmatch.fused_eval.run_version_pool`): the same sampled regulations stripped, every other document as it
is, so the neighbours' own citations are there for ``knn_link``. Lexical signals only (no encoder needed):

    .venv/bin/python bench/related_bench.py --version-pool [--cite-sample 150 60 150] [--seeds 13 1 2 3 4 5 6]
        [--out FILE.json]
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
    p.add_argument("--encoder", help="encoder checkpoint (python -m model.e5 convert); all but --version-pool")
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--work", default="/work/cache-related")
    p.add_argument("--max-segments", type=int, default=1)
    p.add_argument("--seeds", type=int, nargs="+", default=[13, 14, 15])
    p.add_argument("--out")
    p.add_argument("--folds", type=int, help="cross-validate by law with K folds (no pair file)")
    p.add_argument("--reverse-others", type=int, default=600)
    p.add_argument("--fused", action="store_true", help="the fused ranking on the citation-stripped split")
    p.add_argument("--version-pool", action="store_true", help="the fused ranking over the whole corpus (lexical)")
    p.add_argument("--cite-sample", type=int, nargs=3, default=[150, 60, 150], metavar=("TRAIN", "DEV", "TEST"))
    a = p.parse_args(argv)
    if a.version_pool:
        return _version_pool(a)
    if not a.encoder:
        p.error("--encoder is required")
    if a.fused:
        return _fused(a)
    if a.folds:
        return _cv(a)
    import torch

    from docmatch.evaluate import EvalSetup, run
    from docmatch.pairs import derive_pairs, read_corpus, write_pairs

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


def _cv(a) -> int:
    """The cross-validated run (``--folds``): prints the budget and one row per system, both directions."""
    import torch

    from docmatch.crossval import CVSetup, run_cv

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    res = run_cv(a.corpus, a.encoder, Path(a.work) / "segments",
                 CVSetup(folds=a.folds, seeds=tuple(a.seeds), max_segments=a.max_segments,
                         reverse_others=a.reverse_others), log=lambda s: print(s, file=sys.stderr, flush=True))
    res["wall_s"] = round(time.perf_counter() - t0, 1)
    e, pool = res["embedding"], res["pool"]
    print(f"budget: 1 torch thread; {a.folds} folds by law x seeds {a.seeds}; {e['documents']} documents x first "
          f"{a.max_segments} segments ({e['embedded_segments']} embedded now, {e['cached_segments']} cached); "
          f"forward: {res['candidates']} candidate laws; reverse pool: {pool}; run {res['wall_s']} s")
    print(f"{'system':<32} {'runs':>4} {'fwd R@1':>13} {'fwd MRR':>13} {'rev R@10':>13} {'rev MRR':>13} {'rev MAP':>13}")
    for r in res["summary"]:
        cells = " ".join(f"{r[m]:>6.3f}±{r[m + ' std']:.3f}" for m in
                         ("fwd recall@1", "fwd mrr", "rev recall@10", "rev mrr", "rev map"))
        print(f"{r['system']:<32} {r['runs']:>4} {cells}  ({r['fwd queries']} / {r['rev queries']} queries)")
    if a.out:
        Path(a.out).write_text(json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


def fused_inputs(corpus_file, encoder, work, sample=(150, 60, 150), max_segments: int = 1):
    """(corpus, citation pairs sample, title-pattern pairs, id -> segment matrix, embedding figures) of the fused
    run: laws as they are, citation regulations with their parent's citation stripped, title-pattern regulations
    with every law title stripped (:func:`docmatch.pairs.load_texts`), first ``max_segments`` segments each,
    embedded with ``encoder`` and cached under ``work/segments``."""
    from docmatch.citations import citation_pairs, sample_split, stripped_texts
    from docmatch.pairs import LAW_LEVEL, derive_pairs, load_texts, read_corpus
    from docmatch.segments import encoder_cache

    c = read_corpus(corpus_file)
    cite = sample_split(citation_pairs(c), dict(zip(("train", "dev", "test"), sample)))
    tp = derive_pairs(c)
    t = stripped_texts(c, cite)
    texts = {**{i: t[i] for i in c.loc[c["level"] == LAW_LEVEL, "id"]}, **{x: t[x] for x in cite["a"]},
             **load_texts(c, set(tp["a"]))}
    cache = encoder_cache(encoder, Path(work) / "segments")
    return c, cite, tp, cache.matrices(dict(sorted(texts.items())), max_segments), cache.stats


def _fused(a) -> int:
    """The fused run (``--fused``): prints the weights and one row per system on both test splits."""
    import torch

    from docmatch.fused_eval import run_fused

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    c, cite, tp, mats, emb = fused_inputs(a.corpus, a.encoder, a.work, a.cite_sample, a.max_segments)
    res = run_fused(c, cite, tp, mats, a.seeds[0], log=lambda s: print(s, file=sys.stderr, flush=True))
    res.update(embedding=emb, wall_s=round(time.perf_counter() - t0, 1),
               citation_pairs={s: int((cite["split"] == s).sum()) for s in ("train", "dev", "test")},
               citation_laws={s: int(cite.loc[cite["split"] == s, "b"].nunique()) for s in ("train", "dev", "test")})
    print(f"budget: 1 torch thread; {len(mats)} documents x first {a.max_segments} segments "
          f"({emb['embedded_segments']} embedded now, {emb['cached_segments']} cached); run {res['wall_s']} s; "
          f"citation pairs {res['citation_pairs']} of laws {res['citation_laws']}")
    print(f"weights {res['weights']} (fit on {res['fit']['queries']} train queries: MRR {res['fit']['mrr']:.3f})")
    for split in ("citation_test", "title_test"):
        print(f"{split}: {'system':<12} {'recall@1':>8} {'MRR':>6} queries")
        for name, m in res[split].items():
            print(f"{'':<{len(split) + 2}}{name:<12} {m['recall@1']:>8.3f} {m['mrr']:>6.3f} {m['queries']}")
    if a.out:
        Path(a.out).write_text(json.dumps(res, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0


def _version_pool(a) -> int:
    """The ``--version-pool`` run: per sample seed (``--seeds``) the weights and one row per system on train / dev
    / test, then each system's test recall@1 / MRR as mean ± std over the seeds."""
    import numpy as np

    from docmatch.citations import citation_pairs, sample_split
    from docmatch.fused_eval import run_version_pool
    from docmatch.pairs import read_corpus

    c = read_corpus(a.corpus)
    pairs, runs = citation_pairs(c), {}
    for seed in a.seeds:
        t0 = time.perf_counter()
        res = run_version_pool(c, sample_split(pairs, dict(zip(("train", "dev", "test"), a.cite_sample)), seed))
        res["wall_s"] = round(time.perf_counter() - t0, 1)
        runs[seed] = res
        print(f"seed {seed}: pool {res['pool']} documents; run {res['wall_s']} s; weights {res['weights']} "
              f"(fit on {res['fit']['queries']} train queries: MRR {res['fit']['mrr']:.3f}); "
              f"bm25+knn_link {res['bm25+knn_link_weights']}; without cited {res['without_cited_weights']}")
        for split in ("train", "dev", "test"):
            print(f"  {split}: " + "  ".join(f"{k} {m['recall@1']:.3f}/{m['mrr']:.3f}" for k, m in res[split].items())
                  + f"  ({res[split]['fused']['queries']} queries)")
    print(f"test, mean ± std over {len(runs)} sample seeds (recall@1 / MRR):")
    for name in next(iter(runs.values()))["test"]:
        r1 = np.array([r["test"][name]["recall@1"] for r in runs.values()])
        mrr = np.array([r["test"][name]["mrr"] for r in runs.values()])
        print(f"  {name:<22} {r1.mean():.3f} ± {r1.std():.3f} / {mrr.mean():.3f} ± {mrr.std():.3f}")
    if a.out:
        Path(a.out).write_text(json.dumps(runs, ensure_ascii=False, indent=1), encoding="utf-8")
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
