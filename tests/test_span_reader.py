"""The neural span reader (model.span_reader) and recurring-span pretraining data (model.span_pretrain) on a tiny
randomly-initialised BERT (hidden 32) with a char-level WordPiece tokenizer the test builds."""
from __future__ import annotations

import random

import pytest
import torch

from model.span_pretrain import QUESTION_TOKEN, recurring_examples
from model.span_reader import (SpanReader, SpanReaderConfig, collate, encode_windows, load_reader,
                               train_features)

DOC = ("国务院办公厅关于支持中小企业发展的若干意见。各地要加大财政支持力度。"
       "北京市人民政府负责组织实施本意见。上海市经济和信息化委员会负责监督检查。"
       "对符合条件的企业给予贷款贴息支持。本意见自发布之日起施行。")


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import BertTokenizerFast

    chars = sorted(set(DOC + "谁负责组织实施？什么支持问哪些" + QUESTION_TOKEN + "abcdefghijklmnopqrstuvwxyz0123456789"))
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + chars
    return BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, tokenize_chinese_chars=True,
                             do_lower_case=False)


def tiny(tokenizer, max_len=48, stride=16):
    torch.manual_seed(0)
    cfg = SpanReaderConfig(max_len=max_len, doc_stride=stride, max_answer_chars=12, vocab_size=len(tokenizer),
                           hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           max_position_embeddings=128, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    model = SpanReader(cfg)
    model.tokenizer = tokenizer
    return model


def test_windows_cover_the_text_and_offsets_map_back_to_exact_chars(tokenizer):
    wins = encode_windows(tokenizer, "谁负责组织实施？", DOC, max_len=40, stride=10)
    assert len(wins) > 2 and all(len(w.input_ids) <= 40 for w in wins)
    covered = set()
    for w in wins:
        toks = tokenizer.convert_ids_to_tokens(w.input_ids)
        for t, o in zip(toks, w.offsets):
            if o is not None:
                assert DOC[o[0]:o[1]] == t
                covered.update(range(*o))
    assert covered == set(range(len(DOC)))


def test_answer_positions_point_at_the_answer_chars_or_cls(tokenizer):
    a = DOC.index("北京市人民政府")
    feats = train_features(tokenizer, [("谁负责组织实施？", DOC, a, a + 7)], 40, 10, null_keep=1.0)
    hits = [f for f in feats if f["start_positions"] > 0]
    assert hits and any(f["start_positions"] == 0 for f in feats)
    for f in hits:
        toks = tokenizer.convert_ids_to_tokens(f["input_ids"][f["start_positions"]:f["end_positions"] + 1])
        assert "".join(toks) == "北京市人民政府"


def test_null_score_wins_on_an_unanswerable_window(tokenizer):
    model = tiny(tokenizer, max_len=64)
    with torch.no_grad():
        model.qa.bias.copy_(torch.tensor([0.0, 0.0]))
        model.qa.weight.zero_()
        model.bert.embeddings.word_embeddings.weight[tokenizer.cls_token_id].fill_(0.0)
    # a head reading only the [CLS] position: every span scores below the null score
    with torch.no_grad():
        model.qa.weight.fill_(0.0)
    feats = train_features(tokenizer, [("什么支持？", DOC[:30], -1, -1)], 64, 16, null_keep=1.0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(30):
        loss = model(**collate(feats, tokenizer.pad_token_id)).loss
        loss.backward(), opt.step(), opt.zero_grad()
    spans = model.predict("什么支持？", DOC[:30], top_n=3)
    assert spans and all(score < 0 for _, _, score in spans)


@pytest.mark.slow
def test_recurring_span_training_lowers_the_loss_and_reloads_identically(tokenizer, tmp_path):
    texts = [DOC + "北京市人民政府负责组织实施。", DOC + "上海市经济和信息化委员会负责监督检查。"]
    ex = recurring_examples(texts, per_doc=4, reach=20)
    assert ex and all(QUESTION_TOKEN in q and c[a:b] in texts[0] + texts[1] for q, c, a, b in ex)
    model = tiny(tokenizer, max_len=64)
    feats = train_features(tokenizer, ex, 64, 16, null_keep=0.0, rng=random.Random(0))
    batch = collate(feats, tokenizer.pad_token_id)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    first = float(model(**batch).loss)
    for _ in range(40):
        loss = model(**batch).loss
        loss.backward(), opt.step(), opt.zero_grad()
    assert float(model(**batch).loss) < first * 0.7
    model.save_pretrained(str(tmp_path)), tokenizer.save_pretrained(str(tmp_path))
    again = load_reader(tmp_path)
    q, c = ex[0][0], ex[0][1]
    assert again.predict(q, c, top_n=3) == model.eval().predict(q, c, top_n=3)


def test_a_reader_saved_in_fp16_reloads_computing_in_float32(tokenizer, tmp_path):
    """flows.train_reader saves the reader in fp16; load_reader reads it back in float32 (fp16 products are
    ~10x slower on a CPU), equal to the saved weights and predicting as the fp16-rounded model does."""
    model = tiny(tokenizer)
    model.half().save_pretrained(str(tmp_path)), tokenizer.save_pretrained(str(tmp_path))
    again = load_reader(tmp_path)
    assert {p.dtype for p in again.parameters()} == {torch.float32}
    saved = model.state_dict()
    assert all(torch.equal(v, saved[k].float()) for k, v in again.state_dict().items())
    q = "谁负责组织实施？"
    assert again.predict(q, DOC, top_n=1)[0][:2] == model.float().eval().predict(q, DOC, top_n=1)[0][:2]


def test_mrc_span_questions_are_read_in_the_shared_format(tmp_path):
    """The reader's ``mrc`` source (model.span_pretrain.mrc_examples) reads ../shared/mrc's JSON Lines (gzip; ``answer_start`` a string,
    end exclusive), skips rows whose offsets do not fit and the CMRC 2018 dev file, and says so when nothing is
    usable."""
    import gzip
    import json

    import pytest

    from model.span_pretrain import mrc_examples

    ctx = "范廷颂于1919年6月15日在越南宁平省出生。"
    rows = [{"context": ctx, "question": "范廷颂何时出生？", "answer": "1919年6月15日", "answer_start": "4",
             "answer_end_exclusive": 14},
            {"context": ctx, "question": "坏行", "answer_start": "40", "answer_end_exclusive": 44},
            {"context": ctx, "question": "无起点", "answer_end_exclusive": 3}]
    with gzip.open(tmp_path / "drcd_test.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n")
    with gzip.open(tmp_path / "cmrc2018_dev.jsonl.gz", "wt", encoding="utf-8") as fh:
        fh.write(json.dumps(rows[0], ensure_ascii=False) + "\n")
    ex = mrc_examples(tmp_path, 10, 0)
    assert len(ex) == 1
    q, c, a, e = ex[0]
    assert q == "范廷颂何时出生？" and c[a:e] == "1919年6月15日"
    (tmp_path / "drcd_test.jsonl.gz").unlink()
    with pytest.raises(ValueError, match="no MRC span question"):
        mrc_examples(tmp_path, 10, 0)
