"""Identity-initialised fusion on a pretrained body (SPEC §6, "On a pretrained body"; ReZero, Bachlechner et al.
2020; ControlNet, Zhang et al. 2023): on multilingual-e5-small's first 2 layers reading its own pieces, PolicyBERT
with none/gate/attn fusion and real word matches outputs what the body alone outputs (100 real sentences), the
config round-trips, and the word side learns (its zero-initialised scales get gradient, a few steps move the
output). The thesis initialisation stays the default of a from-scratch config."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model.features import WordMatcher, collate, encode_tokens
from tests.test_token_stream import _sentences

LAYERS = 2


@pytest.fixture(scope="module")
def setup(e5):
    from transformers import BertModel

    from model.tokens import load_stream

    stream = load_stream(e5)
    assert stream.kind == "pieces"
    sents = [t for _, _, t in _sentences(n_docs=12, per_doc=12)][:100]
    assert len(sents) == 100
    grams = {t[k:k + 2] for t in sents for k in range(len(t) - 1)}
    matcher = WordMatcher(sorted(g for g in grams if not any(c.isspace() for c in g))[:3000])
    rng = np.random.default_rng(0)
    ex = [vars(encode_tokens(stream.tokens(t), None, stream, matcher, 64, 24, rng)) for t in sents]
    body = BertModel.from_pretrained(str(e5), num_hidden_layers=LAYERS, add_pooling_layer=False).eval()
    return stream, matcher, ex, body


def _policybert(e5, body, matcher, fusion: str):
    from model import PolicyBertModel
    from model.backbones import config_from_backbones, init_from_backbones

    cfg = config_from_backbones(str(e5), fusion=fusion, num_hidden_layers=LAYERS, num_word_layers=1,
                                word_vocab_size=matcher.size, max_words=24)
    assert cfg.fusion_init == "identity" and cfg.token_stream == "pieces" and cfg.pad_token_id == 1
    model = PolicyBertModel(cfg, add_pooling_layer=False)
    if fusion == "gate":  # the real loading path once; the others share the body's weights (less memory)
        init_from_backbones(model, str(e5))
    else:
        model.embeddings.word_embeddings = body.embeddings.word_embeddings
        missing = model.load_state_dict({k: v for k, v in body.state_dict().items()
                                         if "word_embeddings" not in k}, strict=False)
        assert not missing.unexpected_keys
    return model.eval()


@pytest.mark.slow  # the converted e5 body per fusion kind (~13 s for the three on 2 cores)
@pytest.mark.parametrize("fusion", ["none", "gate", "attn"])
def test_identity_fusion_outputs_the_body(e5, setup, fusion):
    stream, matcher, ex, body = setup
    model = _policybert(e5, body, matcher, fusion)
    worst, words = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(ex), 25):
            batch = collate(ex[i:i + 25], 24, stream.pad)
            words += int((batch["word_ids"] != 0).sum())
            theirs = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                          token_type_ids=batch["token_type_ids"]).last_hidden_state
            mine = model(**batch).last_hidden_state
            keep = batch["attention_mask"].bool()
            worst = max(worst, float((mine - theirs)[keep].abs().max()))
    assert words > 1000  # real word matches went through the word side
    assert worst <= 1e-6


@pytest.mark.slow
def test_word_side_learns_from_identity(e5, setup):
    stream, matcher, ex, body = setup
    for fusion in ("gate", "attn", "none"):
        model = _policybert(e5, body, matcher, fusion).train()
        for name, p in model.named_parameters():  # the body stays frozen: only the word side can move the output
            p.requires_grad_(not name.startswith(("embeddings.", "encoder.layer.")))
        batch = collate(ex[:16], 24, stream.pad)
        with torch.no_grad():
            target = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        losses = []
        for _ in range(4):
            out = model(**batch).last_hidden_state
            loss = ((out - (target + 0.5)) ** 2)[batch["attention_mask"].bool()].mean()
            opt.zero_grad()
            loss.backward()
            if not losses:  # step 0: every zero-initialised scale gets gradient
                assert all(float(s.weight.grad.abs().sum()) > 0 for s in model.encoder.fusion_scale)
            opt.step()
            losses.append(float(loss.detach()))
        model.eval()
        with torch.no_grad():
            moved = (model(**batch).last_hidden_state - target)[batch["attention_mask"].bool()].abs().max()
        assert float(moved) > 1e-2 and losses[-1] < losses[0], fusion


def test_fusion_init_saved_and_defaults(tmp_path):
    from model import PolicyBertConfig, PolicyBertModel

    assert PolicyBertConfig().fusion_init == "thesis"  # from scratch: SPEC §6 as written
    cfg = PolicyBertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=32, num_word_layers=1, word_vocab_size=9, fusion="attn",
                           fusion_init="identity", token_stream="pieces")
    model = PolicyBertModel(cfg)
    assert [float(s.weight.abs().sum()) for s in model.encoder.fusion_scale] == [0.0, 0.0]
    with torch.no_grad():
        model.encoder.fusion_scale[0].weight.fill_(0.25)
    model.save_pretrained(tmp_path)
    back = PolicyBertModel.from_pretrained(tmp_path)
    assert back.config.fusion_init == "identity" and back.config.token_stream == "pieces"
    assert torch.equal(back.encoder.fusion_scale[0].weight, torch.full((16,), 0.25))
    with pytest.raises(ValueError, match="fusion_init"):
        PolicyBertModel.from_pretrained(tmp_path, fusion_init="thesis")
    with pytest.raises(ValueError, match="fusion_init"):
        PolicyBertConfig(fusion_init="zero")
    thesis = PolicyBertModel(PolicyBertConfig(**{**cfg.to_dict(), "fusion_init": "thesis"}))
    assert thesis.encoder.fusion_scale is None and not any("fusion_scale" in k for k in thesis.state_dict())
