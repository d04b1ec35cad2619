"""Related policies on the answer page and its API (SPEC §12): ``GET /related`` ranks as the version's LTM-B part
does, refuses hostile ids and bad ``k`` with a clear 400, says why with a 404 when the serving version has no
part, follows a version switch, a rollback and a rebuilt part; the page lists a source's related policies,
escaped, linked only for http(s); a warm lookup's time on a tiny version."""
from __future__ import annotations

import json
import shutil
import statistics
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from tests.test_related import corpus_rows

SCRIPT_TITLE = '上海市<script>alert("x")</script>宣誓办法'


def tiny_docs(drop: tuple[str, ...] = ()):
    """The 32 documents of ``tests.test_related`` as a ``documents_clean`` frame with external ids and links:
    ``law0`` an https URL, ``law1`` a ``javascript:`` one, ``other`` a script in its title and URL."""
    import pandas as pd

    docs = pd.DataFrame(corpus_rows()).rename(columns={"id": "doc_id"})
    docs = docs[~docs["doc_id"].isin(drop)].reset_index(drop=True)
    docs["url"] = docs["doc_id"].map({"law0": "https://flk.npc.gov.cn/detail?id=law0&x=1",
                                      "law1": "javascript:alert(document.domain)",
                                      "other": " \x01JaVaScRiPt:alert(1)"})
    docs.loc[docs["doc_id"] == "other", "title"] = SCRIPT_TITLE
    docs = docs.assign(source="国务院", citation=None, external_id="EXT-" + docs["doc_id"],
                       n_chars=docs["text"].str.len(), pubtime=pd.Timestamp("2021-01-01"))
    return docs[["doc_id", "text", "title", "source", "url", "citation", "n_chars", "external_id", "pubtime"]]


def publish(data: Path, root: Path, tok, drop: tuple[str, ...] = ()) -> Path:
    """Publish the next index version of :func:`tiny_docs` (tiny BERT, 120/30 chunks) into ``data``."""
    from retrieval.chunks import ChunkConfig
    from retrieval.stages import index_stage
    from tests.retrieval_builders import save_tiny_bert, write_clean

    enc = root / "enc"
    if not (enc / "config.json").is_file():
        save_tiny_bert(enc)
    clean = write_clean(tiny_docs(drop), data / "documents_clean")
    out = index_stage(clean, enc, data / "index", ChunkConfig(120, 30), tokenizer=tok)
    return data / "index" / out["version"]


def install_related(vdir: Path, model_file: Path) -> dict:
    """Install ``model_file`` as the version's ``related`` part (what the index stage does at publication;
    a refused file leaves the reason in the part's record)."""
    from retrieval.parts import PartSource, install_part, version_identity
    from storage import atomic_write_text

    manifest = json.loads((vdir / "manifest.json").read_text())
    rec = install_part(vdir, PartSource("related", "related.json", model_file, requires=("encoder_model_id",)),
                       version_identity(manifest))
    manifest["parts"]["related"] = rec
    atomic_write_text(vdir / "manifest.json", json.dumps(manifest))
    return rec


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """``data`` with ``index/v1`` holding a trained ``related`` part; the model file; the segmenter."""
    from docmatch.ltm import LTMConfig
    from docmatch.pairs import PairConfig, derive_pairs, read_corpus, write_pairs
    from docmatch.stage import build_related_part
    from docmatch.train import TrainConfig
    from retrieval.sparse import make_tokenizer

    root = tmp_path_factory.mktemp("relweb")
    tok = make_tokenizer("auto")
    vdir = publish(root / "data", root, tok)
    corpus = root / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in corpus_rows()), encoding="utf-8")
    write_pairs(derive_pairs(read_corpus(corpus), PairConfig(seed=3)), root / "pairs.jsonl")
    figs = build_related_part(vdir, root / "pairs.jsonl", root / "work", cfg=LTMConfig(hidden=16, heads=2,
                              max_segments=2), tcfg=TrainConfig(epochs=2, patience=1), log=lambda *_: None)
    assert "file" in install_related(vdir, Path(figs["path"]))
    return {"root": root, "data": root / "data", "vdir": vdir, "model": Path(figs["path"]), "tok": tok}


def _client(data: Path, scorer=None):
    from fastapi.testclient import TestClient

    from answers import Answerer
    from answers.web import create_app

    return TestClient(create_app(Answerer(data, scorer=scorer)), raise_server_exceptions=False)


def _pairs(rows) -> list[tuple[str, float]]:
    return [(r["doc_id"], round(r["score"], 9)) for r in rows]


def test_api_ranks_as_the_versions_model_and_refuses_bad_input(site):
    from docmatch import load

    c = _client(site["data"])
    rel = load(site["vdir"])
    r = c.get("/related", params={"doc_id": "reg0-0", "k": 5})
    assert r.status_code == 200 and r.headers["content-security-policy"].startswith("default-src 'none'")
    got = r.json()
    assert got["doc_id"] == "reg0-0" and got["version"] == "v1" and got["external_id"] == "EXT-reg0-0"
    assert _pairs(got["related"]) == _pairs(rel.related("reg0-0", 5)) and len(got["related"]) == 5
    scores = [h["score"] for h in got["related"]]
    assert scores == sorted(scores, reverse=True) and "reg0-0" not in {h["doc_id"] for h in got["related"]}
    assert all(h["external_id"] == "EXT-" + h["doc_id"] and h["title"] == rel.title[h["doc_id"]]
               for h in got["related"])
    every = c.get("/api/related", params={"external_id": "EXT-reg0-0", "k": 31}).json()["related"]
    assert _pairs(every) == _pairs(rel.related("reg0-0", 31)) and len(every) == 31  # all others, ranked
    urls = {h["doc_id"]: h.get("url") for h in every}
    assert urls["law0"] == "https://flk.npc.gov.cn/detail?id=law0&x=1" and urls["law1"] is None
    assert urls["other"] is None and {h["doc_id"]: h["title"] for h in every}["other"] == SCRIPT_TITLE
    bad = {"k=0": ({"doc_id": "law0", "k": 0}, "k must be in 1..50"), "k=x": ({"doc_id": "law0", "k": "x"}, "integer"),
           "k=51": ({"doc_id": "law0", "k": 51}, "1..50"), "long": ({"doc_id": "x" * 10_000}, "over 256"),
           "ctrl": ({"doc_id": "law0\x00"}, "control characters"), "bidi": ({"doc_id": "law\u202e0"}, "control"),
           "unknown": ({"doc_id": "nope"}, "no document with doc_id 'nope' in index v1"),
           "ext": ({"external_id": "law0"}, "no document with external_id"),
           "both": ({"doc_id": "law0", "external_id": "EXT-law0"}, "exactly one"), "none": ({}, "exactly one")}
    for name, (params, want) in bad.items():
        r = c.get("/related", params=params)
        assert r.status_code == 400 and want in r.json()["error"], (name, r.text)
        assert len(r.text) < 300 and str(site["root"]) not in r.text and "Traceback" not in r.text


def test_warm_related_lookup_is_fast(site):
    from answers.related_view import RelatedViews

    assert RelatedViews(site["data"]).warm() and not RelatedViews(site["root"] / "nowhere").warm()
    c = _client(site["data"])
    ids = [f"law{i}" for i in range(10)] + [f"reg{i}-{j}" for i in range(10) for j in (0, 1)]
    c.get("/related", params={"doc_id": "law0"})  # loads the part once
    secs = []
    for d in ids:
        t = time.perf_counter()
        assert c.get("/related", params={"doc_id": d, "k": 10}).status_code == 200
        secs.append(time.perf_counter() - t)
    print(f"warm /related over {len(ids)} documents: p50 {statistics.median(secs):.4f} s, max {max(secs):.4f} s")
    assert statistics.median(secs) <= 0.2


def test_switch_rollback_and_rebuilt_part_serve_their_own_model(site, tmp_path):
    import torch

    from docmatch.ltm import LTMB, load_file, save
    from retrieval.versions import rollback

    data = tmp_path / "data"
    shutil.copytree(site["data"], data)
    c = _client(data)
    before = c.get("/related", params={"doc_id": "law2"}).json()["related"]
    v2 = publish(data, site["root"], site["tok"], drop=("reg9-1",))  # the next version: no related part
    assert v2.name == "v2"
    r = c.get("/related", params={"doc_id": "law2"})
    assert r.status_code == 404 and "no related part" in r.json()["error"] and "v2" in r.json()["error"]
    saved = load_file(site["model"])  # a part fitted with another encoder: refused at installation, said so
    wrong = tmp_path / "elsewhere" / "related.json"
    wrong.parent.mkdir()
    save(saved.model, wrong, {"provenance": {**saved.info["provenance"], "encoder_model_id": "other-encoder"}})
    assert "refused" in install_related(v2, wrong)
    r = c.get("/related", params={"doc_id": "law2"})
    assert r.status_code == 404 and "fitted with another" in r.json()["error"]
    assert str(tmp_path) not in r.text and "related.json" in r.text
    rollback(data / "index", "v1")
    assert _pairs(c.get("/related", params={"doc_id": "law2"}).json()["related"]) == _pairs(before)
    torch.manual_seed(7)  # v1 rebuilt with another model: a new manifest, so the old model is not served
    other = tmp_path / "other.json"
    save(LTMB(saved.model.cfg), other, {**saved.info, "fusion": {"weights": {"ltm": 1.0}}})  # LTM-B alone
    install_related(data / "index" / "v1", other)
    after = c.get("/related", params={"doc_id": "law2"}).json()["related"]
    from docmatch import load

    assert _pairs(after) == _pairs(load(data / "index" / "v1").related("law2", 10)) and _pairs(after) != _pairs(before)


class _Page(HTMLParser):
    """Links, script elements and the related lists' item texts of a page."""

    def __init__(self):
        super().__init__()
        self.hrefs, self.scripts, self.items, self._in = [], 0, [], 0

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"
        self.hrefs += [v for k, v in attrs if k == "href"]
        if tag == "ol" and ("class", "related") in attrs:
            self._in = 1
        elif tag == "li" and self._in:
            self.items.append("")

    def handle_endtag(self, tag):
        self._in = 0 if tag == "ol" else self._in

    def handle_data(self, data):
        if self._in and self.items:
            self.items[-1] += data


def test_page_lists_related_policies_beside_the_source_escaped(site):
    from answers.related_view import render_related
    from tests.test_hostile_serving import _linear_scorer

    c = _client(site["data"], scorer=_linear_scorer())
    r = c.get("/", params={"q": "水资源开发利用和节约保护有哪些规定？", "k": 3})
    assert r.status_code == 200 and r.headers["content-security-policy"].startswith("default-src 'none'")
    p = _Page()
    p.feed(r.text)
    assert p.scripts == 0 and r.text.count('<ol class="related">') == 3  # each of the 3 answers' sources
    answer = r.text[r.text.index('id="answer"'):r.text.index("</div>", r.text.index('id="answer"'))]
    assert "相关政策 (related policies)" in answer and answer.index("来源") < answer.index("相关政策")
    assert len(p.items) == 15 and all(h.startswith(("https://", "/")) or h == "" for h in p.hrefs)
    html = render_related([{"doc_id": "a", "title": SCRIPT_TITLE, "score": 0.5, "url": "javascript:alert(1)"},
                           {"doc_id": "b", "title": "水法", "score": 0.25, "url": 'https://x.cn/?a=1&b="2"'}])
    assert "<script>" not in html and "&lt;script&gt;" in html and "javascript:" not in html
    assert 'href="https://x.cn/?a=1&amp;b=&quot;2&quot;"' in html and "(0.50)" in html
    none = _client(site["root"] / "nowhere").get("/related", params={"doc_id": "law0"})
    assert none.status_code == 503 and none.json()["error"] == "index not available"


@pytest.mark.slow
def test_page_in_chromium_shows_related_policies_beside_the_source(tmp_path):
    import torch

    from ops.answer_page import ask_in_browser, served
    from ops.ui_check import UICheckError, find_chromium
    from docmatch.ltm import LTMB, LTMConfig, save
    from retrieval.parts import version_identity
    from retrieval.sparse import make_tokenizer
    from tests.answer_builders import build_data_dir
    from tests.retrieval_builders import TOPICS, policy_docs

    try:
        find_chromium()
    except UICheckError as exc:
        pytest.skip(str(exc))
    docs = policy_docs()
    docs["url"] = [f"https://www.gov.cn/zhengce/d{i}.htm" for i in range(8)]
    docs.loc[1, "url"], docs.loc[3, "title"] = "javascript:alert(document.domain)", SCRIPT_TITLE
    data = build_data_dir(tmp_path, make_tokenizer("auto"), docs=docs)
    vdir = data / "index" / "v1"
    torch.manual_seed(0)  # an untrained LTM-B over the version's vectors: the page's plumbing, not its accuracy
    save(LTMB(LTMConfig(dim=32, hidden=16, heads=2, max_segments=2)), tmp_path / "related.json",
         {"provenance": version_identity(json.loads((vdir / "manifest.json").read_text()))})
    assert "file" in install_related(vdir, tmp_path / "related.json")
    with served(data) as url:
        got = ask_in_browser(url, ["生态环境工作现就哪些方面提出意见？"], tmp_path / "page.png")[0]
    titles = {t for t, *_ in TOPICS} - {TOPICS[3][0]} | {SCRIPT_TITLE}
    assert got["status"] == 200 and got["source"] == TOPICS[4][0] and len(got["related"]) == 5
    shown = [t.rsplit(" (", 1)[0] for t in got["related"]]
    assert set(shown) <= titles - {TOPICS[4][0]}  # other documents, the script title as text
    for title, href in zip(shown, got["related_hrefs"]):
        i = next(j for j, t in enumerate(docs["title"]) if t == title)
        assert href == (None if i == 1 else docs.loc[i, "url"])
    assert (tmp_path / "page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
