"""Related-policy matching (SPEC §12) on the citation-stripped split, by what the stripped clause named.

    .venv/bin/python bench/related_clause_bench.py [--corpus FILE] [--seeds 13 1 2 3 4 5 6]
        [--cite-sample 150 60 150] [--out FILE.json]

A pair's gold is the FIRST law of the regulation's first ``根据《…》`` clause (:mod:`docmatch.citations`), and the
strip removes that clause to its first comma (the citing-clause pattern of :mod:`docmatch.pairs`, read here too),
so when the clause named several laws of the corpus the others go with it. Per sample seed (the whole-corpus pool of :func:`docmatch.fused_eval.run_version_pool`: lexical signals,
weights fitted on the train regulations), each test regulation's top-ranked law is counted three ways, side by
side for the fusion and BM25:

- ``recall@1``: the gold (the pair file's measure);
- ``any clause law``: any law of the corpus the original clause named (the gold or a co-parent);
- ``single-law recall@1``: the gold, on the regulations whose clause named one law of the corpus only;

and ``multi-law share`` is the share of test regulations whose clause named two or more. Prints mean ± std over
the seeds; ~20 s a seed on one core.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpora" / "lawrefbook.jsonl.gz"
_TITLE = re.compile(r"《([^》]{2,80})》")


def short_title(title: str) -> str:
    """``title`` without its leading 中华人民共和国."""
    from docmatch.pairs import PREFIX

    return title[len(PREFIX):] if title.startswith(PREFIX) else title


def clause_laws(text: str, by_short: dict[str, int]) -> list[int]:
    """Indices (values of ``by_short``: law title without 中华人民共和国 -> index) of the laws the first
    ``根据《…》…，`` clause of ``text`` (what the strip removes) names, in order, each once; [] when it has none."""
    from docmatch.pairs import _CITING  # the strip's own clause pattern, so both read the same clause

    m = _CITING.search(text)
    out: list[int] = []
    for x in _TITLE.findall(m.group(0)) if m else ():
        k = by_short.get(short_title(x))
        if k is not None and k not in out:
            out.append(k)
    return out


def run_seed(corpus, pairs, seed: int, sample: dict) -> dict:
    """The three counts of the module docstring for one sample seed, fused and BM25."""
    from docmatch.citations import sample_split, stripped_texts
    from docmatch.fusion import SIGNALS, SignalPool, fit_weights, query_features, weight_vector
    from docmatch.pairs import LAW_LEVEL

    ids = corpus["id"].tolist()
    titles = dict(zip(corpus["id"], corpus["title"]))
    raw = dict(zip(corpus["id"], corpus["text"]))
    laws = corpus.loc[corpus["level"] == LAW_LEVEL, "id"].tolist()
    by_short = {short_title(titles[x]): k for k, x in enumerate(laws)}
    cite = sample_split(pairs, sample, seed)
    pool = SignalPool(ids, stripped_texts(corpus, cite), titles, np.zeros((len(ids), 1), np.float32))
    train, test = cite[cite["split"] == "train"], cite[cite["split"] == "test"]
    weights, _ = fit_weights(*query_features(pool, train["a"], train["b"], laws),
                             only=("bm25", "link", "knn_link", "cited"))
    f, gold = query_features(pool, test["a"], test["b"], laws)
    scores = {"fused": f @ weight_vector(weights), "bm25": f[..., SIGNALS.index("bm25")]}
    named = [set(clause_laws(raw[a], by_short)) | {int(g)} for a, g in zip(test["a"], gold)]
    single = np.array([len(s) == 1 for s in named])
    out = {"seed": seed, "weights": weights, "test": len(gold), "multi-law share": float(1 - single.mean())}
    for name, sc in scores.items():
        top = sc.argmax(1)
        hit = top == gold
        out[name] = {"recall@1": float(hit.mean()),
                     "any clause law": float(np.mean([t in s for t, s in zip(top, named)])),
                     "single-law recall@1": float(hit[single].mean())}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="bench/related_clause_bench.py")
    p.add_argument("--corpus", default=str(CORPUS))
    p.add_argument("--seeds", type=int, nargs="+", default=[13, 1, 2, 3, 4, 5, 6])
    p.add_argument("--cite-sample", type=int, nargs=3, default=[150, 60, 150], metavar=("TRAIN", "DEV", "TEST"))
    p.add_argument("--out")
    a = p.parse_args(argv)
    from docmatch.citations import citation_pairs
    from docmatch.pairs import read_corpus

    t0 = time.time()
    corpus = read_corpus(a.corpus)
    pairs = citation_pairs(corpus)
    sample = dict(zip(("train", "dev", "test"), a.cite_sample))
    rows = []
    for seed in a.seeds:
        rows.append(run_seed(corpus, pairs, seed, sample))
        print(json.dumps(rows[-1], ensure_ascii=False), flush=True)
    print(f"{len(a.seeds)} seeds, {time.time() - t0:.0f} s; test {a.cite_sample[2]} regulations a seed")
    print(f"multi-law share: {np.mean([r['multi-law share'] for r in rows]):.3f} ± "
          f"{np.std([r['multi-law share'] for r in rows]):.3f}")
    for system in ("fused", "bm25"):
        cells = []
        for measure in ("recall@1", "any clause law", "single-law recall@1"):
            v = np.array([r[system][measure] for r in rows])
            cells.append(f"{measure} {v.mean():.3f} ± {v.std():.3f}")
        print(f"{system:6s} " + " | ".join(cells))
    if a.out:
        Path(a.out).write_text(json.dumps(rows, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
