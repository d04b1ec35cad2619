"""Train the search's cross-encoder reranker (:mod:`retrieval.cross_encoder`; SPEC §7, §9) on a lent GPU, whose
calls carry at most 64 MiB: the same groups, the same :func:`retrieval.cross_encoder.train`, the same part.

    # here, where the index version lives:
    python bench/gpu_reranker.py export --data-dir DATA_NCPQA --out .gpu/ce [--init DATA/models/finetune-policysm1]
    # on the GPU machine (carry .gpu/ce):
    python bench/gpu_reranker.py train --pack .gpu/ce --out $OUT/part [--init .gpu/ce/init] --device cuda
        [--layers 12 --max-len 192 --steps 1500 --batch 16 --negatives 7 --lr 3e-5 --groups-per-forward 16]
        [--split-mib 15]
    # here, after fetching the part's folder:
    python bench/gpu_reranker.py join --part DIR

``export`` writes the training groups of :func:`flows.train_reranker.prepare` (sources ``ncpqa,lecoqa,mined``,
leak-checked against the held-out NCPQA and LeCoQA questions; texts cut to ``--max-chars``) as
``groups.jsonl.xz``, the index version's encoder packed by ``bench/carry_body.py`` (fp16 layers, only the token
rows the groups reach) under ``body/``, ``meta.json`` (the encoder's content id, the version), and with
``--init`` the layers and position/type embeddings of a BERT-format checkpoint (PolicyBERT's character/piece
stream; its word side is not read) in fp16 under ``init/``. ``train`` unpacks the body, builds the
cross-encoder exactly as ``python -m flows.train_reranker`` does (balanced sources, seeded), trains it on
``--device`` and saves the part (``reranker.json`` + fp16 ``reranker.safetensors``, 42 MB for 12 layers) with
its figures: steps, seconds, loss, pairs/s, tokens/s and peak accelerator memory in ``info.trained``. The part
names the real encoder's id, so it loads on the full encoder here (:func:`retrieval.cross_encoder.load_cross_encoder`).
``--split-mib`` cuts the weights into pieces small enough to come back (16 MiB a file on the lent machines);
``join`` puts them together and checks the sha256 the part's JSON records.
Errors: ``FileNotFoundError`` for a missing pack file or piece; ``ValueError`` for pieces that do not join to
the recorded weights.
"""
from __future__ import annotations

import argparse
import json
import lzma
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def export(args) -> dict:
    """Write the pack folder (module docstring); returns its file sizes (bytes)."""
    from carry_body import pack
    from flows.train_reranker import CORPUS, QA, check_sources, prepare

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sources = check_sources(s.strip() for s in args.sources.split(",") if s.strip())
    sets = prepare(args.data_dir, args.version, QA, CORPUS, sources=sources, negatives_from=args.negatives_from,
                   cache=args.cache, negatives_skip=args.negatives_skip)
    b, train = sets["bundle"], sets["train"]
    cut = args.max_chars
    rows = [{"source": s, "query": q, "positive": p[:cut], "negatives": [n[:cut] for n in negs]}
            for s, q, p, negs in zip(train["source"], train["query"], train["positive"], train["negatives"])]
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    (out / "groups.jsonl.xz").write_bytes(lzma.compress(text.encode("utf-8")))
    enc_dir = Path(args.data_dir) / "index" / b.manifest["encoder_dir"]
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp, "groups.jsonl")
        plain.write_text(text, encoding="utf-8")
        body = pack(enc_dir, out / "body", [plain])
    meta = {"encoder_model_id": b.model_id, "index_version": b.version, "groups": train["source"].value_counts()
            .to_dict(), "max_chars": cut, "body_rows": body["rows"],
            "held_out": "NCPQA split_by_document(0.3, seed 13) test; LeCoQA lecoqa_split(0.2, seed 13) test",
            "negatives_from": args.negatives_from, "negatives_skip": args.negatives_skip}
    if args.init:
        meta["init"] = str(args.init)
        _export_init(Path(args.init), out / "init")
    (out / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
    return {str(f.relative_to(out)): f.stat().st_size for f in sorted(out.rglob("*")) if f.is_file()}


def _export_init(init_dir: Path, out: Path) -> None:
    """The body weights of a BERT-format checkpoint (layers, position/type embeddings and their LayerNorm; no
    word embeddings, no word side) in fp16 as ``out/model.safetensors``."""
    from safetensors.torch import load_file, save_file

    from retrieval.cross_encoder import WORD_EMBEDDINGS

    state = load_file(str(init_dir / "model.safetensors"))
    keep = {}
    for k, v in state.items():
        name = k.split(".", 1)[1] if k.startswith(("bert.", "model.")) else k
        if (name.startswith("encoder.layer.") or name.startswith("embeddings.")) and name != WORD_EMBEDDINGS:
            keep[name] = v.half().contiguous()
    out.mkdir(parents=True, exist_ok=True)
    save_file(keep, str(out / "model.safetensors"), metadata={"format": "pt", "source": str(init_dir)})


def train_on_pack(args) -> Path:
    """Unpack, train on ``args.device`` and save the part (module docstring); returns the part's JSON path."""
    import pandas as pd
    import torch

    from carry_body import unpack
    from flows.train_reranker import balanced
    from retrieval.cross_encoder import CrossEncoder, CrossEncoderConfig, TrainConfig, train
    from retrieval.encoders import BertEncoder
    from retrieval.rerank_data import to_groups

    packd = Path(args.pack)
    meta = json.loads((packd / "meta.json").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="ce-body-") as tmp:  # the restored body is read into memory
        unpack(packd / "body", Path(tmp))
        enc = BertEncoder.from_checkpoint(tmp, device="cpu")
    cfg = CrossEncoderConfig(layers=args.layers, max_len=args.max_len, max_query=min(48, args.max_len // 2),
                             precision=args.precision)
    ce = CrossEncoder.from_encoder(enc, meta["encoder_model_id"], cfg, init=args.init, seed=args.seed)
    ce.module.to(args.device)
    frame = pd.read_json(packd / "groups.jsonl.xz", lines=True, compression="xz")
    tcfg = TrainConfig(steps=args.steps, batch=args.batch, negatives=args.negatives, max_seconds=args.max_seconds,
                       lr=args.lr, warmup=args.warmup, max_len=args.train_max_len, precision=args.precision,
                       seed=args.seed, groups_per_forward=args.groups_per_forward)
    groups = balanced(frame, tcfg.steps * tcfg.batch, tcfg.seed)
    cuda = str(args.device).startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    stats = train(ce, to_groups(groups), tcfg, shuffle=False)
    if cuda:
        stats["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
        stats["device_name"] = torch.cuda.get_device_name()
    stats["tokens_per_second_max"] = round(stats["pairs_per_second"] * (tcfg.max_len or cfg.max_len), 1)
    ce.module.to("cpu")
    ce.info = {"trained": stats, "device": str(args.device), "precision": args.precision, "seed": args.seed,
               "init": (args.init and meta.get("init", args.init)) or meta.get("body_init", "encoder (plain e5)"),
               "groups": groups["source"].value_counts().to_dict(), "index_version": meta["index_version"],
               "held_out": meta["held_out"], "negatives_from": meta.get("negatives_from", "bm25"),
               "negatives_skip": meta.get("negatives_skip", 0), "lr": args.lr,
               "batch": args.batch, "negatives": args.negatives}
    out = ce.save(args.out)
    if args.split_mib:
        split_weights(Path(args.out), args.split_mib)
    return out


def split_weights(part_dir: Path, mib: float) -> list[Path]:
    """Cut the part's weights file into ``<file>.partNN`` pieces of at most ``mib`` MiB (a lent machine sends
    back files of at most 16 MiB) and remove it; :func:`join_weights` puts it back."""
    d = json.loads((part_dir / "reranker.json").read_text(encoding="utf-8"))
    src = part_dir / d["weights"]["file"]
    data, size = src.read_bytes(), max(1, int(mib * 2 ** 20))
    pieces = []
    for i in range(0, len(data), size):
        pieces.append(part_dir / f"{src.name}.part{i // size:02d}")
        pieces[-1].write_bytes(data[i:i + size])
    src.unlink()
    return pieces


def join_weights(part_dir: Path) -> Path:
    """Concatenate the ``<file>.partNN`` pieces back into the weights file the part's JSON names and check its
    sha256.

    Raises:
        FileNotFoundError: no piece; ValueError: the joined file's sha256 is not the JSON's."""
    import hashlib

    from storage import atomic_write_bytes

    d = json.loads((part_dir / "reranker.json").read_text(encoding="utf-8"))
    dst = part_dir / d["weights"]["file"]
    pieces = sorted(part_dir.glob(f"{dst.name}.part[0-9][0-9]"))
    if not pieces:
        raise FileNotFoundError(f"no {dst.name}.partNN pieces in {part_dir}")
    data = b"".join(p.read_bytes() for p in pieces)
    if hashlib.sha256(data).hexdigest() != d["weights"]["sha256"]:
        raise ValueError(f"{dst.name}: the joined pieces do not match the sha256 in reranker.json")
    atomic_write_bytes(dst, data)
    for p in pieces:
        p.unlink()
    return dst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--data-dir", required=True)
    e.add_argument("--version", default=None)
    e.add_argument("--out", required=True)
    e.add_argument("--init", default=None)
    e.add_argument("--sources", default="ncpqa,lecoqa,mined")
    e.add_argument("--max-chars", type=int, default=400, help="passage chars kept (192 e5 tokens need fewer)")
    e.add_argument("--negatives-from", default="bm25", choices=("bm25", "hybrid"))
    e.add_argument("--negatives-skip", type=int, default=0, help="with hybrid: leave out its first N hits")
    e.add_argument("--cache", default=None, help="folder caching the statute pool's vectors (hybrid negatives)")
    t = sub.add_parser("train")
    t.add_argument("--pack", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--init", default=None)
    t.add_argument("--device", default="cuda")
    t.add_argument("--layers", type=int, default=12)
    t.add_argument("--max-len", type=int, default=192)
    t.add_argument("--train-max-len", type=int, default=None)
    t.add_argument("--steps", type=int, default=1500)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--negatives", type=int, default=7)
    t.add_argument("--lr", type=float, default=3e-5)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--max-seconds", type=float, default=240.0)
    t.add_argument("--precision", default="bf16")
    t.add_argument("--seed", type=int, default=13)
    t.add_argument("--groups-per-forward", type=int, default=16)
    t.add_argument("--split-mib", type=float, default=0, help="cut the weights into pieces of this many MiB (0: no)")
    j = sub.add_parser("join")
    j.add_argument("--part", required=True)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    if args.cmd == "export":
        print(json.dumps(export(args), indent=1))
    elif args.cmd == "join":
        print(f"weights: {join_weights(Path(args.part))}")
    else:
        print(f"part: {train_on_pack(args)}")
    print(f"{args.cmd}: {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
