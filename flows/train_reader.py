"""Train and evaluate the neural span reader (SPEC §9; :mod:`model.span_reader`) on CPU or CUDA.

Sources, trained in this order: ``recurring`` (recurring-span selection on the NCPQA documents' texts,
:mod:`model.span_pretrain`; Ram et al. 2021), ``mrc`` (CMRC 2018 / DRCD span questions in ../shared/mrc),
``ncpqa`` (the training documents' NCPQA questions of the split by document). The split (``--seed``,
``--test-frac`` of documents held out) is the same for training and :func:`evaluate`; held-out documents never
enter training, recurring pretraining included. Plain AdamW loop (linear decay), ``torch.set_num_threads``
``--threads``. The reader is saved fp16 (safetensors) with ``provenance.json`` (the e5 body's sha256, budget,
figures).

CLI: ``python -m flows.train_reader --init E5_DIR --sources recurring,ncpqa --steps 200 --layers 4
--freeze-embeddings --max-len 192 --device cpu --seed 0 --out DIR [--ncpqa-n 32]``.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path

QA = Path("../shared/qa")  # relative to the repository root, as the pipeline's inputs
MRC = Path("../shared/mrc")


def load_ncpqa(qa_dir: Path = QA) -> tuple[list, dict]:
    """(questions, {doc_id: text}) of NCPQA."""
    qs = [json.loads(line) for line in open(qa_dir / "ncpqa_questions.jsonl", encoding="utf-8")]
    docs = {d["doc_id"]: d["text"] for d in map(json.loads, open(qa_dir / "ncpqa_docs.jsonl", encoding="utf-8"))}
    return qs, docs


def split_docs(docs: dict, seed: int, test_frac: float = 0.2) -> set:
    """The held-out document ids: ``test_frac`` of the sorted ids after a seeded shuffle."""
    ids = sorted(docs)
    random.Random(seed).shuffle(ids)
    return set(ids[: int(round(len(ids) * test_frac))])


def ncpqa_examples(qs: list, docs: dict, held: set, n: int, rng: random.Random) -> list:
    """The training documents' questions as (question, text, start, end), shuffled by ``rng``; the first ``n``
    (0: all)."""
    ex = [(q["question"], docs[q["doc_id"]], q["answer_start"], q["answer_end"]) for q in qs if q["doc_id"] not in held]
    rng.shuffle(ex)
    return ex[:n] if n else ex


def init_reader(e5_dir: Path, layers: int, max_len: int, freeze_embeddings: bool):
    """A :class:`~model.span_reader.SpanReader` whose body is the first ``layers`` layers of the e5 checkpoint
    in ``e5_dir`` (head random; :func:`answers.span_reader.reader_from_encoder`), and the e5 tokenizer; with
    ``freeze_embeddings`` every embedding weight stays fixed, else all of them train."""
    from answers.span_reader import reader_from_encoder
    from retrieval.encoders import BertEncoder

    model = reader_from_encoder(BertEncoder.from_checkpoint(e5_dir), layers, max_len)
    for p in model.bert.embeddings.parameters():
        p.requires_grad = not freeze_embeddings
    return model


def train_steps(model, feats: list, steps: int, batch: int, lr: float, seed: int, device: str) -> list:
    """``steps`` AdamW steps (linear decay, clip 1.0) over shuffled ``feats``; the step losses."""
    import torch
    from transformers import get_linear_schedule_with_warmup

    from model.span_reader import collate

    if not feats or steps <= 0:
        return []
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, max(1, steps // 10), steps)
    rng, order, losses = random.Random(seed), [], []
    model.to(device).train()
    for _ in range(steps):
        if len(order) < batch:
            order += rng.sample(range(len(feats)), len(feats))
        idx, order = order[:batch], order[batch:]
        b = {k: v.to(device) for k, v in collate([feats[i] for i in idx], model.tokenizer.pad_token_id).items()}
        loss = model(**b).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step(), sched.step(), opt.zero_grad()
        losses.append(float(loss.detach()))
    model.to("cpu").eval()
    return losses


def char_f1(pred: str, gold: str) -> float:
    """Char-bag F1 of two strings (CMRC 2018 convention without punctuation removal)."""
    common = sum((Counter(pred) & Counter(gold)).values())
    if not common:
        return 0.0
    p, r = common / len(pred), common / len(gold)
    return 2 * p * r / (p + r)


def _bm25_sentence(question: str, text: str) -> tuple[int, int]:
    """The gold document's sentence with the best BM25 score (char bigrams; k1 1.2, b 0.75) for the question."""
    import math

    from model.span_pretrain import sentences

    sents = sentences(text) or [(0, len(text))]
    grams = [Counter(text[a + i:a + i + 2] for i in range(b - a - 1)) for a, b in sents]
    qg = {question[i:i + 2] for i in range(len(question) - 1)}
    avg = sum(sum(g.values()) for g in grams) / len(grams) or 1.0
    df = Counter(t for g in grams for t in g)
    N = len(grams)

    def score(g):
        n = sum(g.values())
        return sum(math.log(1 + (N - df[t] + 0.5) / (df[t] + 0.5)) * g[t] * 2.2 / (g[t] + 1.2 * (0.25 + 0.75 * n / avg))
                   for t in qg if t in g)
    return sents[max(range(N), key=lambda i: score(grams[i]))]


def evaluate(model, qs: list, docs: dict, held: set, limit: int = 0) -> dict:
    """hit@1 (top span overlaps gold), char-F1, EM of the reader given the gold document, beside the BM25 best
    sentence and the first sentence of the gold document, on the held-out documents' questions (the first ``limit`` of them; 0: all)."""
    from model.span_pretrain import sentences

    rows = {"reader": [], "bm25-sentence": [], "first-sentence": []}
    t0 = time.time()
    test = [q for q in qs if q["doc_id"] in held]
    for q in test[:limit] if limit else test:
        text, ga, gb = docs[q["doc_id"]], q["answer_start"], q["answer_end"]
        top = model.predict(q["question"], text, top_n=1) if model is not None else []
        first = (sentences(text) or [(0, len(text))])[0]
        for name, span in (("reader", top[0][:2] if top else (0, 0)),
                           ("bm25-sentence", _bm25_sentence(q["question"], text)), ("first-sentence", first)):
            a, b = span
            pred, gold = text[a:b].strip(), text[ga:gb].strip()
            rows[name].append((float(a < gb and ga < b), char_f1(pred, gold), float(pred == gold)))
    out = {k: {m: round(sum(r[i] for r in v) / max(1, len(v)), 4) for i, m in enumerate(("hit@1", "f1", "em"))}
           for k, v in rows.items()}
    out["questions"] = len(rows["reader"])
    out["eval_seconds"] = round(time.time() - t0, 1)
    return out


def save(model, out: Path, e5_dir: Path, record: dict) -> None:
    """fp16 safetensors + tokenizer + ``provenance.json`` (e5 body sha256, budget, figures) into ``out``."""
    from storage.hashing import file_sha256

    out.mkdir(parents=True, exist_ok=True)
    model.half().save_pretrained(str(out), safe_serialization=True)
    model.float()
    model.tokenizer.save_pretrained(str(out))
    record = {**record, "e5_body_sha256": file_sha256(e5_dir / "model.safetensors")}
    (out / "provenance.json").write_text(json.dumps(record, ensure_ascii=False, indent=1), encoding="utf-8")


def run(args) -> dict:
    """Trains per ``args`` (see the module docstring) and returns the record (budget, losses, figures)."""
    import torch

    from model.span_pretrain import mrc_examples, recurring_examples
    from model.span_reader import train_features

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    qs, docs = load_ncpqa()
    held = split_docs(docs, args.seed)
    model = init_reader(Path(args.init), args.layers, args.max_len, args.freeze_embeddings)
    tok, rng = model.tokenizer, random.Random(args.seed)
    record = {k: v for k, v in vars(args).items()}
    record["losses"], t0 = {}, time.time()
    for src in args.sources.split(","):
        if src == "recurring":
            ex = recurring_examples([t for d, t in sorted(docs.items()) if d not in held], seed=args.seed)
        elif src == "mrc":
            ex = mrc_examples(MRC, args.mrc_n, args.seed)
        elif src == "ncpqa":
            ex = ncpqa_examples(qs, docs, held, args.ncpqa_n, rng)
        else:
            raise ValueError(f"unknown source {src!r}: use recurring, mrc, ncpqa")
        feats = train_features(tok, ex, args.max_len, 64, rng=rng)
        losses = train_steps(model, feats, args.steps, args.batch, args.lr, args.seed, args.device)
        record["losses"][src] = {"examples": len(ex), "windows": len(feats), "first10": round(sum(losses[:10]) / 10, 3),
                                 "last10": round(sum(losses[-10:]) / 10, 3)}
        print(src, record["losses"][src], round(time.time() - t0), "s", flush=True)
    record["train_seconds"] = round(time.time() - t0, 1)
    record["eval"] = evaluate(model, qs, docs, held, args.eval_n)
    print(json.dumps(record["eval"], ensure_ascii=False), flush=True)
    save(model, Path(args.out), Path(args.init), record)
    return record


def main(argv=None) -> int:
    """CLI entry; bad arguments → one ``error:`` line, exit 2."""
    p = argparse.ArgumentParser(prog="flows.train_reader", description=__doc__.splitlines()[0])
    p.add_argument("--init", required=True, help="converted e5 checkpoint folder (python -m model.e5 convert)")
    p.add_argument("--sources", default="recurring,ncpqa")
    p.add_argument("--steps", type=int, default=200, help="optimiser steps per source")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--freeze-embeddings", action="store_true")
    p.add_argument("--max-len", type=int, default=192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--ncpqa-n", type=int, default=0, help="NCPQA training questions (0: all)")
    p.add_argument("--mrc-n", type=int, default=2000)
    p.add_argument("--eval-n", type=int, default=0, help="held-out questions evaluated (0: all)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    if not (Path(args.init) / "config.json").is_file():
        print(f"error: --init {args.init}: no checkpoint (config.json) there", file=sys.stderr)
        return 2
    if not 1 <= args.layers <= 12 or not 32 <= args.max_len <= 256:
        print("error: --layers must be 1..12 and --max-len 32..256", file=sys.stderr)
        return 2
    try:
        run(args)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
