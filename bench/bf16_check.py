"""Do examples with no vocabulary words give NaN under bf16 autocast? (each fusion, one run)

    python bench/bf16_check.py --data-dir data [--size base]

Takes real pretraining batches, drops every word from half of the examples (``word_ids`` all 0, an
empty matching matrix row), runs forward + backward under bf16 autocast on CUDA (on CPU: float32,
as training does there) and prints, per fusion, whether the loss, the MLM/NSP logits or any gradient
hold a NaN/inf, with the step time (ms) and the peak GPU memory (GiB).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from model import PolicyBertConfig, PolicyBertForPreTraining
from model.features import CharEncoder, WordMatcher, collate
from model.training import autocast, resolve_device
from storage import layout as L
from storage import read_table

from model_bench import SIZES  # noqa: E402  (bench/ is on sys.path when run as a script)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--size", default="base", choices=sorted(SIZES))
    ap.add_argument("--batches", type=int, default=6)
    args = ap.parse_args()
    data = Path(args.data_dir)
    enc = CharEncoder.from_dir(data / L.TOKENIZER)
    matcher = WordMatcher.from_file(data / L.VOCAB / "vocab.txt")
    ex = read_table(data / L.PRETRAIN / "epoch=0", partition={"split": "train"}).head(32 * args.batches).to_dict("records")
    for i, e in enumerate(ex):
        if i % 2:
            e["word_ids"], e["word_spans"] = [], []
    device = resolve_device("auto")
    batches = [{k: v.to(device) for k, v in collate(ex[i:i + 32], 40, enc.pad).items()} for i in range(0, len(ex), 32)]
    print(f"device {device}, size {args.size}, {len(batches)} batches of 32, half the examples without words")
    for fusion in ("none", "gate", "attn"):
        torch.manual_seed(0)
        m = PolicyBertForPreTraining(PolicyBertConfig(vocab_size=enc.size, word_vocab_size=matcher.size,
                                                      max_position_embeddings=128, fusion=fusion,
                                                      **SIZES[args.size])).to(device).train()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            torch.cuda.synchronize()
        bad, t = [], time.perf_counter()
        for b in batches:
            with autocast(device):
                out = m(**b)
            out.loss.backward()
            for name, v in (("loss", out.loss), ("mlm", out.prediction_logits), ("nsp", out.seq_relationship_logits)):
                if not torch.isfinite(v.float()).all():
                    bad.append(name)
            bad += [n for n, p in m.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
            m.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        ms = 1000 * (time.perf_counter() - t) / len(batches)
        peak = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else float("nan")
        print(f"fusion={fusion:<5} non-finite: {sorted(set(bad))[:5] or 'none'}; {ms:.1f} ms/batch (fwd+bwd, incl. "
              f"warm-up); peak GPU {peak:.2f} GiB")


if __name__ == "__main__":
    main()
