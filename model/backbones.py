"""Initialise PolicyBERT from local checkpoints, as the thesis did (SPEC §6): the char encoder and
pooler from a BERT checkpoint (e.g. ``BAAI/bge-base-zh-v1.5``), the word embeddings and word layers
from a ZEN checkpoint (``ZEN-pretrain-base``), the fusion layers new.

Checkpoints are read from local folders only (``model.safetensors`` or ``pytorch_model.bin`` plus
``config.json``); nothing is downloaded. ZEN stores its word encoder as ``word_embeddings.*`` and
``encoder.word_layers.*`` (old ``gamma``/``beta`` LayerNorm names are mapped); its n-gram vocabulary
``ngram.txt`` maps our vocabulary words to ZEN's rows (see :func:`read_zen_ngram_ids`), and words ZEN
lacks keep a fresh init.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from model.configuration import PolicyBertConfig


class BackboneError(ValueError):
    """A backbone folder lacks weights/config, or its shapes do not fit the model."""


def load_state_dict(folder: str | os.PathLike) -> dict[str, torch.Tensor]:
    """Weights of a checkpoint folder, keys with a leading ``bert.``/``model.`` prefix removed and
    ``gamma``/``beta`` renamed to ``weight``/``bias``.

    Raises:
        BackboneError: neither ``model.safetensors`` nor ``pytorch_model.bin`` is in the folder.
    """
    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        from safetensors.torch import load_file

        raw = load_file(str(folder / "model.safetensors"))
    elif (folder / "pytorch_model.bin").is_file():
        raw = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
    else:
        raise BackboneError(f"{folder}: no model.safetensors or pytorch_model.bin")
    out = {}
    for k, v in raw.items():
        for prefix in ("bert.", "model."):
            if k.startswith(prefix):
                k = k[len(prefix):]
                break
        k = k.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        out[k] = v
    return out


def _read_config(folder: str | os.PathLike) -> dict:
    for name in ("config.json", "bert_config.json"):
        p = Path(folder) / name
        if p.is_file():
            return json.loads(p.read_text(encoding="utf-8"))
    raise BackboneError(f"{folder}: no config.json")


def config_from_backbones(char_backbone: str, word_backbone: str | None = None, **overrides) -> PolicyBertConfig:
    """A PolicyBertConfig whose char encoder matches the BERT checkpoint (and whose word-layer count
    matches ZEN's ``num_hidden_word_layers`` when given); ``overrides`` set fusion, max_words, etc."""
    c = _read_config(char_backbone)
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
            "type_vocab_size", "initializer_range", "layer_norm_eps")
    kw = {k: c[k] for k in keys if k in c}
    if word_backbone:
        z = _read_config(word_backbone)
        kw["num_word_layers"] = z.get("num_hidden_word_layers", kw.get("num_word_layers", 6))
    kw.update(overrides)
    return PolicyBertConfig(**kw)


def _copy(target: dict[str, torch.Tensor], name: str, value: torch.Tensor, report: dict, source: str) -> None:
    if name not in target:
        report["skipped"].append(f"{source}:{name} (not in model)")
    elif target[name].shape != value.shape:
        report["skipped"].append(f"{source}:{name} shape {tuple(value.shape)} != {tuple(target[name].shape)}")
    else:
        target[name].copy_(value)
        report[source].append(name)


def read_zen_ngram_ids(path: str | os.PathLike) -> tuple[dict[str, int], int]:
    """ZEN's n-gram ids, read the way ZEN's own ``ZenNgramDict`` reads ``ngram.txt``
    (``ZEN/ngram_utils.py`` in sinovation/ZEN and sinovation/ZEN2).

    ``ngram.txt`` has no ``[pad]`` line: ZEN seeds its dict with ``{"[pad]": 0}`` and gives the
    0-based line ``i`` (Python file iteration, i.e. split on newlines only) the id ``i + 1``, which is the
    row of ``word_embeddings.word_embeddings.weight`` its model looks up (row 0 = padding). Each line is
    ``ngram,freq``; a line that does not split on ``,`` into exactly two fields (a blank line, a line
    without a frequency such as a literal ``[pad]``) is skipped as ZEN2's reader skips it, and still uses
    up its id, since ZEN numbers by line. A repeated n-gram keeps its last id, as ZEN's dict assignment
    does. ZEN keys by ``tuple(tokenizer.tokenize(ngram))``; here the key is the n-gram text, stripped.

    Returns:
        ``(ids, malformed)``: n-gram text -> ZEN id (>= 1), and the number of skipped lines.
    """
    ids: dict[str, int] = {}
    malformed = 0
    with open(path, "r", encoding="utf-8") as fin:
        for i, line in enumerate(fin):
            items = line.strip().split(",")
            if len(items) != 2:
                malformed += 1
                continue
            ids[items[0].strip()] = i + 1
    return ids, malformed


@torch.no_grad()
def init_from_backbones(model, char_backbone: str | None = None, word_backbone: str | None = None,
                        word_vocab: list[str] | None = None) -> dict:
    """Copy backbone weights into ``model`` (a PolicyBert* model) in place.

    Args:
        char_backbone: BERT checkpoint dir: ``embeddings.*``, ``encoder.layer.*``, ``pooler.*``.
        word_backbone: ZEN checkpoint dir: ``word_embeddings.*``, ``encoder.word_layers.*`` (+ ``ngram.txt``).
        word_vocab: our word list (ids 1..V); with ZEN's ``ngram.txt``, a word on 0-based line ``i``
            gets ZEN's row ``i + 1`` (ZEN's own numbering, :func:`read_zen_ngram_ids`).

    Returns:
        Report: ``char`` / ``word`` = parameter names loaded from each backbone, ``new`` = names left
        at their fresh init, ``skipped`` = source tensors not used (with the reason), and
        ``word_rows_from_zen`` = vocabulary words whose embedding row came from ZEN.
    """
    base = model.bert if hasattr(model, "bert") else model
    prefix = "bert." if base is not model else ""
    target = dict(model.state_dict(keep_vars=True))
    target = {k: v.data for k, v in target.items()}
    report: dict = {"char": [], "word": [], "skipped": [], "word_rows_from_zen": 0}
    if char_backbone:
        for k, v in load_state_dict(char_backbone).items():
            if k.startswith(("embeddings.", "encoder.layer.", "pooler.")) and "position_ids" not in k:
                _copy(target, prefix + k, v, report, "char")
    if word_backbone:
        sd = load_state_dict(word_backbone)
        ngram_file = Path(word_backbone) / "ngram.txt"
        for k, v in sd.items():
            if k.startswith("encoder.word_layers."):
                _copy(target, prefix + k, v, report, "word")
            elif k.startswith("word_embeddings.") and k != "word_embeddings.word_embeddings.weight":
                _copy(target, prefix + k, v, report, "word")
        emb = sd.get("word_embeddings.word_embeddings.weight")
        name = prefix + "word_embeddings.word_embeddings.weight"
        if emb is not None and word_vocab and ngram_file.is_file() and name in target:
            zen_ids, malformed = read_zen_ngram_ids(ngram_file)
            if malformed:
                report["skipped"].append(f"word:{ngram_file.name} {malformed} line(s) not 'ngram,freq' "
                                         "(skipped; their ids stay unused, as in ZEN)")
            if emb.shape[1] != target[name].shape[1]:
                report["skipped"].append(f"word:{name} hidden {emb.shape[1]} != {target[name].shape[1]}")
            else:
                for our_id, w in enumerate(word_vocab, start=1):
                    if w in zen_ids and zen_ids[w] < emb.shape[0] and our_id < target[name].shape[0]:
                        target[name][our_id] = emb[zen_ids[w]]
                        report["word_rows_from_zen"] += 1
                report["word"].append(f"{name} ({report['word_rows_from_zen']} rows)")
    loaded = {n.split(" ")[0] for n in report["char"] + report["word"]}
    # tied weights (the MLM decoder is the char embedding matrix) count as loaded with their source
    tied = dict(getattr(model, "_tied_weights_keys", None) or {})
    loaded |= {k for k, src in tied.items() if src in loaded}
    loaded_ptrs = {target[n].data_ptr() for n in loaded if n in target}
    report["new"] = [k for k, v in target.items() if k not in loaded and v.data_ptr() not in loaded_ptrs
                     and not k.endswith(("position_ids", "token_type_ids"))]
    return report


# PolicyBERT's specials -> the XLM-R pieces of a SentencePiece backbone such as multilingual-e5 (SPEC §8)
PIECE_SPECIALS = {"[PAD]": "<pad>", "[UNK]": "<unk>", "[CLS]": "<s>", "[SEP]": "</s>", "[MASK]": "<mask>"}


def piece_rows(char_vocab: list[str], tokenizer_file: str | os.PathLike) -> tuple[torch.Tensor, int]:
    """For each entry of PolicyBERT's char vocab (in id order), the embedding row of a SentencePiece backbone
    that the char maps to: specials by :data:`PIECE_SPECIALS`, a char by :class:`model.e5_tokenizer.CharPieces`
    (its normalised form's own piece, else ``▁``+char, else ``<unk>``; one char per position, the
    tokenisation measured for PolicyBERT in the README).

    Returns:
        (rows (len(char_vocab),) int64, number of chars that fell back to ``<unk>``).
    Raises:
        BackboneError: the tokenizer lacks a special piece.
    """
    from tokenizers import Tokenizer

    from model.e5_tokenizer import CharPieces

    pieces = CharPieces(Tokenizer.from_file(str(tokenizer_file)))
    v = pieces.vocab
    missing = [p for p in PIECE_SPECIALS.values() if p not in v]
    if missing:
        raise BackboneError(f"{tokenizer_file}: no special pieces {missing}")
    rows, unk = [], 0
    for tok in char_vocab:
        if tok in PIECE_SPECIALS:
            rows.append(v[PIECE_SPECIALS[tok]])
            continue
        ids = pieces(tok)
        norm = pieces.normalizer.normalize_str(tok) if pieces.normalizer else tok
        row = ids[0] if len(ids) == 1 else v.get(norm, v.get("▁" + norm, pieces.unk))
        unk += row == pieces.unk
        rows.append(row)
    return torch.tensor(rows, dtype=torch.long), int(unk)


@torch.no_grad()
def init_char_from_pieces(model, backbone: str | os.PathLike, char_vocab: list[str]) -> dict:
    """PolicyBERT's char encoder from a SentencePiece BERT checkpoint (e.g. :func:`model.e5.convert`'s): the
    layers, position/type embeddings and LayerNorm copied, the char embedding rows gathered from the
    backbone's piece rows (:func:`piece_rows`), so the model keeps its own small char vocab. The word
    encoder and fusion stay new. With no word input the char encoder computes what the backbone's
    ``BertModel`` computes on the same pieces (tested).

    Returns:
        Report as :func:`init_from_backbones` (``char``, ``new``, ``skipped``) plus ``unk_chars``.
    Raises:
        BackboneError: no weights/tokenizer in ``backbone``, or the model's char vocab size differs.
    """
    tok_file = Path(backbone) / "tokenizer.json"
    if not tok_file.is_file():
        raise BackboneError(f"{backbone}: no tokenizer.json (a SentencePiece backbone is needed)")
    base = model.bert if hasattr(model, "bert") else model
    prefix = "bert." if base is not model else ""
    target = {k: v.data for k, v in model.state_dict(keep_vars=True).items()}
    emb_name = prefix + "embeddings.word_embeddings.weight"
    if target[emb_name].shape[0] != len(char_vocab):
        raise BackboneError(f"model has {target[emb_name].shape[0]} char rows, vocab has {len(char_vocab)}")
    report: dict = {"char": [], "word": [], "skipped": []}
    rows, report["unk_chars"] = piece_rows(char_vocab, tok_file)
    for k, v in load_state_dict(backbone).items():
        if k == "embeddings.word_embeddings.weight":
            _copy(target, emb_name, v[rows], report, "char")
        elif k.startswith(("embeddings.", "encoder.layer.", "pooler.")) and "position_ids" not in k:
            _copy(target, prefix + k, v, report, "char")
    loaded = set(report["char"])
    report["new"] = [k for k in target if k not in loaded and not k.endswith(("position_ids", "token_type_ids"))]
    return report
