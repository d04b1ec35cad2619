"""Carry a converted body checkpoint (``python -m model.e5 convert``) to a lent GPU inside its 64 MiB call limit,
and restore it there with the same token ids.

    python bench/carry_body.py pack --model DIR/models/e5 --out .gpu/body --texts FILE_OR_TABLE_DIR [...]
    python bench/carry_body.py unpack --packed .gpu/body --out /tmp/e5

``pack`` keeps the token-embedding rows of every id the given texts can reach, and every other tensor, in fp16
(``body.safetensors`` with the kept ids under ``carry.row_ids``); ``tokenizer.json`` is xz-compressed; the small
JSON files are copied. A text reaches the ids of its own tokenization and of each of its characters tokenized
alone. Inputs: plain text files (each line a text), JSON Lines files (``.jsonl``: every string value of every
record a text, lists and nested records included), or Parquet table folders (:func:`storage.tables.read_table`;
every string column). Pass the word vocabularies too (one word a line): a new word encoder starts each word's
row from the pieces of the word tokenized alone (:func:`model.backbones.init_word_encoder`), which a
sentence's tokenization need not produce. e5-small: 12 layers in fp16 are 42 MB; its 250k-row embedding (192 MB in fp16) shrinks to the few
thousand rows a task's texts use.

``unpack`` writes a checkpoint folder whose ``model.safetensors`` is fp32 at the full vocabulary size, the rows
not kept set to zero. Only unkept ids read those rows, and the packed texts never produce one, so on those
texts the restored body computes what the fp16-rounded original computes (token embeddings frozen in every
fine-tuning here, so the zero rows never train). Errors: ``FileNotFoundError`` for a missing model file.
"""
from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

EMB = "embeddings.word_embeddings.weight"
ROWS = "carry.row_ids"


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _lines(path: Path):
    if path.suffix == ".jsonl":
        with path.open(encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    yield from _strings(json.loads(line))
        return
    if path.is_dir():
        import pandas as pd

        from storage.tables import read_table

        df = read_table(path)
        for col in df.columns:
            if pd.api.types.is_string_dtype(df[col]) or df[col].dtype == object:
                yield from (str(v) for v in df[col] if isinstance(v, str))
        return
    with path.open(encoding="utf-8") as f:
        yield from (line.rstrip("\n") for line in f)


def reachable_ids(model_dir: Path, inputs: list[Path]) -> set[int]:
    """Every token id the texts of ``inputs`` reach: their tokenization and their single characters', plus the
    special tokens."""
    from model.tokens import load_stream

    stream = load_stream(model_dir)
    ids = set(stream.tokens("").ids) | {0, 1, 2, 3}
    for p in inputs:
        for line in _lines(p):
            ids.update(stream.tokens(line).ids)
            for c in set(line):
                ids.update(stream.ids([c]))
    return ids


def pack(model_dir: Path, out: Path, inputs: list[Path]) -> dict:
    """Write the packed folder (module docstring); returns {rows, bytes}."""
    import torch
    from safetensors.torch import load_file, save_file

    state = load_file(str(model_dir / "model.safetensors"))
    ids = torch.tensor(sorted(i for i in reachable_ids(model_dir, inputs) if i < state[EMB].shape[0]))
    packed = {k: v.half().contiguous() for k, v in state.items() if k != EMB}
    packed[EMB] = state[EMB][ids].half().contiguous()
    packed[ROWS] = ids
    out.mkdir(parents=True, exist_ok=True)
    save_file(packed, str(out / "body.safetensors"), metadata={"vocab_size": str(state[EMB].shape[0])})
    for f in model_dir.iterdir():
        if f.suffix == ".json" and f.name != "tokenizer.json" and not f.name.startswith("."):
            shutil.copy2(f, out / f.name)
    (out / "tokenizer.json.xz").write_bytes(lzma.compress((model_dir / "tokenizer.json").read_bytes()))
    size = sum(f.stat().st_size for f in out.iterdir())
    return {"rows": len(ids), "bytes": size}


def unpack(packed_dir: Path, out: Path) -> dict:
    """Restore the checkpoint folder (module docstring); returns {rows, vocab_size}."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    with safe_open(str(packed_dir / "body.safetensors"), "pt") as f:
        vocab = int(f.metadata()["vocab_size"])
    state = load_file(str(packed_dir / "body.safetensors"))
    ids, rows = state.pop(ROWS), state.pop(EMB)
    full = torch.zeros(vocab, rows.shape[1])
    full[ids] = rows.float()
    state = {k: v.float().contiguous() for k, v in state.items()}
    state[EMB] = full
    out.mkdir(parents=True, exist_ok=True)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    for f in packed_dir.iterdir():
        if f.suffix == ".json":
            shutil.copy2(f, out / f.name)
    (out / "tokenizer.json").write_bytes(lzma.decompress((packed_dir / "tokenizer.json.xz").read_bytes()))
    return {"rows": len(ids), "vocab_size": vocab}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("--model", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--texts", nargs="+", required=True, help="text/JSON-lines files or Parquet table folders")
    u = sub.add_parser("unpack")
    u.add_argument("--packed", required=True)
    u.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "pack":
        print(json.dumps(pack(Path(args.model), Path(args.out), [Path(t) for t in args.texts])))
    else:
        print(json.dumps(unpack(Path(args.packed), Path(args.out))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
