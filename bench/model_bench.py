"""Training throughput of PolicyBertForPreTraining (each fusion) against transformers'
BertForPreTraining with the same char encoder, in one run, on real pretraining batches.

    python bench/model_bench.py --data-dir data [--size small|base] [--steps 20]

Prints collate ms/batch (the vectorised :func:`model.features.collate` against the per-word loop it
replaced, on the same batches), then tokens/s (input chars incl. padding per second of
forward+backward+AdamW step), peak accelerator memory (GiB, CUDA only) and each fusion's ratio against plain
BERT (which scores the vocabulary at every position; PolicyBERT at the masked positions only); then the
embedding throughput of the gate-fused encoder (:func:`retrieval.embed.embed_texts`, chars/s, forward only)
on the pretraining sentences. ``--size e5`` is the shape of ``gpu-base`` (multilingual-e5-small's 12 layers,
hidden 384, and 6 word layers; SPEC §8): throughput does not depend on the weights, so no checkpoint is read.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from transformers import BertConfig, BertForPreTraining

from model import PolicyBertConfig, PolicyBertForPreTraining
from model.features import CharEncoder, WordMatcher, collate
from model.training import autocast, resolve_device
from storage import layout as L
from storage import read_table

SIZES = {"small": dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256, num_word_layers=1),
         "base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072, num_word_layers=6),
         "e5": dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=12, intermediate_size=1536, num_word_layers=6)}


WARMUP = 5


def tokens_per_s(model, batches, device) -> float:
    """Input tokens (padding included) per second of forward + backward + AdamW step over ``batches``
    after :data:`WARMUP` untimed ones."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model.to(device).train()
    for b in batches[:WARMUP]:  # warm-up (kernel selection for each new shape)
        with autocast(device):
            model(**b).loss.backward()
        opt.step()
        opt.zero_grad()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t, n = time.perf_counter(), 0
    for b in batches[WARMUP:]:
        with autocast(device):
            model(**b).loss.backward()
        opt.step()
        opt.zero_grad()
        n += b["input_ids"].numel()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return n / (time.perf_counter() - t)


def peak_gib(device) -> str:
    """Peak accelerator memory allocated since the last reset, GiB (``-`` off CUDA)."""
    return f"{torch.cuda.max_memory_allocated() / 2**30:.2f}" if device.type == "cuda" else "-"


def embed_chars_per_s(model, enc, matcher, texts: list[str], device, batch_size: int) -> float:
    """Chars per second of :func:`retrieval.embed.embed_texts` (windows of 128, mean pooling) over ``texts``,
    after one untimed warm-up pass."""
    from retrieval.embed import embed_texts

    model = model.to(device)
    embed_texts(model, enc, matcher, texts[:batch_size], batch_size=batch_size, device=str(device))
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    embed_texts(model, enc, matcher, texts, batch_size=batch_size, device=str(device))
    if device.type == "cuda":
        torch.cuda.synchronize()
    return sum(map(len, texts)) / (time.perf_counter() - t)


def collate_loop(examples, max_words: int, pad_id: int = 0) -> dict:
    """The per-word Python loop that built the matching matrix before (timing reference only)."""
    b, seq = len(examples), max(len(e["input_ids"]) for e in examples)
    w = max(1, min(max_words, max(len(e["word_ids"]) for e in examples)))
    ids, mm = torch.full((b, seq), pad_id, dtype=torch.long), torch.zeros((b, w, seq))
    wid, mlm = torch.zeros((b, w), dtype=torch.long), torch.full((b, seq), -100, dtype=torch.long)
    for i, e in enumerate(examples):
        ids[i, :len(e["input_ids"])] = torch.tensor(list(e["input_ids"]))
        mlm[i, :len(e["input_ids"])] = torch.tensor(list(e["mlm_labels"]))
        for q, (wd, (start, length)) in enumerate(zip(list(e["word_ids"])[:w], list(e["word_spans"])[:w])):
            wid[i, q] = int(wd)
            mm[i, q, int(start):int(start) + int(length)] = 1.0
    return {"input_ids": ids, "word_ids": wid, "matching_matrix": mm, "labels": mlm}


def collate_ms(fn, chunks: list, repeat: int = 3) -> float:
    """Mean ms per batch of ``fn`` over ``chunks`` (best of ``repeat`` passes)."""
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        for c in chunks:
            fn(c, 40, 0)
        best = min(best, (time.perf_counter() - t) * 1000 / len(chunks))
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--size", default="small", choices=sorted(SIZES))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--embed-texts", type=int, default=2000, help="sentences embedded for the chars/s figure")
    ap.add_argument("--embed-batch-size", type=int, default=64)
    args = ap.parse_args()
    data = Path(args.data_dir)
    enc = CharEncoder.from_dir(data / L.TOKENIZER)
    matcher = WordMatcher.from_file(data / L.VOCAB / "vocab.txt")
    rows = read_table(data / L.PRETRAIN / "epoch=0", partition={"split": "train"}).head(args.batch_size * (args.steps + WARMUP))
    ex = rows.to_dict("records")
    chunks = [ex[i:i + args.batch_size] for i in range(0, len(ex), args.batch_size)]
    vec, loop = collate_ms(collate, chunks), collate_ms(collate_loop, chunks)
    print(f"collate, batch {args.batch_size}: vectorised {vec:.2f} ms/batch, per-word loop {loop:.2f} ms/batch "
          f"(ratio {vec / loop:.2f})")
    raw = [collate(c, 40, enc.pad) for c in chunks]
    device = resolve_device("auto")
    move = lambda b: {k: v.to(device) for k, v in b.items()}  # noqa: E731
    size = SIZES[args.size]
    torch.manual_seed(0)
    bert = BertForPreTraining(BertConfig(vocab_size=enc.size, max_position_embeddings=128,
                                         **{k: v for k, v in size.items() if k != "num_word_layers"}))
    plain = [move({k: v for k, v in b.items() if k not in ("word_ids", "matching_matrix")}) for b in raw]
    base = tokens_per_s(bert, plain, device)
    print(f"device {device}, size {args.size}, batch {args.batch_size}, {len(raw) - WARMUP} timed steps")
    print(f"{'model':<28}{'tokens/s':>10}{'ratio to BERT':>15}{'peak GiB':>10}")
    print(f"{'BertForPreTraining':<28}{base:>10,.0f}{1.0:>15.2f}{peak_gib(device):>10}")
    full = [move(b) for b in raw]
    for fusion in ("none", "gate", "attn"):
        torch.manual_seed(0)
        m = PolicyBertForPreTraining(PolicyBertConfig(vocab_size=enc.size, word_vocab_size=matcher.size,
                                                      max_position_embeddings=128, fusion=fusion, **size))
        tps = tokens_per_s(m, full, device)
        print(f"{'PolicyBert fusion=' + fusion:<28}{tps:>10,.0f}{tps / base:>15.2f}{peak_gib(device):>10}")
    texts = read_table(data / L.SENTENCES, ["text"])["text"].head(args.embed_texts).tolist()
    torch.manual_seed(0)
    encoder = PolicyBertForPreTraining(PolicyBertConfig(vocab_size=enc.size, word_vocab_size=matcher.size,
                                                        max_position_embeddings=128, fusion="gate", **size)).bert
    cps = embed_chars_per_s(encoder, enc, matcher, texts, device, args.embed_batch_size)
    print(f"embedding (gate, {len(texts)} sentences, batch {args.embed_batch_size}): {cps:,.0f} chars/s")


if __name__ == "__main__":
    main()
