"""Related documents (SPEC §12): pairs from title structure with the other title stripped, the split by law,
LTM-B's save/load and ablation switches, the segment cache, and the part + CLI on a tiny index version."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from docmatch.ltm import LTMB, LTMConfig, from_json, load_file, save, score_pairs, to_json
from docmatch.pairs import (PairConfig, derive_pairs, load_texts, parent_title, read_corpus, split_laws,
                           strip_citations, title_pattern)

TOPICS = [("水法", "水资源开发利用和节约保护"), ("教师法", "教师资格和教师待遇"), ("渔业法", "渔业资源增殖和捕捞许可"),
          ("档案法", "档案收集整理和开放利用"), ("气象法", "气象探测和灾害性天气警报"), ("邮政法", "邮政普遍服务和快递业务"),
          ("文物保护法", "不可移动文物和馆藏文物"), ("防震减灾法", "地震监测预报和震害防御"),
          ("土地管理法", "耕地保护和建设用地审批"), ("动物防疫法", "动物疫病预防和检疫监督")]
PROVINCES = ("上海市", "浙江省")


def law_text(topic: str, detail: str) -> str:
    parts = detail.split("和")
    return "".join([f"第一条 为了加强{detail}，制定本法。", f"第二条 国家鼓励{parts[0]}工作。",
                    f"第三条 县级以上人民政府应当将{parts[-1]}纳入规划。", f"第四条 {topic[:-1]}工作实行统一管理。",
                    f"第五条 违反{parts[0]}规定的，依法处理。"])


def corpus_rows() -> list[dict]:
    """Ten laws (one titled without the 中华人民共和国 prefix), two implementing regulations each (title
    variants of SPEC §12), one regulation naming no law and one implementing a law not in the corpus."""
    rows = []
    for i, (topic, detail) in enumerate(TOPICS):
        title = topic if i == 9 else f"中华人民共和国{topic}"
        rows.append({"id": f"law{i}", "title": title, "text": law_text(topic, detail), "level": "法律",
                     "category": "行政法" if i % 2 else "经济法", "date": "2020-01-01"})
        suffix = "若干规定" if i == 3 else "办法"
        for j, prov in enumerate(PROVINCES):
            t = f"{prov}实施《{title}》{suffix}" if (i + j) % 3 else f"{topic}实施{'细则' if j else '条例'}"
            text = (f"第一条 根据《{title}》和有关法律、行政法规，结合{prov}实际，制定本办法。"
                    f"第二条 {prov}推进{detail}，依照{topic}规定执行。第三条 本办法所称{detail.split('和')[0]}，"
                    f"由{prov}人民政府统一负责。")
            rows.append({"id": f"reg{i}-{j}", "title": t, "text": text, "level": "地方性法规",
                         "category": "地方性法规", "date": "2021-01-01"})
    rows.append({"id": "other", "title": "上海市实施宪法宣誓制度办法", "text": "第一条 宣誓仪式。", "level": "地方性法规",
                 "category": "地方性法规", "date": "2021-01-01"})
    rows.append({"id": "orphan", "title": "北京市实施《中华人民共和国航空法》办法", "text": "第一条 民用航空。",
                 "level": "地方性法规", "category": "地方性法规", "date": "2021-01-01"})
    return rows


@pytest.fixture(scope="module")
def tiny_corpus(tmp_path_factory):
    p = tmp_path_factory.mktemp("related") / "corpus.jsonl"
    p.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in corpus_rows()) + "\n", encoding="utf-8")
    return p


def test_pairs_come_from_titles_and_the_other_title_is_stripped(tiny_corpus):
    corpus = read_corpus(tiny_corpus)
    laws = set(corpus.loc[corpus["level"] == "法律", "title"])
    assert parent_title("上海市实施《水法》办法", laws) == "中华人民共和国水法"  # prefix added
    assert parent_title("中华人民共和国水法实施条例", laws) == "中华人民共和国水法"
    assert parent_title("北京市实施《中华人民共和国档案法》若干规定", laws) == "中华人民共和国档案法"
    assert parent_title("动物防疫法实施细则", laws) == "动物防疫法"  # a law titled without the prefix
    assert parent_title("上海市实施宪法宣誓制度办法", laws) is None
    pairs = derive_pairs(corpus, PairConfig(level_negatives=2, category_negatives=2))
    pos = pairs[pairs["label"] == 1]
    assert sorted(zip(pos["a"], pos["b"])) == sorted((f"reg{i}-{j}", f"law{i}") for i in range(10) for j in (0, 1))
    assert {"other", "orphan"}.isdisjoint(pairs["a"])
    neg = pairs[pairs["label"] == 0]
    assert set(neg["kind"]) == {"level", "category"} and not set(zip(neg["a"], neg["b"])) & set(zip(pos["a"], pos["b"]))
    texts = load_texts(corpus)
    reg = texts["reg0-0"]
    assert "水法" not in reg and "根据" not in reg and "《" not in reg  # title, bare name and citing clause gone
    assert reg.startswith("第一条 结合上海市实际，制定本办法。") and "水资源开发利用" in reg
    assert strip_citations("依照《某某条例》和水法。", title_pattern(["中华人民共和国水法"])) == "依照和。"


def test_split_is_by_law_with_no_law_on_both_sides(tiny_corpus):
    pairs = derive_pairs(read_corpus(tiny_corpus), PairConfig(seed=3))
    side = {}
    for b, s in zip(pairs["b"], pairs["split"]):
        assert side.setdefault(b, s) == s  # every law (positive or negative) in one split only
    for a, s in zip(pairs["a"], pairs["split"]):
        assert side.setdefault(a, s) == s
    assert set(pairs["split"]) == {"train", "dev", "test"}
    assert split_laws(["x", "y", "z", "w", "v"], PairConfig(seed=3)) == split_laws(["v", "w", "x", "y", "z"],
                                                                                   PairConfig(seed=3))


def test_model_file_round_trip_scores_identically(tmp_path):
    torch.manual_seed(0)
    model = LTMB(LTMConfig(dim=16, hidden=8, heads=2, max_segments=3))
    rng = np.random.default_rng(0)
    a = [rng.normal(size=(n, 16)).astype(np.float32) for n in (1, 3, 5)]
    b = [rng.normal(size=(n, 16)).astype(np.float32) for n in (2, 3, 1)]
    save(model, tmp_path / "m.json", {"provenance": {"encoder_model_id": "x"}})
    loaded = load_file(tmp_path / "m.json")
    assert score_pairs(loaded.model, a, b) == score_pairs(model, a, b)
    assert loaded.info["provenance"] == {"encoder_model_id": "x"} and loaded.model.cfg == model.cfg
    bad = json.loads(to_json(model))
    bad["config"]["hidden"] = 16
    with pytest.raises(ValueError, match="weights do not fit"):
        from_json(json.dumps(bad))
    with pytest.raises(ValueError, match="not an LTM-B"):
        from_json('{"format": "other"}')


def test_ablation_switches_change_the_architecture():
    def names(**kw):
        return {n.split(".")[0] for n, _ in LTMB(LTMConfig(dim=16, hidden=8, heads=2, **kw)).named_parameters()}

    full = names()
    assert {"proj", "lstm", "encoder", "mix", "head"} <= full
    assert names(positions=False) == full - {"lstm"}
    assert names(transformer=False) == full - {"encoder"}
    assert names(interaction="cosine") == (full - {"mix", "head", "skip"}) | {"scale", "bias"}
    assert names(skip=False) == full - {"skip"}
    with pytest.raises(ValueError):
        LTMConfig(interaction="dot")


def _vector_pairs(n_laws: int = 6, per_law: int = 3, dim: int = 16, noise: float = 3.0):
    """Document matrices where each regulation is its parent law's rows plus ``noise`` x N(0, 1), and the pairs: the
    first 4 laws' regulations train, the 5th's dev, the 6th's test (one positive per regulation)."""
    rng = np.random.default_rng(0)
    mats = {f"law{i}": rng.normal(size=(2, dim)).astype(np.float32) for i in range(n_laws)}
    rows = []
    for i in range(n_laws):
        for j in range(per_law):
            mats[f"reg{i}-{j}"] = (mats[f"law{i}"] + noise * rng.normal(size=(2, dim))).astype(np.float32)
            rows.append({"a": f"reg{i}-{j}", "b": f"law{i}", "label": 1,
                         "split": "train" if i < 4 else ("dev" if i == 4 else "test")})
    return pd.DataFrame(rows), mats


def test_ltm_training_is_seeded_keeps_the_best_dev_epoch_and_stops_early():
    """train_ltm on the training engine: the same seed gives the same history and weights; the returned model
    is the best dev epoch's (MRR, then the lower NLL); training stops after `patience` epochs without a better
    one; every epoch holds the same number of random negatives."""
    import random

    from docmatch.ranking import rank_metrics
    from docmatch.train import TrainConfig, dev_nll, epoch_pairs, ltm_scores, train_ltm

    pairs, mats = _vector_pairs()
    laws = [f"law{i}" for i in range(6)]
    cfg, tcfg = LTMConfig(dim=16, hidden=16, heads=2, max_segments=2), TrainConfig(epochs=12, patience=2, batch_size=8)
    runs = [train_ltm(pairs, mats, cfg, tcfg, dev_candidates=laws, log=lambda *_: None) for _ in range(2)]
    (model, hist), (again, hist2) = runs
    strip = lambda h: [{k: v for k, v in e.items() if k != "seconds"} for e in h["epochs"]]  # noqa: E731
    assert strip(hist) == strip(hist2) and all(torch.equal(a, b) for a, b in
                                               zip(model.state_dict().values(), again.state_dict().values()))
    assert [e["epoch"] for e in hist["epochs"]] == list(range(len(hist["epochs"])))
    assert {"loss", "dev_mrr", "dev_nll", "seconds"} <= set(hist["epochs"][0]) and hist["seconds"] > 0
    keys = [(e["dev_mrr"], -e["dev_nll"]) for e in hist["epochs"]]
    best = keys.index(max(keys))
    assert hist["best_dev_mrr"] == hist["epochs"][best]["dev_mrr"]
    assert len(keys) < tcfg.epochs and len(keys) - 1 - best == tcfg.patience  # on this data dev MRR drops: it stops
    dev = pairs[pairs["split"] == "dev"]
    assert rank_metrics(lambda a, c: ltm_scores(model, mats, a, c), dev, laws)["mrr"] == pytest.approx(
        hist["best_dev_mrr"], abs=1e-9)
    assert dev_nll(model, mats, dev, laws) == pytest.approx(hist["epochs"][best]["dev_nll"], abs=1e-9)
    assert not model.training
    sizes = {len(epoch_pairs(pairs, random.Random(s), 6)) for s in range(5)}
    assert sizes == {12 + 12 * 3}  # 12 train positives, each with the 3 other train laws as its negatives


def test_segment_cache_embeds_only_missing_rows(tmp_path):
    from docmatch.segments import encoder_cache, segments
    from retrieval.chunks import ChunkConfig
    from tests.retrieval_builders import policy_docs, save_tiny_bert

    ckpt = save_tiny_bert(tmp_path / "enc")
    text = policy_docs()["text"][0]
    cache = encoder_cache(ckpt, tmp_path / "cache", ChunkConfig(max_chars=120, overlap=30))
    one = cache.matrices({"d": text}, 1)["d"]
    two = cache.matrices({"d": text}, 2)["d"]
    assert one.shape == (1, 32) and two.shape == (2, 32) and np.array_equal(one[0], two[0])
    assert cache.stats["embedded_segments"] == 2 and cache.stats["cached_segments"] == 1
    assert segments(text, ChunkConfig(max_chars=120, overlap=30))[:2] == segments(text, ChunkConfig(120, 30), 2)


def test_part_and_cli_on_a_tiny_version(tmp_path, tiny_corpus, capsys):
    from flows.related import main
    from docmatch import load
    from docmatch.pairs import write_pairs
    from docmatch.stage import build_related_part
    from docmatch.train import TrainConfig, ltm_scores
    from retrieval.chunks import ChunkConfig
    from retrieval.parts import PartSource, install_part, version_identity
    from retrieval.stages import index_stage
    from tests.retrieval_builders import save_tiny_bert, write_clean

    corpus = read_corpus(tiny_corpus)
    docs = corpus.rename(columns={"id": "doc_id"}).assign(source="国务院", url=None, citation=None,
                                                          external_id=lambda d: "EXT-" + d["doc_id"])
    docs["n_chars"] = docs["text"].str.len()
    clean = write_clean(docs[["doc_id", "text", "title", "source", "url", "citation", "n_chars", "external_id"]],
                        tmp_path / "clean")
    index_stage(clean, save_tiny_bert(tmp_path / "enc"), tmp_path / "data" / "index", ChunkConfig(120, 30),
                sparse=None)
    vdir = tmp_path / "data" / "index" / "v1"
    write_pairs(derive_pairs(corpus, PairConfig(seed=3)), tmp_path / "pairs.jsonl")
    figs = build_related_part(vdir, tmp_path / "pairs.jsonl", tmp_path / "work",
                              cfg=LTMConfig(hidden=16, heads=2, max_segments=2),
                              tcfg=TrainConfig(epochs=2, patience=1), log=lambda *_: None)
    assert figs["embedding"]["embedded_segments"] == 0 and figs["test"]["queries"] == 4  # the version's own vectors
    assert main(["reg0-0", "--data-dir", str(tmp_path / "data")]) == 2  # no related part yet
    assert "no related part" in capsys.readouterr().err
    manifest = json.loads((vdir / "manifest.json").read_text())  # the wiring: install the part at publication
    manifest["parts"]["related"] = install_part(vdir, PartSource("related", "related.json", figs["path"],
                                                                 requires=("encoder_model_id",)),
                                                version_identity(manifest))
    (vdir / "manifest.json").write_text(json.dumps(manifest))
    assert main(["reg0-0", "--data-dir", str(tmp_path / "data"), "-k", "5"]) == 0
    hits = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(hits) == 5 and "reg0-0" not in {h["doc_id"] for h in hits}
    assert [h["score"] for h in hits] == sorted((h["score"] for h in hits), reverse=True)
    assert all(h["external_id"] == "EXT-" + h["doc_id"] and h["title"] for h in hits)
    rel = load(vdir)  # served: the fused ranking with the weights fitted at build (docmatch.fusion)
    from docmatch.fused_serve import FusedRanker, version_means, version_texts
    from docmatch.fusion import SIGNALS, znorm
    from docmatch.segments import version_matrices

    fus = figs["fusion"]
    assert rel.fused is not None and rel.fused.weights == fus["weights"] and fus["fitted"]
    assert set(fus["test"]) == {*SIGNALS, "fused"} and fus["test"]["fused"]["queries"] == 4
    top2 = {h["doc_id"]: h.get("link") for h in hits[:2]}  # its parent (its text cites 《law0》) and its sibling
    assert top2 == {"law0": "implements", "reg0-1": None}
    mats = version_matrices(vdir, max_segments=2)  # LTM-B alone: its logits z-normalised over the other documents
    only = FusedRanker(rel, version_texts(vdir), version_means(vdir, rel.ids), {"ltm": 1.0})
    others = [d for d in rel.ids if d != "reg0-0"]
    want = dict(zip(others, znorm(ltm_scores(rel.model, mats, "reg0-0", others))))
    assert all(abs(h["score"] - want[h["doc_id"]]) < 1e-4 for h in only.related("reg0-0", 5))
    (tmp_path / "ask.jsonl").write_text('{"a": "EXT-reg0-0", "b": "EXT-law0", "note": 1}\n')
    assert main(["--pairs", str(tmp_path / "ask.jsonl"), "--id-column", "external_id", "--data-dir",
                 str(tmp_path / "data")]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["note"] == 1 and abs(row["score"] - rel.score([("reg0-0", "law0")])[0]) < 1e-9
    from docmatch.stage import document_matrices  # a document outside the version: the pinned encoder embeds it

    (tmp_path / "more.jsonl").write_text(json.dumps({"id": "x1", "title": "某条例", "text": "第一条 根据《中华人民共和国水法》，"
                                                     "制定本条例。第二条 节约用水。" * 5}, ensure_ascii=False))
    with pytest.raises(ValueError, match="not in the version and no corpus"):
        document_matrices(vdir, manifest, ["x1", "law0"], max_segments=2)
    mats2, emb = document_matrices(vdir, manifest, ["x1", "law0"], tmp_path / "more.jsonl", tmp_path / "c", 2)
    assert emb["embedded_segments"] == len(mats2["x1"]) >= 1 and np.array_equal(mats2["law0"], mats["law0"])
    assert main(["nope", "--data-dir", str(tmp_path / "data")]) == 2
    assert "no document with doc_id 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("k", [2, 3, 5])
def test_cross_validation_folds_are_by_law_and_test_every_regulation_once(tiny_corpus, k):
    from docmatch.folds import fold_pairs, law_folds, reverse_pool
    from docmatch.pairs import parents

    corpus = read_corpus(tiny_corpus)
    laws, pos = corpus[corpus["level"] == "法律"], parents(corpus)
    folds = law_folds(laws, pos, k, seed=7)
    assert set(folds) == set(laws["id"]) and set(folds.values()) == set(range(k))
    sizes = pos["b"].map(folds).value_counts()
    assert sizes.max() - sizes.min() <= 2  # 2 regulations a law: near-equal query counts per fold
    tested = []
    for f in range(k):
        pairs = fold_pairs(corpus, folds, f, PairConfig(seed=7, level_negatives=2, category_negatives=2))
        side = {}
        for doc, s in [*zip(pairs["b"], pairs["split"]), *zip(pairs["a"], pairs["split"])]:
            assert side.setdefault(doc, s) == s  # no law (nor regulation) on two sides of a fold
        assert {"train", "dev", "test"} <= set(pairs["split"])
        test = pairs[(pairs["split"] == "test") & (pairs["label"] == 1)]
        assert set(test["b"]) == {b for b, g in folds.items() if g == f} & set(pos["b"])
        tested += list(test["a"])
    assert sorted(tested) == sorted(pos["a"])  # every regulation a test query exactly once
    assert law_folds(laws, pos, k, seed=7) == folds and law_folds(laws, pos, k, seed=8) != folds
    with pytest.raises(ValueError, match="folds"):
        law_folds(laws, pos, 11, seed=7)
    pool = reverse_pool(corpus, others=1)
    assert set(pos["a"]) < set(pool) and len(pool) == len(pos) + 1 and set(pool) - set(pos["a"]) <= {"other", "orphan"}


def test_sparse_bm25_matches_the_kernel_and_pair_stripping_removes_only_the_other_title(tiny_corpus):
    from docmatch.baselines import BigramBM25, SparseBM25, pair_stripped_scores
    from docmatch.pairs import strip_other
    from docmatch.ranking import set_metrics

    corpus = read_corpus(tiny_corpus)
    texts, titles = dict(zip(corpus["id"], corpus["text"])), dict(zip(corpus["id"], corpus["title"]))
    laws = sorted(corpus.loc[corpus["level"] == "法律", "id"])
    sparse, kernel = SparseBM25([texts[x] for x in laws]), BigramBM25([texts[x] for x in laws])
    for q in ("reg0-0", "reg4-1", "other"):
        np.testing.assert_allclose(sparse.scores(texts[q]), kernel.scores(texts[q]), rtol=1e-5, atol=1e-6)
    assert sparse.score_one(texts["reg0-0"], texts[laws[0]]) == pytest.approx(sparse.scores(texts["reg0-0"])[0])
    text = "第一条 根据《中华人民共和国水法》和有关法律，结合实际，制定本办法。依照水法和《档案法》执行。"
    assert strip_other(text, "中华人民共和国水法") == "第一条 结合实际，制定本办法。依照和《档案法》执行。"
    assert strip_other(text, "中华人民共和国邮政法") == text
    s = pair_stripped_scores(sparse, texts["reg0-0"], titles["reg0-0"], laws, texts, titles)
    stripped = strip_other(texts["reg0-0"], titles["law0"])
    assert s[0] == pytest.approx(sparse.score_one(stripped, texts["law0"])) and s[0] < sparse.scores(texts["reg0-0"])[0]
    assert np.allclose(s[1:], sparse.scores(texts["reg0-0"])[1:])  # other laws: nothing named, nothing stripped
    scores = {"law0": 3.0, "reg0-0": 2.0, "reg0-1": 1.0, "other": 1.0}  # ties count against the relevant
    m = set_metrics(lambda q, c: np.array([scores[x] for x in c]), {"law0": {"reg0-0", "reg0-1"}},
                    ["reg0-0", "other", "reg0-1", "law0"], k=1)
    assert m == {"recall@1": 0.5, "mrr": 1.0, "map": pytest.approx((1 + 2 / 3) / 2), "queries": 1}
