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


# --- streaming build (SPEC §1): per-group generation, spill by group, shard-size independence ---------------

def _tables(tmp_path, name, rows_per_shard, n_docs=9, n_sents=7):
    """The sentences and segments tables of a corpus written with ``rows_per_shard`` rows per shard."""
    from storage import write_table

    sents, segs = _corpus(n_docs, n_sents, seed=4)
    segs = segs.sample(frac=1.0, random_state=1)  # segments in another row order than the sentences
    d = tmp_path / name
    write_table(sents, d / "sentences", name="sentences", rows_per_shard=rows_per_shard)
    write_table(segs, d / "segments", name="segments", rows_per_shard=rows_per_shard)
    return d, sents, segs


def _split_of(n_docs=9):
    return {f"d{d}": ("train" if d < 6 else "dev" if d < 8 else "test") for d in range(n_docs)}


def _write(d, out, cfg, epochs=2):
    from model.pretrain_data import write_pretrain_epochs

    sents, _ = _corpus(9, 7, seed=4)
    enc = CharEncoder({t: i for i, t in enumerate(build_char_vocab(sents["text"]))})
    out.mkdir(parents=True)
    return write_pretrain_epochs(d / "sentences", d / "segments", _split_of(), enc, WordMatcher(WORDS), cfg, epochs,
                                 out, config={"k": 1}, inputs={"x": "y"}), enc


def _files(root):
    """Relative path -> bytes of every file of the epoch tables under ``root`` (folders may be symlinks)."""
    out = {}
    for table in sorted(root.glob("epoch=*")):
        real = table.resolve()
        out.update({f"{table.name}/{p.relative_to(real).as_posix()}": p.read_bytes()
                    for p in sorted(real.rglob("*")) if p.is_file()})
    return out


def test_tables_are_byte_identical_whatever_the_input_shard_size(tmp_path):
    """Tiny input shards (3 rows, segments shuffled against sentences) and one input shard give the same
    bytes: shards, manifests, stats; several groups per split and several output shards per split; the
    spill folder is gone; the rows equal the in-memory build_pretrain_epoch, group by group."""
    from storage import read_manifest, read_table

    cfg = PretrainDataConfig(max_len=48, group_docs=2, rows_per_shard=9)
    tiny, sents, segs = _tables(tmp_path, "tiny", 3)
    one, _, _ = _tables(tmp_path, "one", 10_000)
    s_tiny, enc = _write(tiny, tmp_path / "out-tiny", cfg)
    s_one, _ = _write(one, tmp_path / "out-one", cfg)
    a, b = _files(tmp_path / "out-tiny"), _files(tmp_path / "out-one")
    assert len(a) == 2 * 8 and a == b and s_tiny == s_one  # 2 epochs x (manifest + 4 train + 2 dev + 1 test shards)
    assert sorted(p.name for p in (tmp_path / "out-tiny").iterdir() if not p.name.startswith(".epoch=")) == [
        "epoch=0", "epoch=1"]  # no spill folder left
    m = read_manifest(tmp_path / "out-tiny" / "epoch=1")
    assert len([s for s in m["shards"] if s["partition"]["split"] == "train"]) >= 3 and m["config"]["epoch"] == 1
    assert m["stats"] == s_tiny["epoch=1"] and m["stats"]["examples"] == 9 * 6
    for epoch in (0, 1):
        mem, stats = build_pretrain_epoch(sents, segs, _split_of(), enc, WordMatcher(WORDS), cfg, epoch)
        assert stats == s_tiny[f"epoch={epoch}"]
        for split in ("train", "dev", "test"):
            disk = read_table(tmp_path / "out-one" / f"epoch={epoch}", partition={"split": split})
            here = mem[mem["split"] == split].reset_index(drop=True)
            assert disk["doc_id"].tolist() == here["doc_id"].tolist()
            for col in ("input_ids", "mlm_labels", "word_ids"):
                assert disk[col].map(list).tolist() == here[col].map(list).tolist(), col
    e0 = read_table(tmp_path / "out-one" / "epoch=0")
    e1 = read_table(tmp_path / "out-one" / "epoch=1")
    assert e0["mlm_labels"].map(list).tolist() != e1["mlm_labels"].map(list).tolist()


def test_random_b_comes_from_another_document_of_the_same_split_and_group():
    """Decode B of every random-next pair (predicted chars restored) and find its sentence: another
    document, the same split and the same group; about half of the pairs are random."""
    from model.pretrain_data import doc_group, group_counts

    sents, segs = _corpus(12, 8, seed=5)
    split_of = {f"d{d}": ("train" if d < 8 else "dev") for d in range(12)}
    enc = CharEncoder({t: i for i, t in enumerate(build_char_vocab(sents["text"]))})
    inv = {i: t for t, i in enc.vocab.items()}
    cfg = PretrainDataConfig(max_len=128, group_docs=3)
    n_groups = group_counts(split_of, cfg.group_docs)
    assert n_groups == {"dev": 2, "train": 3}
    df, stats = build_pretrain_epoch(sents, segs, split_of, enc, WordMatcher(WORDS), cfg, 0)
    doc_of = {t: d for t, d in zip(sents["text"], sents["doc_id"])}
    random_rows = df[df["nsp_label"] == 1]
    assert 0.35 < stats["random_next_share"] < 0.65 and len(random_rows) > 20
    for ids, labels, tt, doc, split in zip(random_rows["input_ids"], random_rows["mlm_labels"],
                                           random_rows["token_type_ids"], random_rows["doc_id"], random_rows["split"]):
        text_b = "".join(inv[int(lab)] if lab != -100 else inv[int(i)] for i, lab, t in zip(ids, labels, tt) if t == 1)
        doc_b = doc_of[text_b[:-len("[SEP]")]]
        assert doc_b != doc and split_of[doc_b] == split
        assert doc_group(doc_b, n_groups[split]) == doc_group(doc, n_groups[split])


def test_a_document_without_a_split_is_a_clear_error(tmp_path):
    import pytest

    d, _, _ = _tables(tmp_path, "t", 5)
    from model.pretrain_data import write_pretrain_epochs

    sents, segs = _corpus(9, 7, seed=4)
    enc = CharEncoder({t: i for i, t in enumerate(build_char_vocab(sents["text"]))})
    split_of = {k: v for k, v in _split_of().items() if k != "d3"}
    (tmp_path / "out").mkdir()
    with pytest.raises(ValueError, match="'d3'.*no split"):
        write_pretrain_epochs(d / "sentences", d / "segments", split_of, enc, WordMatcher(WORDS), PretrainDataConfig(),
                              1, tmp_path / "out")
    with pytest.raises(ValueError, match="'d3'.*no split"):
        build_pretrain_epoch(sents, segs, split_of, enc, WordMatcher(WORDS), PretrainDataConfig(), 0)


def test_the_streamed_view_reads_shard_windows_in_a_deterministic_order(tmp_path):
    """ShardedExamples: rows equal the table's, an epoch order is a permutation fixed per (seed, epoch) that
    visits shard windows one after another (each shard loaded once per pass, at most cache_shards held)."""
    from model.pretrain_data import ShardedExamples
    from storage import read_table

    cfg = PretrainDataConfig(max_len=48, group_docs=2, rows_per_shard=5)
    d, _, _ = _tables(tmp_path, "t", 4)
    _write(d, tmp_path / "out", cfg, epochs=1)
    table = tmp_path / "out" / "epoch=0"
    view = ShardedExamples(table, splits=("train",), cache_shards=2)
    rows = read_table(table, partition={"split": "train"})
    assert len(view) == len(rows) == 36 and len(view.shards) == 8
    for i in (0, 4, 5, 17, 35):
        ex = view[i]
        assert list(ex["input_ids"]) == list(rows["input_ids"][i]) and ex["nsp_label"] == rows["nsp_label"][i]
        assert ex["word_spans"].tolist() == [list(s) for s in rows["word_spans"][i]]
    o1, o2, o3 = view.epoch_order(7, 0), view.epoch_order(7, 0), view.epoch_order(7, 1)
    assert sorted(o1.tolist()) == list(range(36)) and o1.tolist() == o2.tolist() != o3.tolist()
    fresh = ShardedExamples(table, splits=("train",), cache_shards=2)
    for i in o1:
        fresh[i]
        assert len(fresh._cache) <= 2
    assert fresh.loads == 8  # every shard read once in a pass
    held = ShardedExamples(table, splits=("dev", "test"))
    assert len(held) == 18 and {tuple(e["input_ids"]) for e in held.rows([3, 1, 3])} <= {
        tuple(x) for x in read_table(table)["input_ids"]}
