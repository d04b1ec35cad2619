"""Retrieval with the pretrained multilingual-e5-small, no training (SPEC §7, §8), and the tokenisation
decision for PolicyBERT's char encoder (SPEC §6), in three steps so the embedding can run on another
machine (a GPU) while BM25 and the fusion run here:

    python bench/e5_retrieval.py prepare --qa ../shared/qa --out texts.json
    python bench/e5_retrieval.py embed --texts texts.json --out VECS [--device cuda]
    python bench/e5_retrieval.py evaluate --qa ../shared/qa --vectors VECS [--out eval/e5_retrieval]

``prepare`` lists every text :func:`retrieval.qa_eval.evaluate_qa` embeds: LeCoQA (the 1,234 train questions
over the 13,003 statute articles) and NCPQA (478 questions over their 599 notices, gold = the answer's
document): the pool, the pool with mined leads cut out (fusion fit), the questions, the mined queries.
``embed`` embeds them with the converted checkpoint (:mod:`model.e5`), passages with ``passage: `` and queries
with ``query: ``, plus, for the tokenisation measurement, the 13,003 articles and the first 200 questions
with one character per position (:class:`model.e5_tokenizer.CharPieces`; the instruction keeps its native
pieces); vectors are written as float16 parts. ``evaluate`` runs :func:`evaluate_qa` (BM25, dense, and the
hybrid fitted on the mined queries, never on the questions) on both sets with those vectors, and the
native-vs-char comparison (dense alone, R@1/5/10, MRR@10).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
TOKENISATION_QUESTIONS = 200
PART_ROWS = 20000  # float16 (20000, 384) = 15 MiB per file


def ncpqa(qa: Path, chunked: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(questions: qid, query, gold [doc_id]; pool: doc_id, text, title, body) of NCPQA; ``chunked``: one
    pool row per chunk of a document (retrieval.chunks defaults, 750 chars, 150 overlap; SPEC §7), as the
    index stores it, a document ranked by its best chunk."""
    from retrieval.chunks import ChunkConfig, chunk_text

    d = pd.read_json(qa / "ncpqa_docs.jsonl", lines=True)
    q = pd.read_json(qa / "ncpqa_questions.jsonl", lines=True)
    rows = [(str(r.doc_id), r.text[s:e] if chunked else r.text, r.title) for r in d.itertuples()
            for s, e in (chunk_text(r.text, ChunkConfig()) if chunked else [(0, len(r.text))])]
    pool = pd.DataFrame(rows, columns=["doc_id", "text", "title"])
    pool["body"] = pool["text"]
    return pd.DataFrame({"qid": q["qid"], "query": q["question"], "gold": [[str(x)] for x in q["doc_id"]]}), pool


def lecoqa(qa: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(questions, pool) of LeCoQA as the evaluation harness loads them (:class:`evaluation.sets.LecoqaLoader`,
    title+article, one split)."""
    from evaluation.sets import LecoqaLoader

    s = LecoqaLoader(qa / "lecoqa_train.jsonl", qa / "statutes.jsonl").load(None)
    return s.splits["all"], s.pool


def prepare(qa: Path, cfg) -> dict:
    """{"passages": [...], "queries": [...], "char_passages": [...], "char_queries": [...]} (unique texts)."""
    from retrieval.mining import mask_leads
    from retrieval.qa_eval import mined_pool_queries

    passages, queries = [], []
    for questions, pool in (lecoqa(qa), ncpqa(qa), ncpqa(qa, chunked=True)):
        texts = pool["text"].tolist()
        mined = mined_pool_queries(pool, cfg.fusion)
        passages += texts + list(mask_leads(texts, pool["doc_id"].tolist(), mined).values())
        queries += questions["query"].tolist() + mined["query"].tolist()
    q, pool = lecoqa(qa)
    return {"passages": list(dict.fromkeys(passages)), "queries": list(dict.fromkeys(queries)),
            "char_passages": pool["text"].tolist(), "char_queries": q["query"].head(TOKENISATION_QUESTIONS).tolist()}


def char_encoder(enc):
    """A copy of a converted-e5 ``BertEncoder`` fed one piece id per character (instructions stay native)."""
    from model.e5_tokenizer import CharPieces
    from retrieval.encoders import BertEncoder

    chars = CharPieces(enc.tokenizer.backend_tokenizer)
    prefixes = [p for p in (enc.info.query_instruction, enc.info.passage_instruction) if p]

    class CharBertEncoder(BertEncoder):
        def windows(self, texts):
            tok, w = self.tokenizer, self.window - 2
            out, owner = [], []
            for i, t in enumerate(texts):
                p = next((p for p in prefixes if t.startswith(p)), "")
                seq = (tok(p, add_special_tokens=False)["input_ids"] if p else []) + chars(t[len(p):])
                for a in range(0, max(len(seq), 1), w):
                    out.append([tok.cls_token_id, *seq[a:a + w], tok.sep_token_id])
                    owner.append(i)
            return out, owner

    return CharBertEncoder(enc.model, enc.tokenizer, enc.batch_size, enc.device, enc.info)


def embed(texts_file: Path, out: Path, device: str, batch_size: int) -> None:
    """Embed the prepared texts; write ``<set>.<part>.npy`` (float16) and ``index.json`` (texts per set)."""
    import time

    from model.e5 import convert
    from retrieval.encoders import Encoder

    sets = json.loads(texts_file.read_text(encoding="utf-8"))
    enc = Encoder.from_checkpoint(convert(), batch_size=batch_size, device=device)
    cenc = char_encoder(enc)
    fns = {"passages": enc.encode_corpus, "queries": enc.encode_queries,
           "char_passages": cenc.encode_corpus, "char_queries": cenc.encode_queries}
    out.mkdir(parents=True, exist_ok=True)
    parts, seconds = {}, {}
    for name, texts in sets.items():
        t0 = time.perf_counter()
        vecs = fns[name](texts).astype(np.float16)
        seconds[name] = time.perf_counter() - t0
        parts[name] = []
        for i in range(0, len(vecs), PART_ROWS):
            np.save(out / f"{name}.{i // PART_ROWS}.npy", vecs[i:i + PART_ROWS])
            parts[name].append(f"{name}.{i // PART_ROWS}.npy")
        print(name, len(texts), f"{seconds[name]:.1f} s", flush=True)
    (out / "index.json").write_text(json.dumps({"parts": parts, "seconds": seconds, "device": device}))


def load_vectors(vec_dir: Path, texts_file: Path) -> dict[str, dict[str, np.ndarray]]:
    """{set: {text: float32 vector}} from ``embed``'s parts."""
    sets = json.loads(texts_file.read_text(encoding="utf-8"))
    index = json.loads((vec_dir / "index.json").read_text())
    out = {}
    for name, texts in sets.items():
        vecs = np.concatenate([np.load(vec_dir / p) for p in index["parts"][name]]).astype(np.float32)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        out[name] = dict(zip(texts, vecs))
    return out


def lookup_system(name: str, vecs: dict, passages: str, queries: str, key: str):
    """A :class:`retrieval.qa_eval.DenseSystem` answering from precomputed vectors (KeyError if a text is
    missing: nothing is silently re-embedded)."""
    from retrieval.qa_eval import DenseSystem

    return DenseSystem(name, lambda t: np.stack([vecs[passages][x] for x in t]),
                       lambda t: np.stack([vecs[queries][x] for x in t]), key)


def tokenisation(vecs: dict, qa: Path) -> pd.DataFrame:
    """Dense-only R@1/5/10, MRR@10 of the first 200 LeCoQA questions over all 13,003 articles: native pieces
    against one char per position."""
    from retrieval.metrics import doc_metrics

    q, pool = lecoqa(qa)
    q = q.head(TOKENISATION_QUESTIONS)
    ids, texts = pool["doc_id"].tolist(), pool["text"].tolist()
    rows = []
    for mode, (p, qq) in {"native pieces": ("passages", "queries"),
                          "one char per position": ("char_passages", "char_queries")}.items():
        P = np.stack([vecs[p][t] for t in texts])
        Q = np.stack([vecs[qq][t] for t in q["query"]])
        top = np.argsort(-(Q @ P.T), axis=1)[:, :10]
        rows.append({"input": mode, **doc_metrics([[ids[i] for i in r] for r in top], q["gold"].tolist())})
    return pd.DataFrame(rows)


def evaluate(qa: Path, vec_dir: Path, texts_file: Path, out: Path | None) -> dict:
    """qa_eval tables (LeCoQA, NCPQA) and the tokenisation table; written to ``out`` when given."""
    from retrieval.qa_eval import QAEvalConfig, evaluate_qa, format_table

    vecs = load_vectors(vec_dir, texts_file)
    system = lookup_system("e5", vecs, "passages", "queries", "e5-small")
    result = {}
    sets = {"lecoqa": lecoqa(qa), "ncpqa": ncpqa(qa), "ncpqa-chunks": ncpqa(qa, chunked=True)}
    for name, (questions, pool) in sets.items():
        table, info = evaluate_qa(questions, pool, [system], QAEvalConfig())
        print(f"== {name}: {len(questions)} questions over {len(pool)} documents")
        print(format_table(table))
        result[name] = {"table": table.to_dict("records"), "info": info}
    tok = tokenisation(vecs, qa)
    print("== tokenisation (dense alone, 200 LeCoQA questions over 13,003 articles)")
    print(tok.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    result["tokenisation"] = tok.to_dict("records")
    if out is not None:
        from storage.atomic import atomic_write_text

        atomic_write_text(out / "e5_retrieval.json", json.dumps(result, ensure_ascii=False, indent=1, default=str))
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("step", choices=("prepare", "embed", "evaluate"))
    ap.add_argument("--qa", default="../shared/qa")
    ap.add_argument("--texts", default="texts.json")
    ap.add_argument("--vectors", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args(argv)
    if args.step == "prepare":
        from retrieval.qa_eval import QAEvalConfig

        Path(args.out or args.texts).write_text(json.dumps(prepare(Path(args.qa), QAEvalConfig()), ensure_ascii=False),
                                                encoding="utf-8")
    elif args.step == "embed":
        embed(Path(args.texts), Path(args.out), args.device, args.batch_size)
    else:
        evaluate(Path(args.qa), Path(args.vectors), Path(args.texts), Path(args.out) if args.out else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
