"""Encoder pinning (SPEC §7): every index version names the exact encoder that embedded it.

``model_id`` content-addresses a checkpoint: sha256 over every weight file of any format and the
files that decide what the weights compute (config, tokenizer vocabularies, the retrieval pooling
record). :func:`pin_encoder` copies those files into ``index/models/<model_id>/`` (shared by all
versions built with that encoder), so rolling back ``index/CURRENT`` embeds queries with the model
that built that version even after a fine-tune rewrote the training output dir.
:func:`verify_encoder` refuses a folder whose content no longer hashes to the manifest's id.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from storage import file_sha256
from storage.atomic import atomic_path

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".gguf")
# files besides the weights that change what an encoder computes for a text
DEFINING_FILES = ("config.json", "vocab.txt", "word_vocab.txt", "tokenizer.json", "tokenizer_config.json",
                  "special_tokens_map.json", "retrieval.json")
MODELS = "models"


class EncoderMismatchError(RuntimeError):
    """The encoder found for an index version is not the one that built it (different content hash)."""


def encoder_files(ckpt_dir: str | os.PathLike) -> list[Path]:
    """The files that define an encoder: weights of any format (``WEIGHT_SUFFIXES``, incl. sharded
    indexes ``*.index.json``) and ``DEFINING_FILES``; sorted by name. Training states and metrics
    are not part of it.

    Raises:
        FileNotFoundError: ``ckpt_dir`` holds no weight file.
    """
    d = Path(ckpt_dir)
    files = sorted(p for p in d.iterdir() if p.is_file() and (
        p.suffix in WEIGHT_SUFFIXES or p.name in DEFINING_FILES or p.name.endswith(".index.json")))
    if not any(p.suffix in WEIGHT_SUFFIXES for p in files):
        raise FileNotFoundError(f"no weight file ({', '.join(WEIGHT_SUFFIXES)}) in {d}")
    return files


def model_id(ckpt_dir: str | os.PathLike) -> str:
    """Content id of an encoder checkpoint: sha256 (first 16 hex) over ``name:sha256`` lines of
    :func:`encoder_files` (all weight files of any format plus config.json and the vocabularies).

    Raises:
        FileNotFoundError: no weight file in ``ckpt_dir``.
    """
    lines = "".join(f"{p.name}:{file_sha256(p)}\n" for p in encoder_files(ckpt_dir))
    return hashlib.sha256(lines.encode()).hexdigest()[:16]


def pinned_dir(index_root: str | os.PathLike, mid: str) -> Path:
    """``index/models/<model_id>``: the pinned copy of an encoder."""
    return Path(index_root) / MODELS / mid


def pin_encoder(index_root: str | os.PathLike, ckpt_dir: str | os.PathLike, expected_id: str | None = None) -> str:
    """Copy the encoder files of ``ckpt_dir`` into ``index/models/<model_id>/`` (once per id,
    atomically; files are copied, not hard-linked, so a later in-place rewrite of the training
    output cannot change a pinned encoder). Returns the folder relative to ``index_root``.

    Raises:
        EncoderMismatchError: ``ckpt_dir`` no longer hashes to ``expected_id`` (it changed between
            planning the index and publishing it), or the copy does not hash to its id.
    """
    mid = model_id(ckpt_dir)
    if expected_id is not None and mid != expected_id:
        raise EncoderMismatchError(f"encoder {ckpt_dir} changed while the index was built: "
                                   f"planned with model_id {expected_id}, now {mid}")
    dest = pinned_dir(index_root, mid)
    if not dest.is_dir():
        dest.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(dest) as tmp:
            tmp.mkdir()
            for f in encoder_files(ckpt_dir):
                shutil.copy2(f, tmp / f.name)
            if model_id(tmp) != mid:
                raise EncoderMismatchError(f"encoder {ckpt_dir} changed while it was copied")
    return str(dest.relative_to(Path(index_root)))


def verify_encoder(ckpt_dir: str | os.PathLike, expected_id: str) -> None:
    """Raise unless ``ckpt_dir`` hashes to ``expected_id``.

    Raises:
        EncoderMismatchError: missing folder or weights, or a different content hash.
    """
    try:
        mid = model_id(ckpt_dir)
    except FileNotFoundError as exc:
        raise EncoderMismatchError(f"the encoder of this index version is missing: {exc}") from exc
    if mid != expected_id:
        raise EncoderMismatchError(
            f"encoder {ckpt_dir} has model_id {mid} but this index version was built with {expected_id}; "
            f"refusing to serve (queries would be embedded with another model). Rebuild the index or restore "
            f"the encoder.")
