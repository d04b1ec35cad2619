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
from tests.conftest import REPO


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
    names) and bert.encoder.word_layers.*, config.json with num_hidden_word_layers, and ngram.txt in
    ZEN's own format: one ``ngram,freq`` line per n-gram and no ``[pad]`` line, since ZEN's
    ``ZenNgramDict`` (ZEN/ngram_utils.py) seeds ``{"[pad]": 0}`` itself and gives line i the id i + 1,
    the row of word_embeddings.word_embeddings.weight (len(words) + 1 rows, row 0 = padding)."""
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
    (d / "ngram.txt").write_text("".join(f"{w},{1000 - 10 * i}\n" for i, w in enumerate(words)), encoding="utf-8")
    return d, sd


def test_init_from_bge_and_zen_backbones(tmp_path):
    bge, bert = _bge_like(tmp_path)
    zen_words = ["数据", "要素", "市场"]
    zen, zsd = _zen_like(tmp_path, zen_words)
    assert not (zen / "ngram.txt").read_text(encoding="utf-8").startswith("[pad]")
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
    ours_emb = sd["bert.word_embeddings.word_embeddings.weight"]
    # ZEN's id for the word on 0-based line i of ngram.txt is i + 1 (row 0 is ZEN's [pad])
    for our_id, w in ((1, "要素"), (3, "数据")):
        zen_row = zen_words.index(w) + 1
        assert torch.equal(ours_emb[our_id], zen_emb[zen_row]), (w, zen_row)
        assert not torch.equal(ours_emb[our_id], zen_emb[zen_row - 1]), w  # the old off-by-one row
    assert torch.equal(ours_emb[1], zen_emb[2]) and torch.equal(ours_emb[3], zen_emb[1])  # 要素 = 2, 数据 = 1
    assert not any(torch.equal(ours_emb[2], zen_emb[r]) for r in range(zen_emb.shape[0]))  # 制度 stays fresh
    assert rep["word_rows_from_zen"] == 2
    assert any(n.startswith("bert.encoder.fusion.0.gate") for n in rep["new"])
    assert not any(n.startswith(("bert.encoder.layer.", "bert.embeddings.")) for n in rep["new"])
    assert "cls.predictions.decoder.weight" not in rep["new"]  # tied to the loaded char embeddings
    assert torch.equal(model.cls.predictions.decoder.weight, bert.embeddings.word_embeddings.weight)
    assert torch.all(model.bert.encoder.fusion[0].gate.bias == 5.0)  # new fusion keeps its open gate


def test_zen_ngram_ids_follow_zen_reader(tmp_path):
    """ZEN's ZenNgramDict numbers ngram.txt by line (id = line index + 1, 0 = [pad]): a line that is not
    ``ngram,freq`` (blank, or a bare ``[pad]``) is skipped but keeps its id, a repeated n-gram keeps
    its last id; init_from_backbones copies exactly those rows."""
    from model.backbones import read_zen_ngram_ids

    zen, zsd = _zen_like(tmp_path, ["数据", "要素", "市场", "制度", "规则", "平台"])
    (zen / "ngram.txt").write_text("数据,90\n\n要素,80\n[pad]\n市场,70\n数据,60\n", encoding="utf-8")
    ids, malformed = read_zen_ngram_ids(zen / "ngram.txt")
    assert ids == {"数据": 6, "要素": 3, "市场": 5} and malformed == 2
    ours = ["市场", "数据", "要素", "[pad]"]
    cfg = PolicyBertConfig(vocab_size=70, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=64, num_word_layers=1,
                           word_vocab_size=len(ours) + 1)
    model = PolicyBertForPreTraining(cfg)
    rep = init_from_backbones(model, None, str(zen), ours)
    zen_emb = zsd["bert.word_embeddings.word_embeddings.weight"]
    ours_emb = model.state_dict()["bert.word_embeddings.word_embeddings.weight"]
    for our_id, zen_row in ((1, 5), (2, 6), (3, 3)):
        assert torch.equal(ours_emb[our_id], zen_emb[zen_row]), (our_id, zen_row)
    assert not torch.equal(ours_emb[4], zen_emb[0])  # ZEN's [pad] row 0 is never copied
    assert rep["word_rows_from_zen"] == 3
    assert any("ngram.txt 2 line(s)" in r for r in rep["skipped"])


def test_backbone_errors(tmp_path):
    with pytest.raises(BackboneError, match="no model.safetensors"):
        load_state_dict(tmp_path)


def _dev_accuracy(data):
    from model.training import evaluate_classifier

    fn = lambda ex: collate(ex, 4)  # noqa: E731
    return lambda m: evaluate_classifier(m, data, fn, TrainConfig(device="cpu"))


def test_finetuning_is_one_run_over_its_epochs_and_keeps_the_best_by_dev():
    """One AdamW and one warmup + decay over all 3 epochs (the lr never jumps back up at an epoch
    boundary), dev evaluated at each epoch end, and the model ends on the best-by-dev weights."""
    import re

    data, dev = _examples(48, seed=1), _examples(40, seed=2)
    cfg = TrainConfig(epochs=3, batch_size=8, lr=3e-3, warmup_ratio=0.2, log_every=1, save_every=0, seed=3)
    lines = []
    model = _model()
    run = train(model, data, lambda ex: collate(ex, 4), cfg, log=lines.append, evaluate=_dev_accuracy(dev),
                best_metric="accuracy")
    lrs = [float(m) for m in re.findall(r"lr ([\d.e+-]+)", "\n".join(lines))]  # after each step: 3 warmup steps
    assert run["steps"] == 18 and len(lrs) == 18
    peak = lrs.index(max(lrs))
    assert peak == 2 and all(a >= b for a, b in zip(lrs[peak:], lrs[peak + 1:])) and lrs[-1] == 0.0
    assert [p["step"] for p in run["curve"]] == [6, 12, 18]
    best = max(run["curve"], key=lambda p: p["accuracy"])
    assert run["best"]["step"] == best["step"]
    assert _dev_accuracy(dev)(model)["accuracy"] == best["accuracy"]  # the kept weights are the best ones


def test_a_tampered_training_state_is_refused(tmp_path):
    """The training state loads with weights_only=True: a pickle that runs code raises instead."""
    import pickle

    cfg = TrainConfig(epochs=1, batch_size=8, save_every=2, log_every=100)
    fn = lambda ex: collate(ex, 4)  # noqa: E731
    train(_model(), _examples(), fn, cfg, log=lambda s: None, state_dir=tmp_path)
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    torch.save({"model": Payload()}, tmp_path / "trainer_state" / "state.pt")
    with pytest.raises(pickle.UnpicklingError):
        train(_model(), _examples(), fn, cfg, log=lambda s: None, state_dir=tmp_path)
    assert not marker.exists()


def test_rank_batches_split_an_epoch_evenly():
    from model.training import rank_batches, steps_per_epoch

    cfg = TrainConfig(batch_size=8, grad_accum=2, seed=1)
    parts = [rank_batches(100, cfg, epoch=0, rank=r, nproc=3) for r in range(3)]
    assert {len(p) for p in parts} == {4}  # 13 batches -> 4 per rank, the 13th dropped
    seen = np.concatenate([b for p in parts for b in p])
    assert len(seen) == len(set(seen.tolist()))  # no example on two ranks
    assert steps_per_epoch(100, cfg, nproc=3) == 2 and steps_per_epoch(100, cfg, nproc=1) == 7
    few = [rank_batches(10, cfg, epoch=0, rank=r, nproc=3) for r in range(3)]  # 2 batches for 3 ranks
    assert [len(p) for p in few] == [1, 1, 1] and steps_per_epoch(10, cfg, nproc=3) == 1


def test_under_two_processes_only_the_main_one_evaluates_and_saves(tmp_path):
    """torchrun with 2 CPU processes (gloo): both train, rank 0 alone evaluates and writes the state."""
    import subprocess
    import sys

    script = tmp_path / "ddp.py"
    script.write_text(f"""
import json, os, sys
sys.path[:0] = [{str(REPO)!r}, {str(REPO / 'tests')!r}]
from test_training import _examples, _model
from model.features import collate
from model.training import TrainConfig, train
from tests.conftest import REPO
rank = int(os.environ["RANK"])
calls = []
cfg = TrainConfig(epochs=2, batch_size=4, save_every=1, log_every=100, device="cpu")
run = train(_model(), _examples(), lambda ex: collate(ex, 4), cfg, log=lambda s: None,
            state_dir={str(tmp_path / 'state')!r}, evaluate=lambda m: calls.append(1) or {{"accuracy": 0.5}},
            on_step=lambda s, t: open({str(tmp_path)!r} + f"/steps{{rank}}", "a").write(f"{{s}}\\n"))
json.dump({{"evals": len(calls), "steps": run["steps"], "processes": run["processes"]}},
          open({str(tmp_path)!r} + f"/rank{{rank}}.json", "w"))
""")
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(script)],
                         capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["processes"] == r1["processes"] == 2
    assert r0["steps"] == r1["steps"] == 10  # 40 examples / 4 = 10 batches -> 5 per rank per epoch, 2 epochs
    assert r0["evals"] == 2 and r1["evals"] == 0  # epoch 1 end + the last step, on rank 0 only
    assert json.loads((tmp_path / "state" / "trainer_state" / "position.json").read_text())["step"] == 10


@pytest.mark.slow  # two pretraining runs and a resume (~20 s on 2 cores)
def test_pretraining_on_a_streamed_table_resumes_exactly(tmp_path):
    """Pretraining reads its epochs through ShardedExamples (a few shards held, shard-window order per
    (seed, epoch)); killed mid-epoch and resumed from the saved position (with 2 DataLoader worker
    processes reading the shards), it ends on the same weights as a straight run in one process."""
    from model.features import CharEncoder, WordMatcher, build_char_vocab
    from model.pretrain_data import PretrainDataConfig, ShardedExamples, write_pretrain_epochs
    from model.stages import batch_collator
    from storage import write_table
    from tests.test_pretrain_data import WORDS, _corpus

    sents, segs = _corpus(9, 7, seed=4)
    write_table(sents, tmp_path / "sentences", name="sentences", rows_per_shard=10)
    write_table(segs, tmp_path / "segments", name="segments", rows_per_shard=10)
    enc = CharEncoder({t: i for i, t in enumerate(build_char_vocab(sents["text"]))})
    matcher = WordMatcher(WORDS)
    split_of = {f"d{d}": "train" if d < 7 else "dev" for d in range(9)}
    root = tmp_path / "pretrain"
    root.mkdir()
    write_pretrain_epochs(tmp_path / "sentences", tmp_path / "segments", split_of, enc, matcher,
                          PretrainDataConfig(max_len=40, group_docs=3, rows_per_shard=8), 2, root)
    opened: list[ShardedExamples] = []

    def epochs(e):
        opened.append(ShardedExamples(root / f"epoch={e % 2}", splits=("train",), cache_shards=2))
        return opened[-1]

    def model():
        torch.manual_seed(0)
        return PolicyBertForPreTraining(PolicyBertConfig(
            vocab_size=enc.size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=48, num_word_layers=1, word_vocab_size=matcher.size, max_words=8))

    cfg = TrainConfig(epochs=3, batch_size=8, lr=1e-3, save_every=2, log_every=100, seed=5, device="cpu")
    fn = batch_collator(model().config, enc.pad)
    straight = model()
    r0 = train(straight, epochs, fn, cfg, log=lambda s: None)
    assert len(opened[0]) == 42 and len(opened[0].shards) == 6 and r0["steps"] == 18  # 3 x ceil(42 / 8)
    assert all(len(v._cache) <= 2 for v in opened) and opened[-1].loads == 6  # one pass: each shard read once

    def kill_at_7(step, total):
        if step == 7:
            raise Kill()

    workers = TrainConfig(**{**cfg.__dict__, "num_workers": 2})  # the view pickled into DataLoader workers
    with pytest.raises(Kill):
        train(model(), epochs, fn, workers, log=lambda s: None, state_dir=tmp_path / "state", on_step=kill_at_7)
    resumed = model()
    r1 = train(resumed, epochs, fn, workers, log=lambda s: None, state_dir=tmp_path / "state")
    assert r1["resumed_from"] == 6 and r1["steps"] == 18
    for (n, a), (_, b) in zip(straight.state_dict().items(), resumed.state_dict().items()):
        assert torch.allclose(a, b, atol=1e-6), n


def test_finetuning_reads_its_splits_shard_by_shard_as_the_seeded_sample(tmp_path):
    """:func:`model.stages.read_split` draws the rows ``DataFrame.sample`` draws (same rows, order, labels)
    while reading one shard at a time, so capped fine-tuning data is the same as from a whole-table read."""
    import pandas as pd

    from model.stages import read_split, split_rows
    from storage import read_table, write_table

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"text_a": [f"a{i}" for i in range(600)], "text_b": [f"b{i}" for i in range(600)],
                       "label": rng.integers(0, 2, 600), "split": rng.choice(["train", "dev", "test"], 600)})
    write_table(df, tmp_path / "t", name="policysm1", partition_by="split", rows_per_shard=50)
    full = read_table(tmp_path / "t", partition={"split": "train"})
    assert split_rows(tmp_path / "t", "train") == len(full) == int((df.split == "train").sum())
    for k in (3, 77, len(full) - 1):
        got, want = read_split(tmp_path / "t", "train", k, 13), full.sample(k, random_state=13)
        assert got.equals(want) and list(got.index) == list(want.index)
    assert read_split(tmp_path / "t", "dev", 10_000, 13).equals(read_table(tmp_path / "t", partition={"split": "dev"}))


def test_pretraining_config_carries_word_add_above_from_the_profile(tmp_path):
    """The profile's ``model.word_add_above`` reaches PolicyBERT's config on both paths (from a char backbone
    and from scratch); the plain BERT row takes no word settings."""
    from model.stages import PLAIN_BERT, _pretraining_config

    bge, _ = _bge_like(tmp_path)
    kw = {"fusion": "gate", "num_word_layers": 1, "max_words": 8, "word_add_above": False}
    assert _pretraining_config(kw, 70, 4, str(bge), None).word_add_above is False
    assert _pretraining_config({**kw, "word_add_above": True}, 70, 4, str(bge), None).word_add_above is True
    scratch = {**kw, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}
    assert _pretraining_config(scratch, 70, 4, None, None).word_add_above is False
    plain = _pretraining_config({**scratch, "fusion": PLAIN_BERT}, 70, 4, None, None)
    assert plain.model_type == "bert" and not hasattr(plain, "word_add_above")


def test_lr_scales_train_the_named_parameters_faster_and_are_checked():
    from model.training import _optimizer, parse_lr_scales

    cfg = TrainConfig(lr=1e-3, lr_scales="classifier=20")
    model = _model()
    names = {n: p for n, p in model.named_parameters()}
    opt = _optimizer(model, cfg)
    lrs = {id(p): (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}
    assert lrs[id(names["classifier.weight"])] == (pytest.approx(0.02), 0.01)
    assert lrs[id(names["classifier.bias"])] == (pytest.approx(0.02), 0.0)
    assert {lrs[id(p)][0] for n, p in names.items() if not n.startswith("classifier")} == {1e-3}
    assert len(lrs) == len(names)  # every trainable parameter in exactly one group
    # the default is the two groups of before: decay, then no decay, at lr
    plain = _optimizer(_model(), TrainConfig(lr=1e-3))
    assert [(g["lr"], g["weight_decay"]) for g in plain.param_groups] == [(1e-3, 0.01), (1e-3, 0.0)]
    # a step of training moves the scaled head further than the unscaled one would
    fn = lambda ex: collate(ex, 4)  # noqa: E731
    moved = {}
    for spec in ("", "classifier=20"):
        m = _model()
        before = m.classifier.weight.detach().clone()
        train(m, _examples(16), fn, TrainConfig(max_steps=1, batch_size=16, lr=1e-3, warmup_ratio=0, save_every=0,
                                                 lr_scales=spec), log=lambda s: None)
        moved[spec] = (m.classifier.weight.detach() - before).abs().max().item()
    assert moved["classifier=20"] > 5 * moved[""]
    assert parse_lr_scales(" classifier=20 , bert.pooler=0.5") == [("classifier", 20.0), ("bert.pooler", 0.5)]
    for bad in ("classifier", "classifier=0", "=3", "classifier=x"):
        with pytest.raises(ValueError, match="lr_scales"):
            TrainConfig(lr_scales=bad)
    with pytest.raises(ValueError, match="no trainable parameter"):
        _optimizer(_model(), TrainConfig(lr_scales="heads=5"))


def test_length_grouped_batches_cover_the_epoch_with_little_padding():
    """transformers' group_by_length sampler, batches shuffled: every example once, similar lengths per batch,
    the one short batch last, deterministic per seed and epoch."""
    from model.training import epoch_order, length_grouped_order, rank_batches

    lengths = np.random.default_rng(0).integers(5, 64, 1000)
    order = length_grouped_order(lengths, 32, np.random.default_rng(1))
    assert sorted(order.tolist()) == list(range(1000))
    padded = lambda o: sum(int(lengths[o[i:i + 32]].max()) * len(o[i:i + 32]) for i in range(0, 1000, 32))  # noqa
    assert padded(order) < 1.1 * lengths.sum() < padded(np.random.default_rng(1).permutation(1000))
    assert len(order[31 * 32:]) == 1000 - 31 * 32  # the short batch is the last slice
    data = _examples(100, seed=4)
    cfg = TrainConfig(batch_size=8, seed=2, group_by_length=True)
    a, b = epoch_order(data, cfg, 0), epoch_order(data, cfg, 0)
    assert np.array_equal(a, b) and not np.array_equal(a, epoch_order(data, cfg, 1))
    assert epoch_order(data, TrainConfig(batch_size=8), 0) is None  # off: a plain shuffle as before
    spread = [np.ptp([len(data[i]["input_ids"]) for i in bt]) for bt in rank_batches(100, cfg, 0, order=a)[:-1]]
    assert max(spread) <= 1  # lengths 8..15 over 100 examples: each full batch is one or two lengths


def test_frozen_parameters_stay_out_of_kept_and_saved_states_and_a_resume_is_exact(tmp_path):
    """A frozen parameter never changes, so neither the best-by-dev copy nor the training state holds it;
    a killed run with frozen parameters and length-grouped batches resumes to the uninterrupted weights."""
    from model.training import load_trainable_state, trainable_state

    frozen = "bert.embeddings.word_embeddings"
    cfg = TrainConfig(epochs=2, batch_size=8, lr=1e-3, save_every=2, log_every=100, seed=5, freeze=frozen,
                      group_by_length=True)
    fn = lambda ex: collate(ex, 4)  # noqa: E731
    whole = _model()
    train(whole, _examples(), fn, cfg, log=lambda s: None)

    class KillAt(Exception):
        pass

    from model.training import Callback

    class Stop(Callback):
        def on_step(self, loop):
            if loop.state.step == 5:
                raise KillAt

    with pytest.raises(KillAt):
        train(_model(), _examples(), fn, cfg, log=lambda s: None, state_dir=tmp_path, callbacks=[Stop()])
    blob = torch.load(tmp_path / "trainer_state" / "state.pt", weights_only=True)
    assert f"{frozen}.weight" not in blob["model"] and "classifier.weight" in blob["model"]
    resumed = _model()
    train(resumed, _examples(), fn, cfg, log=lambda s: None, state_dir=tmp_path)
    for (n, p), q in zip(whole.named_parameters(), resumed.parameters()):
        assert torch.allclose(p, q, atol=1e-6), n
    kept = trainable_state(resumed, copy=True)
    assert f"{frozen}.weight" not in kept
    with pytest.raises(RuntimeError, match="missing"):  # trainable in a fresh model: the state lacks it
        load_trainable_state(_model(), kept)
    same = _model()
    same.bert.embeddings.word_embeddings.weight.requires_grad_(False)
    load_trainable_state(same, kept)
    assert torch.equal(same.classifier.weight, resumed.classifier.weight)


def test_warmup_steps_set_the_warmup_and_are_checked():
    """warmup_steps (the cross-encoder's setting) overrides warmup_ratio: lr rises over those steps, then decays
    linearly to 0 at the last step."""
    import re

    lines = []
    cfg = TrainConfig(max_steps=6, batch_size=8, lr=3e-3, warmup_ratio=0.5, warmup_steps=2, log_every=1, save_every=0)
    train(_model(), _examples(48), lambda ex: collate(ex, 4), cfg, log=lines.append)
    lrs = [float(m) for m in re.findall(r"lr ([\d.e+-]+)", "\n".join(lines))]  # the lr of the next step
    assert lrs == pytest.approx([1.5e-3, 3e-3, 2.25e-3, 1.5e-3, 7.5e-4, 0.0])
    for bad in (-1, 1.5):
        with pytest.raises(ValueError, match="warmup_steps"):
            TrainConfig(warmup_steps=bad)


def test_a_time_budget_and_early_stopping_end_a_run_on_its_best_point():
    """TimeBudget ends the run after the step that spends it (a last evaluation still runs); EarlyStopping after
    `patience` evaluations without a new best, the weights of the best point kept; best_metric ranks by several
    metrics in order (a leading '-': lower is better)."""
    from model.training import EarlyStopping, TimeBudget, best_key

    fn = lambda ex: collate(ex, 4)  # noqa: E731
    cfg = TrainConfig(epochs=5, batch_size=8, lr=1e-3, log_every=1, save_every=0, eval_every=1)
    dev = _dev_accuracy(_examples(40, seed=2))
    run = train(_model(), _examples(), fn, cfg, log=lambda s: None, evaluate=dev, callbacks=[TimeBudget(1e-9)])
    assert run["steps"] == 1 and [p["step"] for p in run["curve"]] == [1]
    ticks = iter(range(100))
    model = _model()
    run = train(model, _examples(), fn, cfg, log=lambda s: None, best_metric="tie,-tick",
                evaluate=lambda m: {"tie": 1.0, "tick": 3 - abs(next(ticks) - 3), **dev(m)},
                callbacks=[EarlyStopping(patience=2)])  # tick 0 1 2 3 2 1: the lowest is step 1's
    assert [p["step"] for p in run["curve"]] == [1, 2, 3] and run["best"]["step"] == 1 and run["steps"] == 3
    assert dev(model)["accuracy"] == run["curve"][0]["accuracy"]  # the run ends on step 1's weights
    assert best_key({"a": 0.5, "b": 2.0}, "a,-b") == (0.5, -2.0)
    with pytest.raises(ValueError, match="max_seconds"):
        TimeBudget(0)
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(patience=0)


def test_heap_trim_runs_every_n_steps_and_keeps_the_weights(monkeypatch):
    """TrainConfig.trim_every: the heap is trimmed after every n-th optimiser step, and a trimmed run ends on the
    same weights as an untrimmed one (trimming frees only what is already free)."""
    import storage.memory

    steps = []
    real = storage.memory.trim_heap
    monkeypatch.setattr(storage.memory, "trim_heap", lambda: steps.append(1) or real())
    fn = lambda ex: collate(ex, 4)  # noqa: E731
    runs = []
    for every in (0, 2):
        model = _model()
        cfg = TrainConfig(epochs=1, batch_size=8, lr=1e-3, log_every=1, save_every=0, trim_every=every)
        run = train(model, _examples(), fn, cfg, log=lambda s: None)
        runs.append((run["steps"], [p.detach().clone() for p in model.parameters()]))
    assert runs[0][0] == runs[1][0] == 5 and len(steps) == 2  # steps 2 and 4 of 5
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1]))
    assert real() in (True, False)
    with pytest.raises(ValueError, match="trim_every"):
        TrainConfig(trim_every=-1)
