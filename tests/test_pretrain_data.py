"""model/pretrain_data.py: whole-word masking with leak-free word matches, on a corpus the test builds."""
import numpy as np
import pandas as pd

from model.features import CharEncoder, WordMatcher, build_char_vocab, to_chars
from model.pretrain_data import PretrainDataConfig, build_pretrain_epoch

WORDS = ["数据", "要素", "市场", "制度", "建设", "完善", "推进", "管理", "服务体系", "安全", "发展", "规划"]


def _corpus(n_docs=6, n_sents=8, seed=0):
    """Sentences made of vocabulary words only (so every char lies in some word) with their segmentation."""
    rng = np.random.default_rng(seed)
    sents, segs = [], []
    for d in range(n_docs):
        for i in range(n_sents):
            words = [WORDS[k] for k in rng.integers(len(WORDS), size=int(rng.integers(6, 14)))]
            sents.append({"doc_id": f"d{d}", "sent_idx": i, "text": "".join(words) + "。"})
            segs.append({"doc_id": f"d{d}", "sent_idx": i, "words": words + ["。"]})
    return pd.DataFrame(sents), pd.DataFrame(segs)


def _epoch(max_words=40, epoch=0):
    sents, segs = _corpus()
    enc = CharEncoder({t: i for i, t in enumerate(build_char_vocab(sents["text"]))})
    split_of = {f"d{d}": ("train" if d < 4 else "dev") for d in range(6)}
    cfg = PretrainDataConfig(max_len=48, max_words=max_words)
    return build_pretrain_epoch(sents, segs, split_of, enc, WordMatcher(WORDS), cfg, epoch)


def test_no_word_span_covers_a_predicted_position():
    df, stats = _epoch()
    assert len(df) > 30 and 0.1 < stats["masked_share"] < 0.2
    n_words = 0
    for spans, labels in zip(df["word_spans"], df["mlm_labels"]):
        hidden = {p for p, lab in enumerate(labels) if lab != -100}
        assert hidden, "every example masks something"
        for start, length in spans:
            assert not hidden & set(range(start, start + length)), (spans, sorted(hidden))
        n_words += len(spans)
    assert n_words > 5 * len(df)  # the unmasked words still reach the word encoder


def test_kept_words_are_real_matches_and_capped():
    df, _ = _epoch(max_words=5)
    sents, _ = _corpus()
    enc = CharEncoder({t: i for i, t in enumerate(build_char_vocab(sents["text"]))})
    inv = {i: t for t, i in enc.vocab.items()}
    matcher = WordMatcher(WORDS)
    for ids, labels, wids, spans in zip(df["input_ids"], df["mlm_labels"], df["word_ids"], df["word_spans"]):
        assert len(wids) <= 5
        original = [inv[int(lab)] if lab != -100 else inv[int(i)] for i, lab in zip(ids, labels)]
        for wid, (start, length) in zip(wids, spans):
            assert matcher.word_to_id["".join(original[start:start + length])] == wid
            assert all(inv[int(i)] not in ("[MASK]",) for i in ids[start:start + length])


def test_epochs_are_deterministic_and_differ():
    a, _ = _epoch(epoch=0)
    b, _ = _epoch(epoch=0)
    c, _ = _epoch(epoch=1)
    assert a["mlm_labels"].map(list).tolist() == b["mlm_labels"].map(list).tolist()
    assert a["mlm_labels"].map(list).tolist() != c["mlm_labels"].map(list).tolist()
    assert to_chars("数据 A") == ["数", "据", "a"]
