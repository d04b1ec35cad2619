import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification

import model  # noqa: F401  (registers the Auto classes)
from model import PolicyBertConfig, PolicyBertForPreTraining, PolicyBertForSequenceClassification, PolicyBertModel
from model.features import CharEncoder, WordMatcher, build_char_vocab, collate, encode, save_char_tokenizer, to_chars
from model.pretrain_data import whole_word_mask


def tiny_config(fusion="gate", **kw):
    return PolicyBertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=64, max_position_embeddings=64, fusion=fusion, num_word_layers=1,
                            word_vocab_size=12, max_words=4, **kw)


def tiny_batch():
    ids = torch.randint(5, 60, (2, 10))
    word_ids = torch.tensor([[3, 4, 0, 0], [5, 0, 0, 0]])
    mm = torch.zeros(2, 4, 10)
    mm[0, 0, 1:3] = 1
    mm[0, 1, 4:6] = 1
    mm[1, 0, 2:5] = 1
    att = torch.ones(2, 10, dtype=torch.long)
    att[1, 8:] = 0
    return {"input_ids": ids, "attention_mask": att, "word_ids": word_ids, "matching_matrix": mm}


@pytest.mark.parametrize("fusion", ["none", "gate", "attn"])
def test_forward_shapes_and_backward(fusion):
    torch.manual_seed(0)
    m = PolicyBertForPreTraining(tiny_config(fusion))
    b = tiny_batch()
    labels = torch.full_like(b["input_ids"], -100)
    labels[:, 2:5] = b["input_ids"][:, 2:5]
    out = m(**b, labels=labels, next_sentence_label=torch.tensor([0, 1]))
    # with labels, the vocabulary is scored at the 6 labelled positions only
    assert out.prediction_logits.shape == (6, 60) and out.seq_relationship_logits.shape == (2, 2)
    full = m.eval()(**b).prediction_logits
    assert full.shape == (2, 10, 60)
    assert torch.allclose(m(**b, labels=labels, next_sentence_label=torch.tensor([0, 1])).prediction_logits,
                          full[:, 2:5].reshape(6, 60), atol=1e-5)
    m.train()
    out = m(**b, labels=labels, next_sentence_label=torch.tensor([0, 1]))
    out.loss.backward()
    assert m.bert.word_embeddings.word_embeddings.weight.grad.abs().sum() > 0  # words reach the loss
    assert m.cls.predictions.decoder.weight is m.bert.embeddings.word_embeddings.weight


def test_words_change_the_output():
    torch.manual_seed(0)
    m = PolicyBertModel(tiny_config("none")).eval()
    b = tiny_batch()
    with torch.no_grad():
        with_words = m(**b).last_hidden_state
        without = m(b["input_ids"], b["attention_mask"]).last_hidden_state
    assert not torch.allclose(with_words, without)


def test_gate_bias_starts_open():
    m = PolicyBertForSequenceClassification(tiny_config("gate"))
    assert torch.all(m.bert.encoder.fusion[0].gate.bias == 5.0)


def test_gate_bias_is_open_when_from_pretrained_fills_in_missing_fusion_weights(tmp_path):
    """The path that initialises weights missing from a checkpoint keeps the gate bias at 5.0 too."""
    from safetensors.torch import load_file, save_file

    m = PolicyBertForSequenceClassification(tiny_config("gate", num_labels=2))
    m.save_pretrained(tmp_path)
    sd = load_file(tmp_path / "model.safetensors")
    save_file({k: v for k, v in sd.items() if ".fusion." not in k}, tmp_path / "model.safetensors",
              metadata={"format": "pt"})
    again = PolicyBertForSequenceClassification.from_pretrained(tmp_path)
    assert torch.all(again.bert.encoder.fusion[0].gate.bias == 5.0)
    assert not torch.equal(again.bert.encoder.fusion[0].gate.weight, torch.zeros_like(again.bert.encoder.fusion[0].gate.weight))


def _collate_loop():
    """The per-word loop collate the vectorised one replaced (kept in bench/model_bench.py as its timing reference)."""
    import importlib.util

    from tests.conftest import REPO

    spec = importlib.util.spec_from_file_location("model_bench", REPO / "bench" / "model_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench.collate_loop


def test_vectorised_collate_matches_the_per_word_loop():
    rng = np.random.default_rng(0)
    ex = []
    for i in range(9):
        n = int(rng.integers(3, 30))
        k = int(rng.integers(0, 12))
        starts = rng.integers(1, n - 1, size=k)
        spans = np.stack([starts, np.minimum(rng.integers(1, 5, size=k), n - starts)], axis=1) if k else np.zeros((0, 2))
        ex.append({"input_ids": np.asarray(rng.integers(5, 50, n)), "token_type_ids": [0] * n,
                   "word_ids": np.asarray(rng.integers(1, 20, k)), "word_spans": [np.asarray(s) for s in spans.astype(int)],
                   "mlm_labels": np.where(rng.random(n) < 0.2, rng.integers(5, 50, n), -100), "nsp_label": i % 2})
    got, ref = collate(ex, max_words=8, pad_id=0), _collate_loop()(ex, 8, 0)
    for key in ("input_ids", "word_ids", "matching_matrix", "labels"):
        assert torch.equal(got[key], ref[key]), key
    assert got["attention_mask"].sum().item() == sum(len(e["input_ids"]) for e in ex)
    assert got["next_sentence_label"].tolist() == [i % 2 for i in range(9)]


def test_attn_fusion_masks_padding():
    torch.manual_seed(0)
    m = PolicyBertModel(tiny_config("attn")).eval()
    b = tiny_batch()
    with torch.no_grad():
        a = m(**b).last_hidden_state[1, :8]
        b2 = {k: v.clone() for k, v in b.items()}
        b2["input_ids"][1, 8:] = 7  # change only padded positions
        c = m(**b2).last_hidden_state[1, :8]
    assert torch.allclose(a, c, atol=1e-5)


@pytest.mark.parametrize("fusion", ["none", "gate", "attn"])
def test_save_reload_identical_and_fusion_guard(tmp_path, fusion):
    torch.manual_seed(0)
    m = PolicyBertForSequenceClassification(tiny_config(fusion, num_labels=2)).eval()
    m.save_pretrained(tmp_path)
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert type(again) is PolicyBertForSequenceClassification and again.config.fusion == fusion
    b = tiny_batch()
    with torch.no_grad():
        assert torch.equal(m(**b).logits, again(**b).logits)
        base = AutoModel.from_pretrained(tmp_path).eval()
        assert torch.equal(m.bert(**b).last_hidden_state, base(**b).last_hidden_state)
    other = "attn" if fusion != "attn" else "gate"
    with pytest.raises(ValueError, match="refusing to load"):
        AutoModel.from_pretrained(tmp_path, fusion=other)


def test_config_validation():
    with pytest.raises(ValueError, match="fusion"):
        PolicyBertConfig(fusion="concat")
    with pytest.raises(ValueError, match="num_word_layers"):
        PolicyBertConfig(num_hidden_layers=2, num_word_layers=3)


def test_features_word_matches_and_matching_matrix(tmp_path):
    tok = save_char_tokenizer(build_char_vocab(["数据要素市场", "Data"]), tmp_path)
    enc = CharEncoder(tok.get_vocab())
    assert CharEncoder.from_dir(tmp_path).vocab == enc.vocab
    matcher = WordMatcher(["数据", "数据要素", "要素", "市场"])
    e = encode(to_chars("数据要素"), to_chars("市场"), enc, matcher, 32, 10, np.random.default_rng(0))
    assert e.input_ids[0] == enc.cls and e.input_ids[5] == enc.sep and e.token_type_ids == [0] * 6 + [1] * 3
    assert sorted(zip(e.word_spans, e.word_ids)) == [((1, 2), 1), ((1, 4), 2), ((3, 2), 3), ((6, 2), 4)]
    batch = collate([{"input_ids": e.input_ids, "token_type_ids": e.token_type_ids, "word_ids": e.word_ids,
                      "word_spans": e.word_spans, "label": 1}], max_words=10)
    mm = batch["matching_matrix"][0]
    assert mm.shape == (4, 9)
    for q, (start, length) in enumerate(e.word_spans):
        assert mm[q].nonzero().flatten().tolist() == list(range(start, start + length))
    assert batch["labels"].tolist() == [1]


def test_whole_word_masking_masks_whole_units(tmp_path):
    tok = save_char_tokenizer(build_char_vocab(["数据要素市场建设发展规划"]), tmp_path)
    enc = CharEncoder(tok.get_vocab())
    ids = [enc.cls] + enc.ids(to_chars("数据要素市场建设发展规划")) + [enc.sep]
    units = [(1, 2), (3, 2), (5, 2), (7, 2), (9, 2), (11, 2)]
    for seed in range(20):
        masked, labels = whole_word_mask(ids, units, enc, 0.15, np.random.default_rng(seed))
        chosen = [u for u in units if labels[u[0]] != -100]
        assert len(chosen) == 1  # 15% of 12 chars -> one 2-char word
        s, n = chosen[0]
        assert all(labels[s + j] == ids[s + j] for j in range(n))  # the whole word is predicted
        assert sum(1 for x in labels if x != -100) == n


def test_pretrain_data_deterministic_per_seed_and_epoch(tmp_path):
    import pandas as pd

    from model.pretrain_data import PretrainDataConfig, build_pretrain_epoch

    sents = pd.DataFrame({"doc_id": ["a"] * 6 + ["b"] * 6, "sent_idx": list(range(6)) * 2,
                          "text": [f"数据要素市场第{i}条建设要求。" for i in range(12)]})
    segs = sents.assign(words=[["数据", "要素", "市场", "第", str(i), "条", "建设", "要求", "。"] for i in range(12)])
    tok = save_char_tokenizer(build_char_vocab(sents["text"]), tmp_path)
    enc = CharEncoder(tok.get_vocab())
    matcher = WordMatcher(["数据", "要素", "市场", "建设", "要求"])
    split = {"a": "train", "b": "train"}
    cfg = PretrainDataConfig(seed=3)
    e0, stats = build_pretrain_epoch(sents, segs, split, enc, matcher, cfg, 0)
    again, _ = build_pretrain_epoch(sents, segs, split, enc, matcher, cfg, 0)
    e1, _ = build_pretrain_epoch(sents, segs, split, enc, matcher, cfg, 1)
    assert e0.astype(str).equals(again.astype(str)) and not e0.astype(str).equals(e1.astype(str))
    assert len(e0) == 10 and stats["examples"] == 10  # every sentence with a next one in its document
    inv = {i: t for t, i in tok.get_vocab().items()}
    for row in e0.itertuples():
        ids = [lab if lab != -100 else i for i, lab in zip(row.input_ids, row.mlm_labels)]  # masks undone
        text_a, text_b = "".join(inv[i] for i in ids).split("[SEP]")[:2]
        n_a, n_b = (int(t.split("第")[1].split("条")[0]) for t in (text_a, text_b))
        assert n_a // 6 == "ab".index(row.doc_id)  # sentence A is from the row's document
        if row.nsp_label == 0:  # B is the real next sentence of the same document
            assert n_b == n_a + 1 and n_b // 6 == n_a // 6
        else:  # B is a random sentence, not the next one
            assert n_b != n_a + 1
        masked = [i for i, x in enumerate(row.mlm_labels) if x != -100]
        assert 1 <= len(masked) <= 0.15 * (len(row.input_ids) - 3) + 2  # whole words up to the 15% budget
