"""QV-attention (SPEC §11, model/qv_attention.py) and its option on the benchmark runner/flow.

Data: the first rows of the real SA/DC/SPM sets in ``../shared/benchmarks`` (copied into a temporary root);
models: tiny BERT/PolicyBERT bodies the tests build over the chars of those rows."""
from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
FILES = {"sa": ["train.jsonl", "dev.jsonl", "test.jsonl"], "dc": ["dev.jsonl", "test.jsonl"],
         "spm": ["dev.jsonl", "test.jsonl"]}


def _head(path: Path, n: int) -> list[str]:
    with open(path, encoding="utf-8") as fh:
        return list(itertools.islice(fh, n))


@pytest.fixture(scope="module")
def bench_root(tmp_path_factory) -> Path:
    """The first 60 rows (DC: 300, to see several labels) of the real SA, DC and SPM files."""
    if not SHARED.is_dir():
        pytest.skip("../shared/benchmarks is not here")
    root = tmp_path_factory.mktemp("qvbench")
    for task, files in FILES.items():
        (root / task).mkdir()
        for f in files:
            (root / task / f).write_text("".join(_head(SHARED / task / f, 300 if task == "dc" else 60)),
                                         encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def tiny_body(tmp_path_factory, bench_root) -> Path:
    """A tiny random BERT checkpoint (hidden 32, 3 layers, 4 heads of 8) with a char vocab.txt over the rows."""
    from transformers import BertConfig, BertModel

    from model.features import build_char_vocab, save_char_tokenizer

    texts = [json.loads(line).get("text", "") for t in FILES for line in _head(bench_root / t / FILES[t][-1], 300)]
    vocab = build_char_vocab(texts + [json.loads(x)["text"] for x in _head(bench_root / "sa" / "train.jsonl", 60)])
    d = tmp_path_factory.mktemp("tinybody")
    save_char_tokenizer(vocab, d)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(d)
    return d


def _sentences(bench_root: Path, body: Path, n: int = 6, max_len: int = 40) -> dict[str, torch.Tensor]:
    """``[CLS] chars [SEP]`` of the first SA test reviews (different lengths, so the batch has padding)."""
    from model.features import CharEncoder

    enc = CharEncoder.from_dir(body)
    texts = [json.loads(x)["text"] for x in _head(bench_root / "sa" / "test.jsonl", n)]
    ids = [[enc.cls] + enc.ids(list(t)[: max_len - 2 - 3 * i]) + [enc.sep] for i, t in enumerate(texts)]
    width = max(map(len, ids))
    x = torch.tensor([i + [enc.pad] * (width - len(i)) for i in ids])
    return {"input_ids": x, "attention_mask": (x != enc.pad).long()}


def _body(path: Path, qv: int = 0, bias: float | None = 10.0, impl: str = "sdpa", init: str = "gate-bias"):
    from transformers import BertModel

    from model.qv_attention import apply_qv

    m = BertModel.from_pretrained(path, add_pooling_layer=False, attn_implementation=impl).eval()
    return apply_qv(m, qv, bias, init) if qv else m


@pytest.mark.parametrize("impl", ["sdpa", "eager"])
def test_body_is_intact_at_init_on_real_sentences(bench_root, tiny_body, impl):
    """At gate bias +10 the wrapped body differs from the plain one by at most 1e-3 (σ(−10) ≈ 4.5e-5 of
    Ô⊙W_V − V: small, not zero); at +200 (σ(−200) = 0 in fp32) it is bit-identical."""
    batch = _sentences(bench_root, tiny_body)
    mask = batch["attention_mask"].bool()
    with torch.no_grad():
        ref = _body(tiny_body, impl=impl)(**batch).last_hidden_state
        near = _body(tiny_body, 2, 10.0, impl)(**batch).last_hidden_state
        exact = _body(tiny_body, 2, 200.0, impl)(**batch).last_hidden_state
        rezero = _body(tiny_body, 3, None, impl, "rezero")
        rezero_out = rezero(**batch).last_hidden_state
    gap = (near - ref)[mask].abs().max().item()
    assert 0 < gap < 1e-3
    assert torch.equal(exact, ref)
    assert torch.equal(rezero_out, ref)  # ReZero: γ = 0, so g = V + 0 bit for bit, every QV layer
    att = rezero.encoder.layer[-1].attention.self
    assert att.qv_gate_bias.eq(0).all() and rezero.config.qv_init == "rezero" and rezero.config.qv_gate_bias == 0


def test_rezero_gamma_gets_gradient_at_step0_and_gamma_one_is_the_paper_layer(bench_root, tiny_body):
    """ReZero init: at step 0 the loss has a non-zero gradient on every head's γ (∂g/∂γ = s(1 − β)(Ô⊙W_V − V),
    β = ½), while the effective gate is exactly 1; with γ = 1 (γ̂ = 1/s) the layer is SPEC §11's formula."""
    from transformers import BertForSequenceClassification

    from model.qv_attention import DEFAULT_GAMMA_SCALE, apply_qv

    batch = _sentences(bench_root, tiny_body)
    m = apply_qv(BertForSequenceClassification.from_pretrained(tiny_body, num_labels=2), 1, init="rezero").train()
    att = m.bert.encoder.layer[-1].attention.self
    seen = []
    hook = att.register_forward_pre_hook(lambda mod, a, kw: seen.append(a[0].detach()), with_kwargs=True)
    m(**batch, labels=torch.tensor([0, 1, 0, 1, 1, 0])).loss.backward()
    hook.remove()
    assert att.qv_gamma.grad is not None and (att.qv_gamma.grad.abs() > 0).all()
    with torch.no_grad():
        assert torch.equal(att.gate(seen[0], effective=True), torch.ones(6, 4))
        assert torch.allclose(att.gate(seen[0]), torch.full((6, 4), 0.5))
        g = torch.Generator().manual_seed(1)
        for p in (att.qv_weight, att.qv_bias, att.qv_gate):
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        att.qv_gamma.fill_(1 / DEFAULT_GAMMA_SCALE)
        n = int(batch["attention_mask"][0].sum())
        got = att.eval()(seen[0][:1, :n])[0][0]
    assert torch.allclose(got, _spec_attention(att, seen[0][0, :n]), atol=1e-5)


def test_layer_computes_the_spec_formula_and_ignores_padding(bench_root, tiny_body):
    """With the gate half open and random new weights, the last layer's attention equals SPEC §11 written out
    per head; a sentence alone gives what it gives inside a padded batch."""
    from model.qv_attention import QVSelfAttention

    batch = _sentences(bench_root, tiny_body)
    m = _body(tiny_body, 1, 0.0)  # gate-bias init with bias 0: β = ½ at the start
    att = m.encoder.layer[-1].attention.self
    assert isinstance(att, QVSelfAttention)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in (att.qv_weight, att.qv_bias, att.qv_gate):
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
        seen = []
        hook = att.register_forward_pre_hook(lambda mod, a, kw: seen.append(a[0]), with_kwargs=True)
        n = int(batch["attention_mask"][0].sum())
        one = {k: v[:1, :n] for k, v in batch.items()}
        alone = m(**one).last_hidden_state
        in_batch = m(**batch).last_hidden_state[:1, :n]
        hook.remove()
        got = att(seen[0])[0][0]
    assert torch.allclose(alone, in_batch, atol=1e-5)
    assert torch.allclose(got, _spec_attention(att, seen[0][0]), atol=1e-5)


def _spec_attention(att, h: torch.Tensor) -> torch.Tensor:
    """SPEC §11 for one unpadded sequence ``h`` (L, hidden), head by head, no masking."""
    d = att.attention_head_size
    heads = []
    for i in range(att.num_attention_heads):
        sl = slice(i * d, (i + 1) * d)
        q, k, v = (p(h)[:, sl] for p in (att.query, att.key, att.value))
        o_hat = torch.softmax(v @ q.T / math.sqrt(d), -1) @ q
        w_v = v @ att.qv_weight[i].T + att.qv_bias[i]
        x = torch.cat([(o_hat * w_v)[0], v[0]])
        beta = torch.sigmoid(att.qv_gate[i] @ x + att.qv_gate_bias[i])
        g = (1 - beta) * (o_hat * w_v) + beta * v
        heads.append(torch.softmax(q @ k.T / math.sqrt(d), -1) @ g)
    return torch.cat(heads, -1)


def test_parameter_overhead_on_e5_small_shape():
    """e5-small (hidden 384, 12 heads of 32, 12 layers, 250,037 token rows), QV on the last layer: per head
    W 32x32 + b_v 32 + u 64 + b_u 1 = 1,121, so 13,452 new parameters: 0.0634 % of the body without its token
    embeddings, 0.0114 % with them. The rezero init adds γ per head: 13,464."""
    from transformers import BertConfig, BertModel

    from model.qv_attention import apply_qv, qv_parameter_count

    cfg = BertConfig(vocab_size=250037, hidden_size=384, num_hidden_layers=12, num_attention_heads=12,
                     intermediate_size=1536, max_position_embeddings=512, type_vocab_size=2)
    with torch.device("meta"):
        m = apply_qv(BertModel(cfg, add_pooling_layer=False), 1, init="gate-bias")
        rz = apply_qv(BertModel(cfg, add_pooling_layer=False), 1, init="rezero")
    assert qv_parameter_count(rz)["qv"] == 13452 + 12
    c = qv_parameter_count(m)
    assert c["qv"] == 12 * (32 * 32 + 32 + 64 + 1) == 13452
    assert c["token_embeddings"] == 250037 * 384
    assert c["pct_without_token_embeddings"] == pytest.approx(100 * 13452 / (c["total"] - 13452 - 250037 * 384))
    assert 0.06 < c["pct_without_token_embeddings"] < 0.07 and 0.010 < c["pct_all"] < 0.012


def test_gradients_reach_the_new_parameters_and_errors_are_clear(bench_root, tiny_body):
    from transformers import BertForSequenceClassification

    from model.qv_attention import apply_qv, qv_state

    batch = _sentences(bench_root, tiny_body)
    m = apply_qv(BertForSequenceClassification.from_pretrained(tiny_body, num_labels=2), 1, 2.0,
                 "gate-bias").train()
    m(**batch, labels=torch.tensor([0, 1, 0, 1, 1, 0])).loss.backward()
    params = dict(m.named_parameters())
    assert len(qv_state(m)) == 4
    for name in qv_state(m):
        grad = params[name].grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0, name
    with pytest.raises(ValueError, match="already has QV"):
        apply_qv(m, 1)
    with pytest.raises(ValueError, match="has 3 layers"):
        apply_qv(BertForSequenceClassification.from_pretrained(tiny_body), 4)
    with pytest.raises(TypeError, match="no encoder.layer"):
        apply_qv(torch.nn.Linear(2, 2), 1)
    with pytest.raises(ValueError, match="QV init 'zero'"):
        apply_qv(BertForSequenceClassification.from_pretrained(tiny_body), 1, init="zero")
    fresh = BertForSequenceClassification.from_pretrained(tiny_body)
    torch.manual_seed(5)
    apply_qv(fresh, 3)  # draws nothing from the caller's random stream (same dropout/head draws after it)
    after = torch.rand(3)
    torch.manual_seed(5)
    assert torch.equal(after, torch.rand(3))


def test_save_load_gives_identical_logits(bench_root, tiny_body, tmp_path):
    """A BERT and a PolicyBERT sequence model with QV (new weights, γ included, moved off their init) reload
    with ``qv_layers`` / ``qv_init`` from the config and bit-identical logits, under both inits; a config saved
    before ``qv_init`` existed loads as gate-bias."""
    from transformers import BertForSequenceClassification

    from model.configuration import PolicyBertConfig
    from model.modeling import PolicyBertForSequenceClassification
    from model.benchmark.runner import load_finetuned, save_finetuned
    from model.qv_attention import apply_qv, qv_state

    batch = _sentences(bench_root, tiny_body)
    pb = PolicyBertConfig(vocab_size=300, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                          intermediate_size=32, max_position_embeddings=64, num_word_layers=1, word_vocab_size=12,
                          max_words=4, fusion="gate", num_labels=3)
    torch.manual_seed(0)
    models = {"bert": BertForSequenceClassification.from_pretrained(tiny_body, num_labels=3),
              "policybert": PolicyBertForSequenceClassification(pb),
              "bert-gate-bias": BertForSequenceClassification.from_pretrained(tiny_body, num_labels=3)}
    for name, m in models.items():
        init = "gate-bias" if name.endswith("gate-bias") else "rezero"
        apply_qv(m, 1, 3.0, init).eval()
        with torch.no_grad():
            for p in qv_state(m).values():
                p.add_(0.1)
        inputs = dict(batch, input_ids=batch["input_ids"] % 300) if name == "policybert" else batch
        with torch.no_grad():
            before = m(**inputs).logits
        save_finetuned(m, tmp_path / name, tiny_body)
        back = load_finetuned(tmp_path / name)
        assert back.config.qv_layers == 1 and back.config.qv_gate_bias == 3.0 and back.config.qv_init == init
        assert (tmp_path / name / "vocab.txt").is_file()
        with torch.no_grad():
            assert torch.equal(back(**inputs).logits, before), name
    cfg = json.loads((tmp_path / "bert" / "config.json").read_text(encoding="utf-8"))
    assert cfg["qv_layers"] == 1 and cfg["qv_init"] == "rezero" and cfg["qv_gamma_scale"] == 100.0
    old = tmp_path / "bert-gate-bias" / "config.json"
    cfg = json.loads(old.read_text(encoding="utf-8"))
    del cfg["qv_init"], cfg["qv_gamma_scale"]
    old.write_text(json.dumps(cfg), encoding="utf-8")
    assert load_finetuned(tmp_path / "bert-gate-bias").config.qv_init == "gate-bias"


def test_runner_option_on_sequence_tasks_only(bench_root, tiny_body, tmp_path):
    """``qv_layers`` in the budget: a tiny SA fine-tuning records it, saves a checkpoint that reloads with it;
    a token task refuses it; the flow's rows and the QV-vs-base comparison."""
    import dataclasses

    import pandas as pd

    from flows.benchmark import model_rows, qv_versus_base
    from model.benchmark.data import load_task
    from model.benchmark.runner import BUDGETS, build_model, finetune_task, load_finetuned
    from model.features import WordMatcher
    from model.qv_attention import QVSelfAttention

    b = dataclasses.replace(BUDGETS["tiny"], qv_layers=1)
    r = finetune_task(load_task("sa", bench_root), tiny_body, "plain", b, 0, WordMatcher([]), log=lambda m: None,
                      save_dir=tmp_path / "sa")
    assert r["budget"]["qv_layers"] == 1 and r["steps"] == 3 and "QV-attention on the last 1" in b.describe()
    assert r["budget"]["qv_init"] == "rezero" and "rezero init, gamma lr x100" in b.describe()
    assert "gamma lr x10," in dataclasses.replace(b, qv_gamma_scale=10.0).describe()
    back = load_finetuned(tmp_path / "sa")
    assert back.config.qv_init == "rezero" and back.bert.encoder.layer[-1].attention.self.qv_gamma is not None
    assert isinstance(back.bert.encoder.layer[-1].attention.self, QVSelfAttention)
    assert not isinstance(back.bert.encoder.layer[0].attention.self, QVSelfAttention)
    token = dataclasses.replace(load_task("sa", bench_root), task=dataclasses.replace(
        load_task("sa", bench_root).task, kind="token", name="cws"))
    with pytest.raises(ValueError, match="sequence tasks"):
        build_model(tiny_body, "plain", token, b, None, WordMatcher([]))
    rows = model_rows(["plain", "gate"], BUDGETS["tiny"], "seq", 2, 10.0, "gate-bias")
    assert [lab for _, _, lab in rows] == ["plain", "gate", "plain+qv2", "gate+qv2"]
    assert rows[2][1].qv_init == "gate-bias" and "gate bias 10" in rows[2][1].describe()
    assert rows[2][1].qv_layers == 2 and model_rows(["plain"], BUDGETS["tiny"], "token", 2, 10.0)[-1][2] == "plain"
    df = pd.DataFrame([{"task": "sa", "metric": "accuracy", "model": m, "value": v}
                       for m, vs in {"plain": [0.70, 0.72, 0.71], "plain+qv2": [0.80, 0.81, 0.79]}.items()
                       for v in vs])
    table = qv_versus_base(df, [{"task": "sa", "metric": "accuracy", "model": "plain+qv2", "seeds": "-"}])
    assert table[0]["vs plain"].startswith("+0.0900") and table[0]["> 2 std"] == "yes" and table[0]["seeds"] == 3


@pytest.mark.slow
def test_flow_runs_qv_rows_beside_plain(prefect_harness, bench_root, tiny_body, tmp_path):
    """``benchmark_flow(..., qv_layers=1)`` on SA: rows plain and plain+qv1 with 2 seeds each, the QV row
    compared with plain in the table, and its budget line naming the QV setting."""
    import pandas as pd

    from flows.benchmark import benchmark_flow

    table = benchmark_flow(["sa"], str(tiny_body), [], seeds=2, budget="tiny", out=str(tmp_path),
                           data=str(bench_root), qv_layers=1)
    df = pd.read_parquet(tmp_path / "benchmark.parquet")
    acc = df[(df.metric == "accuracy") & df.model.isin(["plain", "plain+qv1"])]
    assert sorted(acc.model.value_counts().items()) == [("plain", 2), ("plain+qv1", 2)]
    assert all("QV-attention on the last 1" in b for b in acc[acc.model == "plain+qv1"].budget)
    qv = [r for r in table if r["model"] == "plain+qv1"]
    assert len(qv) == 1 and qv[0]["vs plain"].endswith("(vs plain)") and qv[0]["> 2 std"] in ("yes", "no")
