"""The cpu-small PolicyBERT path (SPEC §6, "On a pretrained body", "Tokens of a SentencePiece body"): the backbone
stage's pieces checkpoint of the real multilingual-e5-small, the pretraining stage without MLM steps
(``domain_adapt=False``: the identity-initialised model, word encoder started from the body), and fine-tuning
under bf16 autocast with the token embeddings frozen; on real corpus sentences."""
from __future__ import annotations

import os
from dataclasses import asdict, replace

import numpy as np
import pandas as pd
import pytest
import torch

from tests.test_token_stream import _sentences

LAYERS = 2


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """sentences / segments / vocab / documents_clean tables of 12 real documents, and PolicySM-1-shaped pairs
    (a sentence with its successor: 1; with a sentence of another document: 0)."""
    from storage import write_table

    d = tmp_path_factory.mktemp("tables")
    sents = pd.DataFrame(_sentences(n_docs=12, per_doc=10), columns=["doc_id", "sent_idx", "text"])
    words = sorted({t[k:k + 2] for t in sents["text"] for k in range(len(t) - 1) if not t[k:k + 2].isspace()})[:800]
    segs = sents[["doc_id", "sent_idx"]].assign(words=[[t[k:k + 2] for k in range(0, len(t), 2)] for t in sents["text"]])
    write_table(sents, d / "sentences", name="sentences")
    write_table(segs, d / "segments", name="segments")
    write_table(pd.DataFrame({"word": words}), d / "vocab", name="vocab")
    (d / "vocab" / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    write_table(pd.DataFrame({"doc_id": sorted(set(sents["doc_id"]))}), d / "documents_clean", name="documents_clean")
    rng, rows = np.random.default_rng(0), []
    texts = sents["text"].tolist()
    for i in range(len(texts) - 1):
        same = sents["doc_id"][i] == sents["doc_id"][i + 1]
        if same:
            rows.append((texts[i], texts[i + 1], 1))
            rows.append((texts[i], texts[int(rng.integers(len(texts)))], 0))
    pairs = pd.DataFrame(rows, columns=["text_a", "text_b", "label"])
    pairs["split"] = np.where(np.arange(len(pairs)) % 5 == 0, "dev", np.where(np.arange(len(pairs)) % 5 == 1,
                                                                               "test", "train"))
    write_table(pairs, d / "policysm1", name="policysm1", partition_by="split")
    return d, sents["text"].tolist()[:40]


def test_pieces_checkpoint_is_the_body_on_its_pieces(e5, tmp_path):
    from transformers import BertModel

    from model.backbone_stage import pieces_checkpoint
    from model.backbones import BackboneError
    from model.tokens import load_stream, stream_kind

    out = pieces_checkpoint(e5, tmp_path / "b2", LAYERS)
    assert out == {"layers": LAYERS, "tokens": "pieces"} and stream_kind(tmp_path / "b2") == "pieces"
    ids = torch.tensor([load_stream(tmp_path / "b2").ids(list("推进数据要素市场化配置改革"))])
    a = BertModel.from_pretrained(str(tmp_path / "b2"), add_pooling_layer=False).eval()
    b = BertModel.from_pretrained(str(e5), num_hidden_layers=LAYERS, add_pooling_layer=False).eval()
    assert a.config.num_hidden_layers == LAYERS
    with torch.no_grad():
        assert torch.equal(a(ids).last_hidden_state, b(ids).last_hidden_state)
    whole = pieces_checkpoint(e5, tmp_path / "b12")  # all layers: hard links, no second copy of 470 MB
    assert whole["layers"] == 12
    assert os.stat(tmp_path / "b12" / "model.safetensors").st_ino == os.stat(e5 / "model.safetensors").st_ino
    with pytest.raises(BackboneError, match="13 layers asked|12 layers, 13"):
        pieces_checkpoint(e5, tmp_path / "b13", 13)
    assert not (tmp_path / "b13").exists()


@pytest.mark.slow  # the real e5 body through three stages (~15 s on 2 cores)
def test_no_adaptation_keeps_the_body_and_finetunes_in_bf16(e5, inputs, tmp_path):
    from transformers import BertModel

    from flows.profiles import get_profile
    from model import PolicyBertModel
    from model.backbone_stage import backbone_stage
    from model.features import collate, encode_tokens
    from model.stages import finetune_stage, load_inputs, pretrain_inputs_stage, pretrain_stage

    d, texts = inputs
    cfg = get_profile("cpu-small")
    assert (cfg.backbone.tokens, cfg.domain_adapt, cfg.finetune.precision) == ("pieces", False, "bf16")
    backbone_stage(tmp_path / "e5", tmp_path / "backbone", e5.parent, replace(cfg.backbone, layers=LAYERS),
                   e5_file=None)
    r = pretrain_inputs_stage(d / "sentences", d / "segments", d / "vocab", d / "documents_clean",
                              tmp_path / "tokenizer", tmp_path / "pretrain", cfg.pairs, cfg.pretrain_data, 1,
                              backbone=str(tmp_path / "backbone"))
    assert r["token_stream"] == "pieces"
    m = pretrain_stage(tmp_path / "pretrain", tmp_path / "tokenizer", d / "vocab", tmp_path / "pre",
                       asdict(cfg.model), cfg.pretrain, 1, backbone=str(tmp_path / "backbone"), adapt=False)
    assert m["train"]["steps"] == 0 and m["heldout"] is None
    assert not [k for k in m["init_report"]["new"] if k.startswith(("bert.encoder.layer.", "bert.encoder.word_"))]

    # the saved model is the body: identity fusion with real word matches, word layer 0 = char layer 0
    stream, matcher = load_inputs(tmp_path / "pre")
    model = PolicyBertModel.from_pretrained(tmp_path / "pre", add_pooling_layer=False).eval()
    body = BertModel.from_pretrained(str(tmp_path / "backbone"), add_pooling_layer=False).eval()
    assert torch.equal(model.encoder.word_layers[0].output.dense.weight, model.encoder.layer[0].output.dense.weight)
    rng = np.random.default_rng(0)
    ex = [vars(encode_tokens(stream.tokens(t), None, stream, matcher, 64, 24, rng)) for t in texts]
    with torch.no_grad():
        batch = collate(ex, 24, stream.pad)
        matched = int((batch["word_ids"] != 0).sum())
        theirs = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      token_type_ids=batch["token_type_ids"]).last_hidden_state
        keep = batch["attention_mask"].bool()
        worst = float((model(**batch).last_hidden_state - theirs)[keep].abs().max())
    assert matched > 100 and worst <= 1e-6

    ft = replace(cfg.finetune, epochs=1, max_steps=6, eval_every=3, save_every=0, batch_size=8)
    f = finetune_stage(tmp_path / "pre", d / "policysm1", tmp_path / "ft", ft, max_len=64, max_eval_examples=40)
    assert f["train"]["steps"] == 6 and 0.0 <= f["test"]["accuracy"] <= 1.0
    from transformers import AutoModelForSequenceClassification

    tuned = AutoModelForSequenceClassification.from_pretrained(tmp_path / "ft")
    start = PolicyBertModel.from_pretrained(tmp_path / "pre", add_pooling_layer=False)
    emb = "embeddings.word_embeddings.weight"
    assert torch.equal(tuned.bert.get_parameter(emb), start.get_parameter(emb))  # frozen
    # the dev figures reported are the kept point's: the saved model evaluated again on the same dev sample
    from model.stages import batch_collator, encode_pairs, read_split
    from model.training import evaluate_classifier

    dev = encode_pairs(read_split(d / "policysm1", "dev", 40, ft.seed), stream, matcher, 64, 24, ft.seed)
    assert f["best_step"] in (3, 6) and f["dev"] == evaluate_classifier(tuned, dev, batch_collator(tuned.config,
                                                                                                    stream.pad), ft)
    moved = tuned.bert.encoder.layer[1].output.dense.weight - start.encoder.layer[1].output.dense.weight
    assert float(moved.detach().abs().max()) > 0  # the body trained


def test_precision_and_freeze_are_checked():
    from model.training import TrainConfig, autocast, freeze_parameters, uses_bf16

    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp16")
    cpu = torch.device("cpu")
    assert not uses_bf16(cpu) and uses_bf16(cpu, "bf16") and uses_bf16(torch.device("cuda"))
    lin = torch.nn.Linear(8, 8)
    with autocast(cpu, "bf16"):
        assert lin(torch.ones(2, 8)).dtype == torch.bfloat16
    with autocast(cpu):
        assert lin(torch.ones(2, 8)).dtype == torch.float32
    seq = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    assert freeze_parameters(seq, "0.") == ["0.weight", "0.bias"]
    assert not seq[0].weight.requires_grad and seq[1].weight.requires_grad
    with pytest.raises(ValueError, match="names no parameter"):
        freeze_parameters(seq, "bert.embeddings")


def test_bf16_encoder_choice_embeds_close_to_float32(e5, tmp_path):
    """``EncoderChoiceConfig.precision`` reaches the forward: bf16 vectors differ from float32 ones (autocast is
    on) yet rank alike (cosine >= 0.99 per text)."""
    from model.backbone_stage import pieces_checkpoint
    from retrieval.encoders import Encoder
    from retrieval.select import EncoderChoiceConfig

    with pytest.raises(ValueError, match="precision"):
        EncoderChoiceConfig(precision="fp16")
    pieces_checkpoint(e5, tmp_path / "b2", LAYERS)
    texts = [t for _, _, t in _sentences(n_docs=4, per_doc=5)]
    full = Encoder.from_checkpoint(tmp_path / "b2").encode_corpus(texts)
    half = Encoder.from_checkpoint(tmp_path / "b2", precision="bf16").encode_corpus(texts)
    assert full.shape == half.shape == (len(texts), 384)
    assert not np.array_equal(full, half)
    assert float((full * half).sum(1).min()) >= 0.99


def test_every_profile_is_on_the_command_line_and_scratch_keeps_its_budget():
    from flows.cli import PROFILE_NAMES
    from flows.profiles import PROFILES

    assert list(PROFILE_NAMES) == list(PROFILES)
    small, scratch = PROFILES["cpu-small"], PROFILES["cpu-scratch"]
    assert (small.backbone.char_init, small.backbone.tokens, small.backbone.layers) == (True, "pieces", 0)
    assert small.finetune.freeze == "bert.embeddings.word_embeddings" and small.retrieval_encoder.precision == "bf16"
    assert not scratch.backbone.char_init and scratch.domain_adapt and scratch.pretrain.max_steps == 5000
    assert (scratch.finetune.max_steps, scratch.finetune.precision, scratch.finetune_max_len) == (1500, "auto", 128)


def test_runs_of_either_precision_share_a_process():
    """accelerate keeps one state per process: a float32 run then a bf16 run (and back) must both train, and the
    bf16 run's forward must run in bf16."""
    from types import SimpleNamespace

    from model.training import TrainConfig, train

    class Probe(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin, self.dtypes = torch.nn.Linear(4, 1), []

        def forward(self, x, y):
            out = self.lin(x)
            self.dtypes.append(out.dtype)
            return SimpleNamespace(loss=torch.nn.functional.mse_loss(out.float().squeeze(-1), y))

    data = [{"x": torch.randn(4), "y": torch.tensor(1.0)} for _ in range(16)]

    def collate(ex):
        return {"x": torch.stack([e["x"] for e in ex]), "y": torch.stack([e["y"] for e in ex])}

    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16), ("auto", torch.float32)):
        model = Probe()
        before = model.lin.weight.detach().clone()
        run = train(model, data, collate, TrainConfig(max_steps=3, batch_size=4, lr=1e-2, device="cpu", save_every=0,
                                                     precision=precision), log=lambda _: None)
        assert run["steps"] == 3 and set(model.dtypes) == {dtype}
        assert not torch.equal(before, model.lin.weight.detach())
