"""The fused related ranking (SPEC §12): typed links, the citation-stripped split and the weight fit."""
from __future__ import annotations

import numpy as np
import pandas as pd

from docmatch.citations import citation_pairs, cited_parent, stripped_texts
from docmatch.fusion import SIGNALS, SignalPool, fit_weights, metrics, query_features, znorm
from docmatch.links import title_keys, typed_links
from tests.test_related import corpus_rows


def _read(rows: list[dict]) -> pd.DataFrame:
    """``rows`` written as a JSON Lines corpus and read back as the pipeline reads one (one title a document)."""
    import json
    import tempfile
    from pathlib import Path

    from docmatch.pairs import read_corpus

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.jsonl"
        p.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
        return read_corpus(p)


def _corpus() -> pd.DataFrame:
    """The title-pattern test corpus plus regulations citing a law only in their text (titles name no law)."""
    rows = corpus_rows()
    laws = [r for r in rows if r["level"] == "法律"]
    for i, law in enumerate(laws[:6]):
        rows.append({"id": f"cite{i}", "title": f"某市第{i}号管理条例", "level": "地方性法规", "category": "地方性法规",
                     "date": "2022-01-01",
                     "text": f"第一条 根据《{law['title']}》等法律，结合本市实际，制定本条例。{law['text']}"
                             f"第九条 违反本条例的，依照《{law['title']}》处罚。"})
    return _read(rows)


def test_typed_links_name_other_documents_in_book_title_marks():
    keys = title_keys({"law": "中华人民共和国水法", "old": "某市节水办法", "dup1": "重名", "dup2": "重名"})
    text = "根据《中华人民共和国水法》，制定本办法。违反《水法》的，依法处理。《某市节水办法》同时废止。见《重名》。"
    assert typed_links(text, keys) == {"law": "implements", "old": "repeals"}  # an ambiguous title links nothing
    assert typed_links("依照《水法》第三条", keys, own="law") == {}  # never a link to itself
    assert typed_links("参照《水法》执行", keys) == {"law": "cites"}


def test_citation_split_strips_the_parent_and_is_held_out_by_law():
    c = _corpus()
    pairs = citation_pairs(c)
    assert sorted(pairs["a"]) == [f"cite{i}" for i in range(6)]  # title-pattern regulations are not in it
    assert set(pairs["b"]) == {f"law{i}" for i in range(6)}
    texts = stripped_texts(c, pairs)
    for a, law in zip(pairs["a"], pairs["law"]):
        short = law.replace("中华人民共和国", "")
        assert short not in texts[a] and "根据" not in texts[a]  # the citation naming the parent is gone
        assert cited_parent(dict(zip(c["id"], c["text"]))[a], {law: "x"}) == law
    assert pairs.groupby("b")["split"].nunique().max() == 1


def test_fit_picks_the_informative_signal_and_fused_is_no_worse_than_any_alone():
    rng = np.random.default_rng(0)
    q, n = 40, 30
    feats = rng.normal(size=(q, n, len(SIGNALS)))
    feats[..., SIGNALS.index("link")] = 0.0
    gold = rng.integers(0, n, size=q)
    bm, mean = SIGNALS.index("bm25"), SIGNALS.index("mean")
    feats[np.arange(q), gold, bm] += np.where(np.arange(q) % 2, 3.0, 0.0)  # bm25 finds the odd queries' gold
    feats[np.arange(q), gold, mean] += np.where(np.arange(q) % 2, 0.0, 3.0)  # mean the even ones'
    w, fig = fit_weights(feats, gold)
    assert w["bm25"] > 0 and w["mean"] > 0 and w["ltm"] == 0.0
    fused = metrics(feats, gold, w)
    assert round(fused["mrr"], 9) == fig["mrr"] > max(metrics(feats, gold, {s: 1.0})["mrr"] for s in SIGNALS)


def test_signal_pool_features_are_z_normalised_and_links_typed():
    c = _corpus()
    ids = sorted(c["id"])
    texts, titles = dict(zip(c["id"], c["text"])), dict(zip(c["id"], c["title"]))
    means = np.eye(len(ids), 8, dtype=np.float32) + 0.1
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    pool = SignalPool(ids, texts, titles, means)
    rows, f = pool.features("cite0")
    assert f.shape == (len(ids) - 1, len(SIGNALS)) and pool.row["cite0"] not in set(rows.tolist())
    assert np.allclose(f[:, 0], znorm(pool.bm25.scores(texts["cite0"])[rows]))
    assert pool.kinds("cite0", "law0") == "implements" and f[:, 3].sum() >= 1
    laws = sorted(c.loc[c["level"] == "法律", "id"])
    fq, g = query_features(pool, ["cite0", "cite1"], ["law0", "law1"], laws)
    assert metrics(fq, g, {"link": 1.0, "bm25": 0.25})["recall@1"] == 1.0  # raw texts still cite the parent


_TOPICS = ("水资源取水许可", "森林防火巡护", "道路运输车辆", "食品摊贩登记", "文物保护修缮", "电梯安全维保")
_PLACES = ("甲市", "乙市", "丙市")


def _neighbour_corpus() -> pd.DataFrame:
    """Six laws whose texts share no word with the topics of the regulations implementing them (as a general
    law and its specific regulations), three regulations per law on one topic, each citing its law."""
    rows = []
    for i, topic in enumerate(_TOPICS):
        law = f"中华人民共和国第{i}号法"
        rows.append({"id": f"law{i}", "title": law, "level": "法律", "category": "法律", "date": "2020-01-01",
                     "text": f"第一条 为了规范管理，制定本法。第二条 本法第{i}编适用于有关活动。第三条 国务院负责实施本法。"})
        for j, place in enumerate(_PLACES):
            rows.append({"id": f"reg{i}_{j}", "title": f"{place}{topic}条例", "level": "地方性法规",
                         "category": "地方性法规", "date": "2021-01-01",
                         "text": f"第一条 根据《{law}》，结合本市实际，制定本条例。第二条 本条例所称{topic}，是指{topic}"
                                 f"有关活动。第三条 {place}{topic}主管部门负责{topic}工作。第四条 违反{topic}规定的，责令改正。"})
    return _read(rows)


def test_knn_link_votes_for_what_the_nearest_documents_implement():
    c = _neighbour_corpus()
    ids = list(c["id"])
    texts = stripped_texts(c, pd.DataFrame({"a": ["reg0_0"], "law": ["中华人民共和国第0号法"]}))
    assert "第0号法" not in texts["reg0_0"]  # the query no longer names what it implements
    pool = SignalPool(ids, texts, dict(zip(c["id"], c["title"])), np.eye(len(ids), 4, dtype=np.float32))
    rows, f = pool.features("reg0_0")
    knn = dict(zip((ids[r] for r in rows), f[:, SIGNALS.index("knn_link")]))
    assert knn["law0"] == 1.0 and sum(v > 0 for v in knn.values()) >= 1  # its two same-topic neighbours vote law0
    bm = dict(zip((ids[r] for r in rows), f[:, SIGNALS.index("bm25")]))
    assert bm["law0"] <= max(bm[f"law{i}"] for i in range(1, 6))  # the text alone does not single out the parent
    assert f[:, SIGNALS.index("link")][rows == pool.row["law0"]].item() == 0.0  # no direct link left
    _, f1 = pool.features("reg1_1")  # intact: its own link, and the votes of reg1_0 / reg1_2
    assert f1[:, SIGNALS.index("knn_link")].max() == 1.0
    plain = SignalPool(ids, {d: t.split("。")[-2] for d, t in texts.items()}, {}, np.eye(len(ids), 4, dtype=np.float32))
    _, f2 = plain.features("reg0_0")  # no document implements anything (no title known): no vote
    assert not f2[:, SIGNALS.index("knn_link")].any()


def test_version_pool_fit_weighs_the_neighbours_where_the_text_alone_cannot_find_the_parent():
    from docmatch.fused_eval import run_version_pool

    c = _neighbour_corpus()
    pairs = citation_pairs(c)
    cite = pairs.groupby("b").head(1).reset_index(drop=True)  # one stripped regulation per law, split by law
    res = run_version_pool(c, cite)
    assert res["pool"] == len(c) and res["weights"]["knn_link"] > 0
    for split in ("train", "test"):
        assert res[split]["knn_link"]["recall@1"] == 1.0 > res[split]["bm25"]["recall@1"]
        assert res[split]["fused"]["recall@1"] == 1.0


def test_weights_fitted_before_knn_link_rank_as_they_did():
    from docmatch.fusion import weight_vector

    c = _neighbour_corpus()
    ids = list(c["id"])
    pool = SignalPool(ids, dict(zip(c["id"], c["text"])), dict(zip(c["id"], c["title"])),
                      np.eye(len(ids), 4, dtype=np.float32))
    rows, f = pool.features("reg2_0")
    old = {"bm25": 0.75, "mean": 0.25, "ltm": 0.0, "link": 1.0}  # a part's weights from before the fifth signal
    assert f[:, SIGNALS.index("knn_link")].any() and f[:, SIGNALS.index("cited")].any()
    assert np.allclose(f @ weight_vector(old), 0.75 * f[:, 0] + 0.25 * f[:, 1] + f[:, 3])


def test_cited_is_the_log_count_of_documents_whose_basis_each_candidate_is():
    c = _neighbour_corpus()
    extra = c[c["id"].str.startswith("reg0_")].assign(id=lambda d: d["id"] + "b", title=lambda d: d["title"] + "（二）")
    c = pd.concat([c, extra], ignore_index=True)  # law0 is now the basis of twice as many regulations
    ids = list(c["id"])
    pool = SignalPool(ids, dict(zip(c["id"], c["text"])), dict(zip(c["id"], c["title"])),
                      np.eye(len(ids), 4, dtype=np.float32))
    per_law = len(_PLACES)
    for query in ("reg3_1", "law4"):  # a prior of the candidate: the same order whatever the query
        rows, f = pool.features(query)
        cited = dict(zip((ids[r] for r in rows), f[:, SIGNALS.index("cited")]))
        assert cited["law0"] > cited["law1"] > cited["reg1_0"]  # named by 2n, by n, by none
        assert cited["law1"] == cited["law2"] and cited["reg1_0"] == cited["reg2_2"]
        raw = np.log1p([2 * per_law if d == "law0" else per_law if d.startswith("law") else 0 for d in cited])
        assert np.allclose(list(cited.values()), znorm(raw))


def test_the_fit_scores_ltm_only_where_serving_does():
    """Serving (docmatch.fused_serve.FusedRanker) scores LTM-B on the depth documents nearest by mean vector and
    gives the rest its lowest logit; the fit's scorer (docmatch.fused_fit._on_known with _nearest) does the same,
    so a gold document past the depth is not ranked by a logit serving never computes."""
    from docmatch.fused_fit import _nearest, _on_known

    rng = np.random.default_rng(0)
    ids = [f"d{i}" for i in range(8)]
    means = rng.normal(size=(8, 4))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    row = {d: i for i, d in enumerate(ids)}
    cands = ids[1:]
    near = _nearest(means, row, "d0", cands, depth=3)
    by_cos = np.argsort(-(means[1:] @ means[0]), kind="stable")[:3]
    assert near == set(by_cos.tolist())
    assert _nearest(means, row, "d0", cands, depth=10) == set(range(7))
    seen = []

    def ltm(a, cs):  # a deterministic stand-in for LTM-B's logits: 10 + position, to see which were asked for
        seen.append(list(cs))
        return np.array([10.0 + cands.index(c) for c in cs])

    mats = {d: None for d in ids}
    s = _on_known(ltm, mats, lambda a, c: _nearest(means, row, a, c, depth=3))("d0", cands)
    assert sorted(seen[-1]) == sorted(cands[k] for k in near)
    far = [k for k in range(7) if k not in near]
    assert all(s[k] == min(s) for k in far) and all(s[k] == 10.0 + k for k in near)
