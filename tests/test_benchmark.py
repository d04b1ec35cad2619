"""Public benchmarks (SPEC §10): loaders and their fallback splits, metrics, heads, baselines, runner, flow.

Data: a few real rows of each set in ``../shared/benchmarks`` copied into a temporary root, plus rows the
tests write; models: tiny BERT/PolicyBERT checkpoints the tests build."""
from __future__ import annotations

import gzip
import itertools
from collections import Counter
from pathlib import Path

import pytest
import torch

from model.benchmark.data import TASKS, BenchmarkDataError, cap, keys, load_task

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "benchmarks"
FILES = {"cws": ["test.jsonl"], "pos": ["train.jsonl", "dev.jsonl", "test.jsonl"],
         "ner": ["train.jsonl.gz", "test.jsonl"], "dc": ["dev.jsonl", "test.jsonl"],
         "sa": ["train.jsonl", "dev.jsonl", "test.jsonl"], "spm": ["dev.jsonl", "test.jsonl"]}


def _head(path: Path, n: int) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [line for line in itertools.islice(fh, n)]


@pytest.fixture(scope="module")
def bench_root(tmp_path_factory) -> Path:
    """The first rows of every real file (DC's dev/test rows interleaved across labels by taking 400), plus
    one SA test row repeated in SA's train file (a leak the loader must drop)."""
    if not SHARED.is_dir():
        pytest.skip("../shared/benchmarks is not here")
    root = tmp_path_factory.mktemp("bench")
    for task, files in FILES.items():
        (root / task).mkdir()
        for f in files:
            lines = _head(SHARED / task / f, 400 if task == "dc" else 60)
            if task == "sa" and f == "train.jsonl":
                lines.append(_head(SHARED / "sa" / "test.jsonl", 1)[0])
            out = root / task / f
            if f.endswith(".gz"):
                with gzip.open(out, "wt", encoding="utf-8") as fh:
                    fh.writelines(lines)
            else:
                out.write_text("".join(lines), encoding="utf-8")
    return root


@pytest.mark.parametrize("task", list(TASKS))
def test_loader_splits_never_overlap_test(bench_root, task):
    s = load_task(task, bench_root)
    kind = s.task.kind
    test = set(keys(s.test, kind))
    assert len(s.train) and len(s.dev) and len(s.test)
    assert not test & set(keys(s.train, kind)) and not test & set(keys(s.dev, kind))
    if task in ("cws", "pos", "ner"):
        assert all(len(t) == len(c) for t, c in zip(s.train["tags"], s.train["chars" if kind == "token" else "words"]))
    note = {"cws": "hash-split 80/20", "ner": "5 % of train as dev", "dc": "trained on the dev file",
            "spm": "trained on the dev file", "pos": "published", "sa": "published"}[task]
    assert note in s.note
    if task == "sa":
        assert "1 train rows dropped (text also in test)" in s.note
    again = load_task(task, bench_root)  # deterministic
    assert keys(again.train, kind) == keys(s.train, kind)


def test_cws_fallback_splits_the_test_file_80_20(bench_root):
    s = load_task("cws", bench_root)
    n = len(s.train) + len(s.dev) + len(s.test)
    assert n == 60 and 0.1 <= len(s.test) / n <= 0.35
    c = cap(s, max_train=5, max_test=3)
    assert len(c.train) == 5 and len(c.test) == 3 and "capped" in c.note


def test_loader_errors_name_the_problem(tmp_path):
    with pytest.raises(BenchmarkDataError, match="no test.jsonl"):
        load_task("sa", tmp_path)
    (tmp_path / "sa").mkdir()
    (tmp_path / "sa" / "test.jsonl").write_text('{"sentence": "x", "label": 1}\n', encoding="utf-8")
    with pytest.raises(BenchmarkDataError, match="no field 'text'"):
        load_task("sa", tmp_path)


def test_metrics_against_hand_computed_values():
    from model.benchmark.metrics import (bmes_words, classification_scores, cws_scores, ner_scores, tag_accuracy,
                                         words_to_bmes)

    assert bmes_words(list("BESBME")) == [(0, 2), (2, 3), (3, 6)]
    assert bmes_words(list("MBB")) == [(0, 1), (1, 2), (2, 3)]  # ill-formed still covers every char
    assert words_to_bmes(["中国", "的", "经济学"]) == list("BESBME")
    # gold words (0,2) (2,3) (3,6); predicted (0,2) (2,4) (4,6): 1 of 3 right both ways
    cws = cws_scores([list("BESBME")], [list("BEBEBE")])
    assert cws["precision"] == pytest.approx(1 / 3) and cws["f1"] == pytest.approx(1 / 3)
    ner = ner_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "O"]])
    assert ner["precision"] == 1.0 and ner["recall"] == 0.5 and ner["f1"] == pytest.approx(2 / 3)
    assert tag_accuracy([["N", "V"], ["N", "P"]], [["N", "V"], ["N", "N"]])["accuracy"] == 0.75
    c = classification_scores(["a", "a", "b", "b"], ["a", "b", "b", "b"])
    assert c["accuracy"] == 0.75 and c["macro_f1"] == pytest.approx((2 / 3 + 0.8) / 2)


def _tiny_policybert(fusion: str, **kw):
    from model.configuration import PolicyBertConfig

    return PolicyBertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                            intermediate_size=32, max_position_embeddings=32, num_word_layers=1, word_vocab_size=12,
                            max_words=4, fusion=fusion, **kw)


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 40, (2, 9), generator=g)
    mm = torch.zeros(2, 4, 9)
    mm[0, 0, 1:3] = 1
    mm[1, 1, 4:7] = 1
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "word_ids": torch.tensor([[3, 0, 0, 0], [0, 7, 0, 0]]),
            "matching_matrix": mm}


@pytest.mark.parametrize("fusion", ["none", "gate", "attn"])
def test_token_and_sequence_heads_reload_exactly(tmp_path, fusion):
    from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification

    import model  # noqa: F401  (registers policybert with the Auto classes)
    from model.modeling import PolicyBertForSequenceClassification, PolicyBertForTokenClassification

    batch = _batch()
    for cls, auto, n in ((PolicyBertForTokenClassification, AutoModelForTokenClassification, 7),
                         (PolicyBertForSequenceClassification, AutoModelForSequenceClassification, 10)):
        torch.manual_seed(0)
        m = cls(_tiny_policybert(fusion, num_labels=n)).eval()
        before = m(**batch).logits
        assert before.shape == ((2, 9, n) if n == 7 else (2, n))
        m.save_pretrained(tmp_path / cls.__name__)
        back = auto.from_pretrained(tmp_path / cls.__name__).eval()
        assert type(back) is cls and back.config.num_labels == n
        assert torch.equal(back(**batch).logits, before)


def test_token_head_ignores_unlabelled_positions():
    from model.modeling import PolicyBertForTokenClassification

    torch.manual_seed(0)
    m = PolicyBertForTokenClassification(_tiny_policybert("gate", num_labels=3)).eval()
    batch = _batch()
    labels = torch.full((2, 9), -100)
    labels[0, 1], labels[1, 4] = 2, 0
    out = m(**batch, labels=labels)
    ref = torch.nn.functional.cross_entropy(out.logits[[0, 1], [1, 4]], torch.tensor([2, 0]))
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5)


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory, bench_root) -> Path:
    """A tiny BERT checkpoint with a char vocab.txt over the chars of the test rows."""
    from transformers import BertConfig, BertModel

    from model.features import build_char_vocab, save_char_tokenizer

    texts = [line for t, fs in FILES.items() for f in fs for line in _head(bench_root / t / f, 400)]
    vocab = build_char_vocab(texts)
    d = tmp_path_factory.mktemp("tinybert")
    save_char_tokenizer(vocab, d)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=64)).save_pretrained(d)
    return d


@pytest.mark.parametrize("task", ["pos", "ner"])
def test_windows_stitch_back_to_the_gold_tags(bench_root, tiny_bert, task):
    """Encoding in windows of 10 chars and decoding the gold label ids gives back every gold tag."""
    from model.benchmark.inputs import encode_split
    from model.benchmark.runner import char_encoder, decode
    from model.features import WordMatcher

    s = load_task(task, bench_root)
    ex = encode_split(s.test, s, char_encoder(tiny_bert), WordMatcher(["中国"]), 12, 4, 0)
    assert max(len(e["input_ids"]) for e in ex) == 12 and len(ex) > len(s.test)
    pred = [[max(x, 0) for x in e["tag_labels"][1:1 + e["n"]]] for e in ex]
    gold, out = decode(ex, pred, s.test, s)
    assert out == gold and gold == [list(t) for t in s.test["tags"]]


def _majority_shares(train_labels, test_labels) -> set[float]:
    """Test accuracy of predicting the train split's most frequent label, counted by hand (a tie: each top label)."""
    counts = Counter(train_labels)
    top = {label for label, n in counts.items() if n == max(counts.values())}
    return {sum(t == label for t in test_labels) / len(test_labels) for label in top}


def test_baselines_run_and_beat_majority(bench_root):
    """Each baseline against a non-learning one on the same test rows, counted by hand: CWS segmenters against
    every char a word, POS most-frequent-tag-per-word against one tag for all words, the classifiers against
    the majority label (whose figure is the hand count), the NER CRF against tagging all O (no span: F1 0)."""
    from model.benchmark.baselines import BASELINES, majority_tag, ner_crf
    from model.benchmark.metrics import bmes_words

    for task in ("cws", "pos", "dc", "sa", "spm"):
        s = load_task(task, bench_root)
        scores = {name: fn(s) for name, fn in BASELINES[task].items()}
        if task == "cws":  # every char a word: right words are the gold single chars
            gold = [bmes_words(t) for t in s.test["tags"]]
            singles = sum(e - b == 1 for words in gold for b, e in words)
            p, r = singles / sum(map(len, s.test["chars"])), singles / sum(map(len, gold))
            every_char = 2 * p * r / (p + r)
            assert every_char < 0.7 < min(scores["hanlp-dict"]["f1"], scores["jieba"]["f1"]), (every_char, scores)
        elif task == "pos":
            top = Counter(t for tags in s.train["tags"] for t in tags).most_common(1)[0][0]
            test_tags = [t for tags in s.test["tags"] for t in tags]
            one_tag = test_tags.count(top) / len(test_tags)
            assert scores["most-frequent-tag"]["accuracy"] > one_tag + 0.1, (scores, one_tag)
        else:
            learned = {"dc": "tfidf-lr", "sa": "tfidf-lr", "spm": "overlap-lr"}[task]
            assert scores["majority"]["accuracy"] in _majority_shares(list(s.train["label"]), list(s.test["label"]))
            assert scores[learned]["accuracy"] > scores["majority"]["accuracy"], (task, scores)
    s = load_task("ner", bench_root)
    assert majority_tag(s) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}  # all O: no predicted span
    crf = ner_crf(s, max_iterations=20)
    assert crf["f1"] > 0.0 and crf["precision"] > 0.0, crf


def test_finetune_token_and_sequence_tasks_with_a_tiny_model(bench_root, tiny_bert, monkeypatch):
    """The reported test figure is the metric of the fine-tuned model's own test predictions (captured as the
    runner makes them), counted by hand: right labels / rows (SPM), right words / words (CWS)."""
    from model.benchmark import runner
    from model.benchmark.inputs import word_matcher
    from model.benchmark.metrics import bmes_words
    from model.benchmark.runner import BUDGETS, finetune_task, variants_for

    calls = []
    real_predict = runner.predict

    def recording_predict(model, examples, *args, **kwargs):
        calls.append((examples, real_predict(model, examples, *args, **kwargs)))
        return calls[-1][1]

    monkeypatch.setattr(runner, "predict", recording_predict)
    assert variants_for(tiny_bert, ["gate", "attn"]) == ["plain", "gate", "attn"]
    for task in ("cws", "spm"):
        s = load_task(task, bench_root)
        capped = cap(s, BUDGETS["tiny"].max_train, BUDGETS["tiny"].max_eval)
        matcher, source = word_matcher(s)
        assert "train split segmented by hanlp-dict" in source
        for variant in ("plain", "gate"):
            r = finetune_task(s, tiny_bert, variant, BUDGETS["tiny"], 0, matcher, log=lambda m: None)
            assert r["steps"] == 3 and r["test_rows"] == min(16, len(s.test)) == len(capped.test)
            gold, pred = runner.decode(*calls[-1], capped.test, capped)  # the last prediction: the test split
            if task == "spm":
                assert r["scores"]["accuracy"] == pytest.approx(sum(g == p for g, p in zip(gold, pred)) / len(gold))
            else:
                right = sum(len(set(bmes_words(g)) & set(bmes_words(p))) for g, p in zip(gold, pred))
                n_pred = sum(len(bmes_words(p)) for p in pred)
                assert r["scores"]["precision"] == pytest.approx(right / n_pred)
                assert r["scores"]["recall"] == pytest.approx(right / sum(len(bmes_words(g)) for g in gold))


@pytest.mark.slow
def test_flow_end_to_end_on_two_tasks(prefect_harness, bench_root, tiny_bert, tmp_path):
    import pandas as pd

    from flows.benchmark import benchmark_flow

    table = benchmark_flow(["sa", "pos"], str(tiny_bert), ["gate"], seeds=2, budget="tiny", out=str(tmp_path),
                           data=str(bench_root))
    df = pd.read_parquet(tmp_path / "benchmark.parquet")
    assert {"task", "model", "seed", "metric", "value", "train_rows", "test_rows", "split"} <= set(df.columns)
    assert set(df["task"]) == {"sa", "pos"}
    assert set(df["model"]) == {"plain", "gate", "tfidf-lr", "majority", "most-frequent-tag"}
    assert len(df[(df.task == "sa") & (df.model == "gate") & (df.metric == "accuracy")]) == 2
    gate = [r for r in table if r["model"] == "gate"]
    assert len(gate) == 2 and all(" ± " in r["mean ± std"] and r["> 2 std"] in ("yes", "no") for r in gate)
    md = (tmp_path / "benchmark.md").read_text(encoding="utf-8")
    assert "| pos | accuracy | most-frequent-tag |" in md and "0.9716" in md


def test_char_checkpoint_from_pieces_computes_what_the_body_computes_on_pieces(tmp_path):
    """A tiny SentencePiece (Unigram) BERT: the char checkpoint maps each char to its own piece's row, and the
    char model on [CLS] c1 c2 [SEP] equals the body on <s> piece(c1) piece(c2) </s>."""
    from tokenizers import Tokenizer
    from tokenizers.models import Unigram
    from transformers import BertConfig, BertModel

    from model.backbones import BackboneError, char_checkpoint_from_pieces, char_pieces
    from model.features import CharEncoder

    pieces = ["<s>", "<pad>", "</s>", "<unk>", "▁", "中国", "▁中", "国", "▁政", "策", "中", "<mask>"]
    Tokenizer(Unigram([(p, -1.0) for p in pieces], unk_id=3)).save(str(tmp_path / "tok.json"))
    src = tmp_path / "body"
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=len(pieces), hidden_size=16, num_hidden_layers=3, num_attention_heads=2,
                         intermediate_size=32, max_position_embeddings=16)).save_pretrained(src)
    with pytest.raises(BackboneError, match="no tokenizer.json"):
        char_checkpoint_from_pieces(src, tmp_path / "x")
    (tmp_path / "tok.json").rename(src / "tokenizer.json")
    ids = {p: i for i, p in enumerate(pieces)}
    assert char_pieces(ids) == {"国": 7, "政": 8, "策": 9, "中": 10}  # bare 中 preferred over ▁中
    rep = char_checkpoint_from_pieces(src, tmp_path / "chars", layers=2)
    assert rep["chars"] == 4 and rep["layers"] == 2
    enc = CharEncoder.from_dir(tmp_path / "chars")
    char_ids = [enc.cls] + enc.ids(["中", "国", "政"]) + [enc.sep]
    piece_ids = [ids["<s>"], ids["中"], ids["国"], ids["▁政"], ids["</s>"]]
    body = BertModel.from_pretrained(src, num_hidden_layers=2, add_pooling_layer=False).eval()
    chars = BertModel.from_pretrained(tmp_path / "chars", add_pooling_layer=False).eval()
    assert chars.config.vocab_size == 9 and chars.config.num_hidden_layers == 2
    a = body(torch.tensor([piece_ids])).last_hidden_state
    b = chars(torch.tensor([char_ids])).last_hidden_state
    assert torch.allclose(a, b, atol=1e-6)
    assert (tmp_path / "chars" / "char_pieces.tsv").read_text(encoding="utf-8").splitlines()[5] == "国\t7\t国"


def test_word_add_above_off_leaves_the_upper_layers_to_the_body(tmp_path):
    """With the gate shut (g = 0), words reach the char states only through ZEN's additions above the word
    layers: ``word_add_above=False`` then computes exactly what the char body computes, the default does not;
    the switch survives save/reload."""
    from transformers import BertConfig, BertModel

    from model.modeling import PolicyBertModel

    batch = _batch()
    torch.manual_seed(0)
    body = BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=32), add_pooling_layer=False).eval()
    ref = body(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
    outs = {}
    for above in (True, False):
        m = PolicyBertModel(_tiny_policybert("gate", word_add_above=above), add_pooling_layer=False).eval()
        missing = m.load_state_dict(body.state_dict(), strict=False).missing_keys
        assert missing and all("word" in k or "fusion" in k for k in missing)
        with torch.no_grad():
            m.encoder.fusion[0].gate.weight.zero_()
            m.encoder.fusion[0].gate.bias.fill_(-1e4)
        outs[above] = m(**batch).last_hidden_state
        m.save_pretrained(tmp_path / str(above))
        back = PolicyBertModel.from_pretrained(tmp_path / str(above)).eval()
        assert back.config.word_add_above is above and torch.equal(back(**batch).last_hidden_state, outs[above])
    assert torch.allclose(outs[False], ref, atol=1e-5)
    assert not torch.allclose(outs[True], ref, atol=1e-2)


@pytest.mark.slow  # trains a tiny model per benchmark job (~40 s on 2 cores)
def test_bench_runner_saves_vocabs_runs_jobs_and_renders_the_table(bench_root, tiny_bert, tmp_path):
    """``bench/benchmark_run.py`` without Prefect: per-task vocabularies from the train splits, two runs as
    parallel child processes (one JSON line each), then the Markdown table beside the baselines."""
    import json
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[1] / "bench" / "benchmark_run.py"
    words, runs = tmp_path / "words", tmp_path / "runs.jsonl"
    common = ["--data", str(bench_root), "--tasks", "sa"]
    subprocess.run([sys.executable, str(script), *common, "--save-vocab", str(words)], check=True)
    assert len((words / "sa.txt").read_text(encoding="utf-8").split()) > 10
    subprocess.run([sys.executable, str(script), *common, "--model", str(tiny_bert), "--variants", "plain,gate",
                    "--budget", "tiny", "--jobs", "2", "--vocab-dir", str(words), "--out", str(runs)], check=True,
                   timeout=600)
    lines = [json.loads(x) for x in runs.read_text(encoding="utf-8").splitlines()]
    assert sorted(r["variant"] for r in lines) == ["gate", "plain"]
    for r in lines:  # the accuracy is a count of right rows among the 16 capped test rows
        assert r["steps"] == 3 and r["test_rows"] == 16
        assert r["test"]["accuracy"] * 16 == pytest.approx(round(r["test"]["accuracy"] * 16))
    out = subprocess.run([sys.executable, str(script), "--data", str(bench_root), "--budget", "tiny", "--table",
                          str(runs)], check=True, capture_output=True, text=True).stdout
    assert "| sa | accuracy | tfidf-lr |" in out and "| sa | accuracy | gate | 1 |" in out and "n/a (1 seed)" in out
    acc = {r["variant"]: r["test"]["accuracy"] for r in lines}
    assert f"| {acc['gate']:.4f} | {TASKS['sa'].thesis:.4f} | {acc['gate'] - acc['plain']:+.4f} | n/a (1 seed) |" in out
    from model.benchmark.runner import BUDGETS

    capped = cap(load_task("sa", bench_root), BUDGETS["tiny"].max_train, BUDGETS["tiny"].max_eval)
    shares = _majority_shares(list(capped.train["label"]), list(capped.test["label"]))
    assert any(f"| sa | accuracy | majority | - | {x:.4f} |" in out for x in shares), (shares, out)
    bad = subprocess.run([sys.executable, str(script), "--tasks", "sa,qa", "--model", str(tiny_bert), "--vocab-dir",
                          str(words)], capture_output=True, text=True)
    assert bad.returncode != 0 and "error: unknown task/variant ['qa']" in bad.stderr
