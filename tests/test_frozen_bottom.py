"""A frozen, precomputed bottom for the public benchmarks (model.benchmark.frozen) and PolicyBERT's
``fusion_start`` (words fused into the upper char layers only).

Data: the first rows of the real SA, NER and SPM files in ``../shared/benchmarks``; models: a tiny random BERT
checkpoint over their chars, and PolicyBERT built on it, as the benchmark runner builds them."""
from __future__ import annotations

import gzip
import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from model.benchmark.data import cap, load_task

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
FILES = {"sa": ["train.jsonl", "dev.jsonl", "test.jsonl"], "ner": ["train.jsonl.gz", "test.jsonl"],
         "spm": ["dev.jsonl", "test.jsonl"]}


def _head(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return list(itertools.islice(fh, n))


@pytest.fixture(scope="module")
def bench_root(tmp_path_factory) -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared/benchmarks is not here")
    root = tmp_path_factory.mktemp("frozenbench")
    for task, files in FILES.items():
        (root / task).mkdir()
        for f in files:
            lines = _head(SHARED / task / f, 60)
            if f.endswith(".gz"):
                with gzip.open(root / task / f, "wt", encoding="utf-8") as fh:
                    fh.writelines(lines)
            else:
                (root / task / f).write_text("".join(lines), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def body(tmp_path_factory, bench_root) -> Path:
    """A tiny random BERT (hidden 32, 3 layers) with a char vocab.txt over the rows' chars."""
    from transformers import BertConfig, BertModel

    from model.features import build_char_vocab, save_char_tokenizer

    texts = [line for t, fs in FILES.items() for f in fs for line in _head(bench_root / t / f, 60)]
    d = tmp_path_factory.mktemp("frozenbody")
    vocab = build_char_vocab(texts)
    save_char_tokenizer(vocab, d)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(d)
    return d


def _setup(bench_root, body, task, variant, frozen=1):
    """(model, examples, collate_fn, pad) as the runner builds them, the word side made to matter."""
    from model.benchmark.inputs import Collator, encode_split, word_matcher
    from model.benchmark.runner import BUDGETS, build_model, char_encoder

    budget = replace(BUDGETS["tiny"], frozen_layers=frozen)
    splits = cap(load_task(task, bench_root), 24, 16)
    matcher, _ = word_matcher(splits)
    enc = char_encoder(body)
    torch.manual_seed(0)
    model = build_model(body, variant, splits, budget, enc, matcher).eval()
    words = variant != "plain"
    if words:
        for s in model.bert.encoder.fusion_scale:
            torch.nn.init.normal_(s.weight, std=0.5)
    fn = Collator(words, getattr(model.config, "max_words", 1) if words else 1, enc.pad)
    ex = encode_split(splits.train, splits, enc, matcher, budget.max_len, budget.max_words, 0)
    return model, ex, fn, enc.pad


def _logits(model, batch):
    with torch.no_grad():
        out = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    return out[batch["attention_mask"].bool()] if out.dim() == 3 else out  # token tasks: real positions


@pytest.mark.parametrize("task,variant", [("sa", "plain"), ("sa", "gate"), ("ner", "plain"), ("ner", "gate"),
                                          ("spm", "gate")])
def test_cached_bottom_gives_the_whole_models_logits(bench_root, body, task, variant):
    from model.benchmark.frozen import cached_bottom

    model, ex, fn, pad = _setup(bench_root, body, task, variant)
    batch = fn(ex[:12])
    assert batch["attention_mask"].sum(1).min() < batch["attention_mask"].shape[1]  # padded rows in the batch
    whole = _logits(model, batch)
    n_whole = sum(p.numel() for p in model.parameters())
    with cached_bottom(model, 1, [ex], fn, pad, batch_size=5) as m:
        inside = _logits(m, batch)
        names = [n for n, _ in m.named_parameters()]
        assert len(m.base_model.encoder.layer) == 2
        assert not any(".embeddings." in n for n in names)  # the bottom is out of the optimiser's reach
        assert sum(p.numel() for p in m.parameters()) < n_whole
        if variant == "gate":
            assert any("word_layers" in n for n in names) and any("fusion_scale" in n for n in names)
    assert (whole - inside).abs().max() <= 1e-5
    assert len(model.base_model.encoder.layer) == 3
    assert torch.equal(_logits(model, batch), whole)  # whole again on exit


def test_cached_bottom_errors_name_the_problem(bench_root, body):
    from model.benchmark.frozen import CachedStates, cached_bottom

    model, ex, fn, pad = _setup(bench_root, body, "sa", "gate")
    for k in (0, 3):
        with pytest.raises(ValueError, match="frozen layers"):
            with cached_bottom(model, k, [ex], fn, pad):
                pass
    with pytest.raises(ValueError, match="inside the frozen bottom"):
        with cached_bottom(model, 2, [ex], fn, pad):  # built with fusion_start = 1
            pass
    with cached_bottom(model, 1, [ex[:4]], fn, pad) as m:
        assert isinstance(m.base_model.embeddings, CachedStates)
        with pytest.raises(KeyError, match="not precomputed"):
            _logits(m, fn(ex[4:8]))


def test_frozen_finetune_trains_only_above_the_bottom_and_reloads(bench_root, body, tmp_path):
    from model.benchmark.inputs import word_matcher
    from model.benchmark.runner import BUDGETS, build_model, char_encoder, finetune_task, load_finetuned

    budget = replace(BUDGETS["tiny"], frozen_layers=1, lr=1e-2)
    splits = load_task("sa", bench_root)
    matcher, _ = word_matcher(splits)
    for variant in ("plain", "gate"):
        r = finetune_task(splits, body, variant, budget, 0, matcher, log=lambda m: None,
                          save_dir=tmp_path / variant)
        assert r["steps"] == 3 and "bottom 1 char layers frozen" in budget.describe()
        torch.manual_seed(0)
        start = build_model(body, variant, cap(splits, 24, 16), budget, char_encoder(body), matcher).state_dict()
        tuned = load_finetuned(tmp_path / variant)
        after = tuned.state_dict()
        bottom = [k for k in start if ".embeddings." in k or ".encoder.layer.0." in k]
        top = [k for k in start if ".encoder.layer.1." in k or ".encoder.layer.2." in k]
        assert bottom and all(torch.equal(start[k], after[k]) for k in bottom)
        assert any(not torch.equal(start[k], after[k]) for k in top)
        if variant == "gate":
            assert tuned.config.fusion_start == 1 and tuned.config.num_word_layers == 1


def _tiny_policybert(fusion_start: int):
    from model.configuration import PolicyBertConfig
    from model.modeling import PolicyBertModel

    torch.manual_seed(0)
    cfg = PolicyBertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                           intermediate_size=32, max_position_embeddings=32, num_word_layers=1, word_vocab_size=12,
                           max_words=4, fusion="gate", fusion_init="identity", fusion_start=fusion_start)
    m = PolicyBertModel(cfg).eval()
    for s in m.encoder.fusion_scale:
        torch.nn.init.normal_(s.weight, std=0.5)
    return m


def test_fusion_start_keeps_words_out_of_the_bottom_layers():
    from model.configuration import PolicyBertConfig

    ids = torch.randint(5, 40, (2, 9), generator=torch.Generator().manual_seed(0))
    mm = torch.zeros(2, 4, 9)
    mm[0, 0, 1:3] = mm[1, 1, 4:7] = 1
    seen: dict[str, torch.Tensor] = {}
    for start, n_scales in ((0, 3), (1, 2)):
        m = _tiny_policybert(start)
        assert len(m.encoder.fusion_scale) == n_scales  # one per fused char layer
        m.encoder.layer[1].register_forward_pre_hook(lambda mod, args: seen.__setitem__("in1", args[0].clone()))
        outs, ins = [], []
        for words in ([[3, 0, 0, 0], [0, 7, 0, 0]], [[5, 0, 0, 0], [0, 9, 0, 0]]):
            with torch.no_grad():
                outs.append(m(input_ids=ids, word_ids=torch.tensor(words), matching_matrix=mm).last_hidden_state)
            ins.append(seen["in1"])
        assert not torch.allclose(outs[0], outs[1])  # the words matter at the output either way
        assert torch.equal(ins[0], ins[1]) == (start == 1)  # ... and reach layer 1's input only from the bottom
    with pytest.raises(ValueError, match="fusion_start=3"):
        PolicyBertConfig(num_hidden_layers=3, num_word_layers=1, fusion_start=3)
