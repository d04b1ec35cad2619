"""Training loop resume and backbone initialisation on tiny models and checkpoints the tests build."""
import json

import numpy as np
import pytest
import torch
from transformers import BertConfig, BertModel

from model import PolicyBertConfig, PolicyBertForPreTraining, PolicyBertForSequenceClassification
from model.backbones import BackboneError, config_from_backbones, init_from_backbones, load_state_dict
from model.features import collate
from model.training import TrainConfig, train


def _examples(n=40, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        ln = int(rng.integers(6, 14))
        ids = [2] + rng.integers(5, 60, ln).tolist() + [3]
        out.append({"input_ids": ids, "token_type_ids": [0] * len(ids), "word_ids": [1 + i % 10, 2],
                    "word_spans": [(1, 2), (3, 2)], "label": int(ids[1] % 2)})
    return out


def _model():
    torch.manual_seed(0)
    return PolicyBertForSequenceClassification(PolicyBertConfig(
        vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=32, num_word_layers=1, word_vocab_size=12, max_words=4, num_labels=2))


class Kill(Exception):
    pass


def test_resume_after_kill_gives_the_same_weights(tmp_path):
    cfg = TrainConfig(epochs=3, batch_size=8, grad_accum=2, lr=1e-3, save_every=2, log_every=100, seed=5)
    fn = lambda ex: collate(ex, 4)  # noqa: E731
    data = _examples()
    straight = _model()
    r0 = train(straight, data, fn, cfg, log=lambda s: None)
    assert r0["steps"] == 9  # 3 epochs x ceil(5 batches / 2)

    def kill_at_5(step, total):
        if step == 5:
            raise Kill()

    resumed = _model()
    with pytest.raises(Kill):
        train(resumed, data, fn, cfg, log=lambda s: None, state_dir=tmp_path, on_step=kill_at_5)
    assert json.loads((tmp_path / "trainer_state" / "position.json").read_text())["step"] == 4
    fresh = _model()  # a new process: weights from init, state from disk
    r1 = train(fresh, data, fn, cfg, log=lambda s: None, state_dir=tmp_path)
    assert r1["resumed_from"] == 4 and r1["steps"] == 9
    for (n, a), (_, b) in zip(straight.state_dict().items(), fresh.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), n
    # a finished loop resumed again is a no-op
    assert train(fresh, data, fn, cfg, log=lambda s: None, state_dir=tmp_path)["resumed_from"] == 9


def _bge_like(tmp_path):
    cfg = BertConfig(vocab_size=70, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=64)
    torch.manual_seed(1)
    bert = BertModel(cfg)
    d = tmp_path / "bge"
    bert.save_pretrained(d)
    return d, bert


def _zen_like(tmp_path, words):
    """A ZEN-format checkpoint: pytorch_model.bin with bert.word_embeddings.* (gamma/beta LayerNorm
    names) and bert.encoder.word_layers.*, config.json with num_hidden_word_layers, ngram.txt."""
    torch.manual_seed(2)
    donor = PolicyBertForPreTraining(PolicyBertConfig(
        vocab_size=70, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=64, num_word_layers=1, word_vocab_size=len(words) + 1))
    sd = {}
    for k, v in donor.state_dict().items():
        if k.startswith(("bert.word_embeddings.", "bert.encoder.word_layers.")):
            sd[k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")] = v.clone()
    d = tmp_path / "zen"
    d.mkdir()
    torch.save(sd, d / "pytorch_model.bin")
    (d / "config.json").write_text(json.dumps({"hidden_size": 32, "num_hidden_word_layers": 1, "word_size": len(words) + 1}))
    (d / "ngram.txt").write_text("\n".join(["[pad]"] + words) + "\n", encoding="utf-8")
    return d, sd


def test_init_from_bge_and_zen_backbones(tmp_path):
    bge, bert = _bge_like(tmp_path)
    zen, zsd = _zen_like(tmp_path, ["数据", "要素", "市场"])
    ours = ["要素", "制度", "数据"]  # ids 1..3; 制度 is unknown to ZEN
    cfg = config_from_backbones(str(bge), str(zen), fusion="gate", word_vocab_size=len(ours) + 1, max_words=8)
    assert (cfg.hidden_size, cfg.num_hidden_layers, cfg.num_word_layers, cfg.vocab_size) == (32, 2, 1, 70)
    model = PolicyBertForPreTraining(cfg)
    rep = init_from_backbones(model, str(bge), str(zen), ours)
    sd = model.state_dict()
    for k, v in bert.state_dict().items():
        if "position_ids" not in k:
            assert torch.equal(sd["bert." + k], v), k
    assert torch.equal(sd["bert.encoder.word_layers.0.output.dense.weight"],
                       zsd["bert.encoder.word_layers.0.output.dense.weight"])
    assert torch.equal(sd["bert.word_embeddings.LayerNorm.weight"], zsd["bert.word_embeddings.LayerNorm.gamma"])
    zen_emb = zsd["bert.word_embeddings.word_embeddings.weight"]
    assert torch.equal(sd["bert.word_embeddings.word_embeddings.weight"][1], zen_emb[2])  # 要素 = ZEN row 2
    assert torch.equal(sd["bert.word_embeddings.word_embeddings.weight"][3], zen_emb[1])  # 数据 = ZEN row 1
    assert rep["word_rows_from_zen"] == 2
    assert any(n.startswith("bert.encoder.fusion.0.gate") for n in rep["new"])
    assert not any(n.startswith(("bert.encoder.layer.", "bert.embeddings.")) for n in rep["new"])
    assert "cls.predictions.decoder.weight" not in rep["new"]  # tied to the loaded char embeddings
    assert torch.equal(model.cls.predictions.decoder.weight, bert.embeddings.word_embeddings.weight)
    assert torch.all(model.bert.encoder.fusion[0].gate.bias == 5.0)  # new fusion keeps its open gate


def test_backbone_errors(tmp_path):
    with pytest.raises(BackboneError, match="no model.safetensors"):
        load_state_dict(tmp_path)
