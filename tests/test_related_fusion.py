"""The fused related ranking (SPEC §12): typed links, the citation-stripped split and the weight fit."""
from __future__ import annotations

import numpy as np
import pandas as pd

from docmatch.citations import citation_pairs, cited_parent, stripped_texts
from docmatch.fusion import SIGNALS, SignalPool, fit_weights, metrics, query_features, znorm
from docmatch.links import title_keys, typed_links
from tests.test_related import corpus_rows


def _corpus() -> pd.DataFrame:
    """The title-pattern test corpus plus regulations citing a law only in their text (titles name no law)."""
    rows = corpus_rows()
    laws = [r for r in rows if r["level"] == "法律"]
    for i, law in enumerate(laws[:6]):
        rows.append({"id": f"cite{i}", "title": f"某市第{i}号管理条例", "level": "地方性法规", "category": "地方性法规",
                     "date": "2022-01-01",
                     "text": f"第一条 根据《{law['title']}》等法律，结合本市实际，制定本条例。{law['text']}"
                             f"第九条 违反本条例的，依照《{law['title']}》处罚。"})
    from docmatch.pairs import read_corpus  # one title a document, as the pipeline reads a corpus
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.jsonl"
        p.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
        return read_corpus(p)


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
