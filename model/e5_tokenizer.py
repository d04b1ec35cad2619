"""The e5 file's SentencePiece-unigram tokenizer as a ``tokenizers`` fast tokenizer (SPEC §8).

The package's engine (``e5.c``): each code point through the file's normalisation map, runs of spaces
collapsed to one, ``▁`` prepended unless the text starts with a space, spaces → ``▁``, then a Viterbi
over the piece scores (an unknown char scores ``min − 10`` and becomes ``<unk>``); ids wrapped in
``<s> … </s>``. The same pipeline in ``tokenizers`` (what XLM-RoBERTa's ``tokenizer.json`` does):
normalizer ``Precompiled`` (the map compiled to SentencePiece's char-map trie by the ``sentencepiece``
library's own builder) then ``Replace(" {2,}", " ")``; pre-tokenizer ``Metaspace`` (always prepend);
``Unigram`` over the file's pieces and scores; template ``<s> $A </s>``.
"""
from __future__ import annotations

import io
import os
import tempfile
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from model.e5_format import E5File

SPECIALS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


def _proto_fields(buf: bytes):
    """(field number, value) pairs of one protobuf message (varint and length-delimited fields; the
    wire format, https://protobuf.dev/programming-guides/encoding/)."""
    i = 0

    def varint():
        nonlocal i
        v = s = 0
        while True:
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << s
            s += 7
            if b < 0x80:
                return v

    while i < len(buf):
        key = varint()
        num, wire = key >> 3, key & 7
        if wire == 0:
            yield num, varint()
        elif wire == 2:
            n = varint()
            yield num, buf[i:i + n]
            i += n
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            raise ValueError(f"protobuf wire type {wire} unsupported")


def compile_charsmap(norm_map: dict[int, tuple[int, ...]]) -> bytes:
    """SentencePiece ``precompiled_charsmap`` bytes for a code point → code points map, built by the
    ``sentencepiece`` library (its trainer compiles a ``normalization_rule_tsv``; a 1-piece char model is
    trained on a dummy line only to get the compiled ``NormalizerSpec.precompiled_charsmap``, field 3.2 of
    ``ModelProto``).

    Raises:
        ValueError: the trainer's output holds no char map.
    """
    import sentencepiece as spm

    rules = "".join(f"{cp:X}\t{' '.join(f'{o:X}' for o in out)}\n" for cp, out in sorted(norm_map.items()))
    with tempfile.TemporaryDirectory() as tmp:
        tsv = Path(tmp, "rules.tsv")
        tsv.write_text(rules, encoding="utf-8")
        out = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter(["a b c"] * 4), model_writer=out, model_type="char",
                                       vocab_size=8, hard_vocab_limit=False, normalization_rule_tsv=str(tsv),
                                       minloglevel=2, num_threads=1)
    for num, spec in _proto_fields(out.getvalue()):
        if num == 3:
            for n2, blob in _proto_fields(spec):
                if n2 == 2:
                    return bytes(blob)
    raise ValueError("sentencepiece trainer wrote no precompiled_charsmap")


def build_tokenizer(e5: E5File) -> Tokenizer:
    """An XLM-RoBERTa-style fast tokenizer from the file's pieces, scores, special ids and normalisation
    map; ``encode(text).ids`` = ``[bos] + pieces + [eos]`` as the package's engine tokenizes."""
    sp = e5.special
    vocab = [(p, float(s)) for p, s in zip(e5.pieces, e5.scores)]
    tok = Tokenizer(models.Unigram(vocab, unk_id=sp["unk"], byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(compile_charsmap(e5.norm_map)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    bos, eos = e5.pieces[sp["bos"]], e5.pieces[sp["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, sp["bos"]), (eos, sp["eos"])])
    tok.add_special_tokens([p for p in SPECIALS if p in e5.pieces])
    return tok


def tokenizer_config(e5: E5File, max_len: int) -> dict:
    """``tokenizer_config.json`` so ``AutoTokenizer`` / ``XLMRobertaTokenizerFast`` load ``tokenizer.json``."""
    sp = e5.special
    return {"tokenizer_class": "XLMRobertaTokenizerFast", "model_max_length": max_len,
            "bos_token": e5.pieces[sp["bos"]], "eos_token": e5.pieces[sp["eos"]], "sep_token": e5.pieces[sp["eos"]],
            "cls_token": e5.pieces[sp["bos"]], "unk_token": e5.pieces[sp["unk"]], "pad_token": e5.pieces[sp["pad"]],
            "mask_token": "<mask>", "add_prefix_space": True, "clean_up_tokenization_spaces": False}


def save_tokenizer(e5: E5File, folder: str | os.PathLike, max_len: int) -> None:
    """Write ``tokenizer.json`` and ``tokenizer_config.json`` into ``folder`` (not atomic on its own: the
    caller builds the whole checkpoint folder under a temporary name)."""
    import json

    build_tokenizer(e5).save(str(Path(folder, "tokenizer.json")))
    Path(folder, "tokenizer_config.json").write_text(json.dumps(tokenizer_config(e5, max_len), indent=1),
                                                     encoding="utf-8")


class CharPieces:
    """One id per character of the normalised text (no specials): the piece that is that character, else
    ``▁`` + the character, else ``<unk>``; a space is the ``▁`` piece. The input PolicyBERT's char encoder
    feeds a SentencePiece body (SPEC §6: fusion works on character positions). ``CharPieces(tok)(text)``.

    Raises:
        ValueError: the tokenizer has no ``<unk>`` piece.
    """

    def __init__(self, tokenizer: Tokenizer):
        self.vocab, self.normalizer = tokenizer.get_vocab(), tokenizer.normalizer
        if "<unk>" not in self.vocab:
            raise ValueError("tokenizer has no <unk> piece")
        self.unk = self.vocab["<unk>"]

    def __call__(self, text: str) -> list[int]:
        """Ids (len = chars of the normalised text)."""
        norm = self.normalizer.normalize_str(text) if self.normalizer else text
        v, unk = self.vocab, self.unk
        return [v.get(ch, v.get("▁" + ch, unk)) if ch != " " else v.get("▁", unk) for ch in norm]
