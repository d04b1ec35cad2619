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
import unicodedata
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
    matches ZEN's ``num_hidden_word_layers`` when given); ``overrides`` set fusion, max_words, etc.

    On a pretrained body the fusion starts as the identity (``fusion_init="identity"``, SPEC §6 "On a pretrained
    body"; override with ``fusion_init="thesis"``), and ``token_stream`` is the folder's (:func:`model.tokens.
    stream_kind`: ``pieces`` for a checkpoint with only a SentencePiece ``tokenizer.json``, such as the converted
    e5)."""
    c = _read_config(char_backbone)
    keys = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
            "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
            "type_vocab_size", "initializer_range", "layer_norm_eps")
    kw = {k: c[k] for k in keys if k in c}
    if word_backbone:
        z = _read_config(word_backbone)
        kw["num_word_layers"] = z.get("num_hidden_word_layers", kw.get("num_word_layers", 6))
    if "pad_token_id" in c:
        kw["pad_token_id"] = c["pad_token_id"]
    # a pretrained body: fusion starts as the identity (SPEC §6, "On a pretrained body"), and the body reads its
    # own tokens (pieces when the folder has only a SentencePiece tokenizer)
    kw["fusion_init"] = "identity"
    kw["token_stream"] = _stream_kind_or_chars(char_backbone)
    kw.update(overrides)
    return PolicyBertConfig(**kw)


def _stream_kind_or_chars(folder) -> str:
    from model.tokens import TokenStreamError, stream_kind

    try:
        return stream_kind(folder)
    except TokenStreamError:
        return "chars"


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


@torch.no_grad()
def init_word_encoder(model, stream, matcher) -> list[str]:
    """Start a new word encoder from the char encoder of ``model`` (a PolicyBert* model), in place: word layer i
    = char layer i, a word's embedding row = the mean of its tokens' rows (its chars through ``stream``,
    :class:`model.tokens.CharEncoder`/:class:`model.tokens.PieceStream` ``ids``), word token-type embeddings and
    LayerNorm = the char embeddings' (SPEC §6, "On a pretrained body": what the word side starts from when no ZEN
    checkpoint is given). Returns the parameter names set."""
    bert = model.bert
    names = []
    for i, layer in enumerate(bert.encoder.word_layers):
        layer.load_state_dict(bert.encoder.layer[i].state_dict())
        names.append(f"bert.encoder.word_layers.{i}.*")
    if bert.word_embeddings is None:
        return names
    char_emb = bert.embeddings.word_embeddings.weight
    word_emb = bert.word_embeddings.word_embeddings.weight
    for w, i in matcher.word_to_id.items():
        ids = [c for c in stream.ids(list(w)) if c < char_emb.shape[0]]
        if ids and i < word_emb.shape[0]:
            word_emb[i] = char_emb[ids].mean(0)
    bert.word_embeddings.token_type_embeddings.load_state_dict(bert.embeddings.token_type_embeddings.state_dict())
    bert.word_embeddings.LayerNorm.load_state_dict(bert.embeddings.LayerNorm.state_dict())
    return names + ["bert.word_embeddings.*"]


PIECE_SPECIALS = {"[PAD]": ("<pad>", "[PAD]"), "[UNK]": ("<unk>", "[UNK]"), "[CLS]": ("<s>", "[CLS]"),
                  "[SEP]": ("</s>", "[SEP]"), "[MASK]": ("<mask>", "[MASK]")}
CHAR_PIECES = "char_pieces.tsv"


def char_pieces(piece_ids: dict[str, int]) -> dict[str, int]:
    """Per character, the piece of a SentencePiece vocabulary (``piece -> id``) that spells it alone: the bare
    piece ``c`` (how a char inside running text is written) when the vocabulary has it, else ``▁c`` (the
    metaspace form). Whitespace and multi-char pieces are left out; chars in piece-id order."""
    bare, spaced = {}, {}
    for p, i in piece_ids.items():
        if len(p) == 1 and not p.isspace() and p != "▁":
            bare[p] = i
        elif len(p) == 2 and p[0] == "▁" and not p[1].isspace():
            spaced[p[1]] = i
    out = {**spaced, **bare}
    return dict(sorted(out.items(), key=lambda kv: kv[1]))


def normalised_chars(chars: dict[str, int]) -> dict[str, int]:
    """Full-width forms and CJK punctuation that the SentencePiece normaliser (NFKC) rewrites to a char of
    ``chars`` (``，`` -> ``,``, ``Ａ`` -> ``A``), each with that char's piece: Chinese text writes them, and
    without them a char vocabulary would read every ``，`` as ``[UNK]``."""
    out = {}
    for cp in (*range(0x3000, 0x3040), *range(0xFF01, 0xFFEF)):
        c = chr(cp)
        n = unicodedata.normalize("NFKC", c)
        if c not in chars and n in chars:
            out[c] = chars[n]
    return out


@torch.no_grad()
def char_checkpoint_from_pieces(bert_dir: str | os.PathLike, out_dir: str | os.PathLike,
                                layers: int | None = None) -> dict:
    """A one-char-per-position BERT checkpoint from a BERT body with a SentencePiece tokenizer (such as the
    converted multilingual-e5-small, SPEC §8), as PolicyBERT reads chars (SPEC §6).

    Every char that a piece spells alone (:func:`char_pieces`) becomes a row of a new char vocabulary
    (``vocab.txt``: ``[PAD] [UNK] [CLS] [SEP] [MASK]`` = the tokenizer's ``<pad> <unk> <s> </s> <mask>``, then
    the chars), its embedding row copied from its piece's row; the other weights are the body's (the first
    ``layers`` layers when given). ``char_pieces.tsv`` lists ``char, piece id, piece`` per row. So the char
    model run on ``[CLS] c1 … cn [SEP]`` computes exactly what the body computes on those pieces.

    Raises:
        BackboneError: no ``tokenizer.json`` in ``bert_dir``, a special piece missing, or not a BERT config.
    """
    from tokenizers import Tokenizer
    from transformers import BertModel

    from model.features import save_char_tokenizer
    from storage.atomic import atomic_path

    bert_dir = Path(bert_dir)
    if not (bert_dir / "tokenizer.json").is_file():
        raise BackboneError(f"{bert_dir}: no tokenizer.json (a SentencePiece/fast tokenizer is needed)")
    if _read_config(bert_dir).get("model_type") != "bert":
        raise BackboneError(f"{bert_dir}: not a BERT checkpoint (config model_type)")
    vocab = Tokenizer.from_file(str(bert_dir / "tokenizer.json")).get_vocab(with_added_tokens=True)
    specials = {}
    for ours, names in PIECE_SPECIALS.items():
        found = [vocab[n] for n in names if n in vocab]
        if not found:
            raise BackboneError(f"{bert_dir}: tokenizer has none of {names} for {ours}")
        specials[ours] = found[0]
    chars = {c: i for c, i in char_pieces(vocab).items() if c not in specials}
    chars.update(normalised_chars(chars))
    body = BertModel.from_pretrained(str(bert_dir), add_pooling_layer=False,
                                     **({"num_hidden_layers": layers} if layers else {}))
    rows = list(specials.values()) + list(chars.values())
    emb = body.get_input_embeddings().weight[torch.tensor(rows)].clone()
    body.set_input_embeddings(torch.nn.Embedding.from_pretrained(emb, freeze=False, padding_idx=0))
    body.config.vocab_size, body.config.pad_token_id = len(rows), 0
    inv = {i: p for p, i in vocab.items()}
    with atomic_path(out_dir) as tmp:
        tmp.mkdir(parents=True)
        body.save_pretrained(tmp)
        save_char_tokenizer(list(specials) + list(chars), tmp)
        lines = [f"{c}\t{i}\t{inv[i]}" for c, i in list(specials.items()) + list(chars.items())]
        (tmp / CHAR_PIECES).write_text("\n".join(lines) + "\n", encoding="utf-8")
        (tmp / "char_source.json").write_text(json.dumps({"from": str(bert_dir), "layers": body.config.num_hidden_layers,
                                                          "chars": len(chars)}), encoding="utf-8")
    return {"chars": len(chars), "layers": body.config.num_hidden_layers, "out": str(out_dir)}


def main(argv: list[str] | None = None) -> int:
    """``char-checkpoint --from DIR --out DIR [--layers N]``: :func:`char_checkpoint_from_pieces`; prints its
    report; exits 2 with ``error: …`` on a folder it cannot convert."""
    import argparse
    import sys

    ap = argparse.ArgumentParser(prog="python -m model.backbones")
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("char-checkpoint", help="one char per position from a SentencePiece BERT body")
    c.add_argument("--from", dest="src", required=True, help="BERT checkpoint with tokenizer.json (e.g. model.e5's)")
    c.add_argument("--out", required=True, help="output checkpoint folder")
    c.add_argument("--layers", type=int, default=None, help="keep the first N layers (default all)")
    args = ap.parse_args(argv)
    try:
        print(json.dumps(char_checkpoint_from_pieces(args.src, args.out, args.layers)))
    except (BackboneError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
