"""Train the search's cross-encoder reranker (:mod:`retrieval.cross_encoder`; SPEC §7, §9) on a lent GPU, whose
calls carry at most 64 MiB: the same groups, the same :func:`retrieval.cross_encoder.train`, the same part.

    # here, where the index version lives:
    python bench/gpu_reranker.py export --data-dir DATA_NCPQA --out .gpu/ce [--init DATA/models/finetune-policysm1
        [--init-into-body]] [--negatives-from hybrid --negatives-skip 0,10,20 --cache DIR] [--dev-share 0.2] [--eval]
    # on the GPU machine (carry .gpu/ce):
    python bench/gpu_reranker.py train --pack .gpu/ce --out $OUT/part [--init .gpu/ce/init] --device cuda
        [--layers 12 --max-len 192 --steps 1500 --batch 16 --negatives 7 --lr 3e-5 --groups-per-forward 16]
        [--split-mib 15] [--groups groups-skip10.jsonl.xz] [--eval eval.jsonl.xz]
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
``--negatives-skip`` with a comma list writes one ``groups-skipN.jsonl.xz`` per depth (``train --groups`` picks
one); ``--dev-share`` keeps that share of the LeCoQA training questions out of the groups as a dev split
(:func:`retrieval.rerank_data.lecoqa_dev_split`); ``--eval`` writes ``eval.jsonl.xz``, the held-out candidates
(:func:`eval_cases`), which ``train --eval`` scores after training into ``info.eval`` (:func:`evaluate_cases`:
the figures of ``bench/rerank_bench.py`` with no faiss and nothing but JSON to bring back); ``--init-into-body``
carries the init's layers as the packed body's instead of beside it (one 50 MB body, not two).
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
    from flows.train_reranker import CORPUS, HELD_OUT, QA, check_sources, prepare

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sources = check_sources(s.strip() for s in args.sources.split(",") if s.strip())
    skips = [int(s) for s in str(args.negatives_skip).split(",")]
    names = ["groups.jsonl.xz"] if len(skips) == 1 else [f"groups-skip{s}.jsonl.xz" for s in skips]
    texts, counts = [], {}
    for skip, name in zip(skips, names):
        sets = prepare(args.data_dir, args.version, QA, CORPUS, sources=sources, negatives_from=args.negatives_from,
                       cache=args.cache, negatives_skip=skip, dev_share=args.dev_share)
        rows = group_rows(sets["train"], args.max_chars)
        (out / name).write_bytes(lzma.compress(_jsonl(rows).encode("utf-8")))
        texts.append(rows)
        counts[name] = sets["train"]["source"].value_counts().to_dict()
    b = sets["bundle"]
    if args.eval:
        texts.append(eval_cases(sets, args.cache))
        (out / "eval.jsonl.xz").write_bytes(lzma.compress(_jsonl(texts[-1]).encode("utf-8")))
    enc_dir = Path(args.data_dir) / "index" / b.manifest["encoder_dir"]
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp, "texts.jsonl")
        plain.write_text("".join(_jsonl(t) for t in texts), encoding="utf-8")
        body = pack(enc_dir, out / "body", [plain])
    meta = {"encoder_model_id": b.model_id, "index_version": b.version, "groups": counts, "max_chars": args.max_chars,
            "body_rows": body["rows"], "held_out": HELD_OUT + (f"; LeCoQA dev {args.dev_share} of its training "
                                                               "questions (seed 29)" if args.dev_share else ""),
            "negatives_from": args.negatives_from,
            "negatives_skip": dict(zip(names, skips)) if len(skips) > 1 else skips[0]}
    if args.init:
        meta["init" if not args.init_into_body else "body_init"] = str(args.init)
        _export_init(Path(args.init), out / "init")
        if args.init_into_body:
            _merge_into_body(out / "init", out / "body")
    (out / "meta.json").write_text(json.dumps(meta, ensure_ascii=False, indent=1), encoding="utf-8")
    return {str(f.relative_to(out)): f.stat().st_size for f in sorted(out.rglob("*")) if f.is_file()}


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def group_rows(train, cut: int) -> list[dict]:
    """The training groups frame as JSON rows, passages cut to ``cut`` chars."""
    return [{"source": s, "query": q, "positive": p[:cut], "negatives": [n[:cut] for n in negs]}
            for s, q, p, negs in zip(train["source"], train["query"], train["positive"], train["negatives"])]


def eval_cases(sets: dict, cache: str | None) -> list[dict]:
    """The held-out candidates :mod:`rerank_bench` reranks, as cases ``{set, query, gold, hits: [{doc_id,
    text}]}`` (hits in the search's order): ``ncpqa`` (the version's hybrid top 20 of each test question),
    ``lecoqa`` (the test questions' hybrid top 20 over the cited laws' articles) and, when ``sets`` has a dev
    split, ``lecoqa-dev`` (over all 13,003 articles: its own cited laws would need their own vectors)."""
    from rerank_bench import DEPTH, lecoqa_candidates

    from retrieval.rerank_data import _get, located_questions

    b, nq, lq = sets["bundle"], sets["ncpqa"], sets["lecoqa"]
    test = located_questions(nq, "test")
    cases = [{"set": "ncpqa", "query": q, "gold": [str(d)],
              "hits": [{"doc_id": str(_get(h, "doc_id")), "text": str(_get(h, "text"))}
                       for h in b.retriever.search(q, DEPTH, mode="hybrid")]}
             for q, d in zip(test["question"], test["doc_id"])]
    for split, name in (("test", "lecoqa"), ("dev", "lecoqa-dev")):
        if not (lq["split"] == split).any():
            continue
        one = {**sets, "lecoqa": lq.assign(split=lq["split"].map(lambda x, s=split: "test" if x == s else "other")),
               "full_pool": split == "dev"}
        q, cand = lecoqa_candidates(one, b.retriever.encoder, b.model_id, cache)
        ids, texts = one["pool"]["doc_id"].tolist(), one["pool"]["text"].tolist()
        cases += [{"set": name, "query": query, "gold": list(gold), "w_dense": float(q["w_dense"].iloc[0]),
                   "hits": [{"doc_id": str(ids[r]), "text": texts[r]} for r in rows]}
                  for query, gold, rows in zip(q["query"], q["gold"], cand)]
    return cases


def evaluate_cases(ce, cases: list[dict], weights=(1.0, 0.5)) -> list[dict]:
    """recall@k and MRR@10 per set of ``cases`` (:func:`eval_cases`) for the search's order and the
    cross-encoder's reorders (alone, and fused with the search at each weight <1), as :mod:`rerank_bench`
    computes them (documents in the order of their first hit)."""
    from rerank_bench import doc_order

    from retrieval.metrics import doc_metrics

    scored = [ce.score(c["query"], [h["text"] for h in c["hits"][:ce.depth]]) for c in cases]
    rows = []
    for name in dict.fromkeys(c["set"] for c in cases):
        idx = [i for i, c in enumerate(cases) if c["set"] == name]
        ks = (1, 3, 5) if name == "ncpqa" else (1, 5, 10)
        gold = [cases[i]["gold"] for i in idx]
        rows.append({"set": name, "system": "hybrid", **doc_metrics([doc_order(cases[i]["hits"]) for i in idx],
                                                                      gold, ks)})
        for w in weights:
            ranked = [doc_order(ce.reorder(cases[i]["hits"][:ce.depth], scored[i], w)) for i in idx]
            rows.append({"set": name, "system": "cross-encoder" + (" alone" if w >= 1 else f", fused ({w})"),
                         **doc_metrics(ranked, gold, ks)})
    return rows


def _merge_into_body(init: Path, body: Path) -> None:
    """Replace the packed body's layers by the init checkpoint's (same names), so the pack carries one body."""
    import shutil

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(body / "body.safetensors"), "pt") as f:
        meta = f.metadata()
    state = load_file(str(body / "body.safetensors"))
    state.update(load_file(str(init / "model.safetensors")))
    save_file(state, str(body / "body.safetensors"), metadata=meta)
    shutil.rmtree(init)


def _export_init(init_dir: Path, out: Path) -> None:
    """The body weights of a BERT-format checkpoint (layers, position/type embeddings and their LayerNorm; no
    word embeddings, no word side) in fp16 as ``out/model.safetensors``."""
    from safetensors.torch import load_file, save_file

    from retrieval.cross_encoder import init_weight_name

    state = load_file(str(init_dir / "model.safetensors"))
    keep = {}
    for k, v in state.items():
        name = init_weight_name(k)
        if name and name.startswith(("encoder.layer.", "embeddings.")):
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
    frame = pd.read_json(packd / args.groups, lines=True, compression="xz")
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
               "negatives_skip": _skip_of(meta, args.groups), "lr": args.lr, "groups_file": args.groups,
               "batch": args.batch, "negatives": args.negatives}
    if args.eval:
        cases = [json.loads(x) for x in lzma.decompress((packd / args.eval).read_bytes()).decode("utf-8")
                 .splitlines() if x.strip()]
        ce.module.to(args.device)
        t = time.perf_counter()
        ce.info["eval"] = {"rows": evaluate_cases(ce, cases), "seconds": round(time.perf_counter() - t, 1)}
        ce.module.to("cpu")
    out = ce.save(args.out)
    if args.split_mib:
        split_weights(Path(args.out), args.split_mib)
    return out


def _skip_of(meta: dict, groups_file: str) -> int:
    """The negatives depth of ``groups_file``: one for the pack, or the pack's ``{file: depth}``."""
    skip = meta.get("negatives_skip", 0)
    return skip[groups_file] if isinstance(skip, dict) else skip


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
    e.add_argument("--negatives-skip", default="0",
                   help="with hybrid: leave out its first N hits; a comma list writes groups-skipN.jsonl.xz each")
    e.add_argument("--dev-share", type=float, default=0.0, help="LeCoQA training questions moved to a dev split")
    e.add_argument("--eval", action="store_true", help="also write eval.jsonl.xz (held-out candidates)")
    e.add_argument("--init-into-body", action="store_true", help="carry --init's layers as the body's")
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
    t.add_argument("--groups", default="groups.jsonl.xz", help="the pack's groups file to train on")
    t.add_argument("--eval", default=None, help="the pack's eval cases (eval.jsonl.xz): figures into the part's info")
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
