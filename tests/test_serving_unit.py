"""The index version is the serving unit (SPEC §7, §9): its texts and answer scorer are parts of the version,
named with their sha256 in its manifest; a rollback restores every one of them, and a tampered part is refused
with one clear error."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.answer_builders import build_data_dir, publish
from tests.conftest import REPO
from tests.retrieval_builders import policy_docs

QUESTION = "职业教育工作现就哪些方面提出意见？"


@pytest.fixture(scope="module")
def tok():
    from retrieval.sparse import make_tokenizer

    return make_tokenizer("auto")


def _plain(res: dict) -> str:
    return json.dumps({k: v for k, v in res.items() if k != "seconds"}, ensure_ascii=False, sort_keys=True)


def _changed_docs():
    """The documents with the answering one rewritten (a sentence in front shifts every offset)."""
    docs = policy_docs()
    docs.loc[3, "text"] = "本意见自印发之日起施行，此前规定与本意见不一致的，以本意见为准。" + docs.loc[3, "text"]
    return docs


@pytest.mark.slow
def test_rollback_restores_texts_and_scorer_byte_identical_and_tampering_is_refused(tmp_path, tok):
    from answers import Answerer, ScorerMissingError
    from retrieval.parts import PartError
    from retrieval.versions import read_manifest

    data = build_data_dir(tmp_path, tok)
    man = read_manifest(data / "index", "v1")
    assert set(man["parts"]) == {"texts", "answer_scorer"}
    assert man["parts"]["texts"]["rows"] == 8 and len(man["parts"]["answer_scorer"]["sha256"]) == 64
    answerer = Answerer(data, tokenizer=tok)
    before = _plain(answerer.answer(QUESTION, 3))

    # v2: other documents and another scorer (same provenance, another threshold and calibration)
    scorer = json.loads((tmp_path / "scorer.json").read_text(encoding="utf-8"))
    scorer.update(threshold=0.95, calib_a=0.5)
    (tmp_path / "scorer2.json").write_text(json.dumps(scorer), encoding="utf-8")
    assert publish(data, tmp_path / "models" / "finetune", tok, tmp_path / "scorer2.json", _changed_docs())[
        "version"] == "v2"
    v2 = answerer.answer(QUESTION, 3)
    assert v2["version"] == "v2" and v2["threshold"] == 0.95 and _plain(v2) != before
    top = v2["answers"][0]
    text = answerer.store().text[top["doc_id"]]
    assert text[top["start"]:top["end"]] == top["text"] and text.startswith("本意见自印发之日起施行")

    listed = [json.loads(x) for x in _versions("list", data=data).stdout.splitlines()]
    assert [(r["version"], r["serving"], sorted(r["parts"])) for r in listed] == [
        ("v1", False, ["answer_scorer", "texts"]), ("v2", True, ["answer_scorer", "texts"])]
    bad = _versions("rollback", "../v1", data=data)
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and "not an index version" in bad.stderr
    assert _versions("rollback", "v1", data=data).stdout.strip() == "serving v1"
    assert _plain(answerer.answer(QUESTION, 3)) == before  # the same process, the cached v1
    assert _plain(Answerer(data, tokenizer=tok).answer(QUESTION, 3)) == before  # a fresh one

    # a part changed after publication is refused, by name
    pinned = data / "index" / "v1" / "answer-scorer.json"
    kept = pinned.read_bytes()
    pinned.write_text(json.dumps(scorer), encoding="utf-8")
    with pytest.raises(ScorerMissingError, match="answer_scorer file answer-scorer.json changed since"):
        Answerer(data, tokenizer=tok).answer(QUESTION, 3)
    pinned.write_bytes(kept)
    texts = data / "index" / "v1" / "texts.parquet"
    texts.write_bytes(texts.read_bytes()[:-20])
    with pytest.raises(PartError, match="texts file texts.parquet changed since"):
        Answerer(data, tokenizer=tok).check()
    out = subprocess.run([sys.executable, "-m", "flows.ask", QUESTION, "--data-dir", str(data)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    assert "changed since the version was published" in out.stderr


def _versions(*args, data):
    return subprocess.run([sys.executable, "-m", "flows.versions", *args, "--data-dir", str(data)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_an_index_rebuilt_under_the_same_name_is_loaded_anew(tmp_path, tok):
    """Caches of loaded versions are keyed by the version's identity, not its name."""
    import shutil

    from answers import Answerer

    data = build_data_dir(tmp_path, tok)
    answerer = Answerer(data, tokenizer=tok)
    first = answerer.answer(QUESTION, 1)
    shutil.rmtree(data / "index")
    publish(data, tmp_path / "models" / "finetune", tok, tmp_path / "scorer.json", _changed_docs())
    again = answerer.answer(QUESTION, 1)
    assert again["version"] == first["version"] == "v1"
    assert answerer.store().text["d3"].startswith("本意见自印发之日起施行")
    assert again["answers"][0]["start"] != first["answers"][0]["start"] or again["answers"][0]["doc_id"] != "d3"


def test_parts_refuse_a_model_fitted_with_another_encoder_or_segmenter(tmp_path):
    from retrieval.parts import PartError, PartSource, install_part, part_path, version_identity

    man = {"version": "v1", "model_id": "abc", "sparse": {"backend": "jieba", "segmenter_model_id": "s1"}}
    ident = version_identity(man)
    assert ident == {"encoder_model_id": "abc", "segmenter": "jieba:s1"}
    src = tmp_path / "m.json"
    src.write_text(json.dumps({"info": {"provenance": {"encoder_model_id": "abc", "segmenter": "jieba:s2"}}}))
    vdir = tmp_path / "v1"
    vdir.mkdir()
    rec = install_part(vdir, PartSource("answer_scorer", "s.json", str(src)), ident)
    assert "segmenter 'jieba:s2' (this version: 'jieba:s1')" in rec["refused"] and not (vdir / "s.json").exists()
    src.write_text(json.dumps({"info": {"provenance": {"encoder_model_id": "abc", "segmenter": "jieba:s1"}}}))
    rec = install_part(vdir, PartSource("answer_scorer", "s.json", str(src)), ident)
    assert part_path(vdir, {**man, "parts": {"answer_scorer": rec}}, "answer_scorer") == vdir / "s.json"
    with pytest.raises(PartError, match="has no reranker part"):
        part_path(vdir, {**man, "parts": {"answer_scorer": rec}}, "reranker")
    for bad in ("../m.json", "/etc/passwd"):  # a part file is a file of the version folder, never a path out
        with pytest.raises(PartError, match="missing"):
            part_path(vdir, {**man, "parts": {"x": {**rec, "file": bad}}}, "x")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    with pytest.raises(PartError, match="not readable JSON"):
        install_part(vdir, PartSource("answer_scorer", "s.json", str(tmp_path / "deep.json")), ident)


def test_the_version_pointer_is_read_in_one_place():
    """``CURRENT`` is named (and so read or written) only by the pointer module and the version store that
    writes it; every other module asks them (``retrieval.versions.current_version``)."""
    import ast

    allowed = {"storage/pointer.py"}
    found = []
    for pkg in ("storage", "crawler", "corpus", "model", "retrieval", "answers", "flows", "tasks", "ops"):
        for f in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value == "CURRENT":
                    found.append(str(f.relative_to(REPO)))
    assert set(found) == allowed, found


@pytest.mark.slow
def test_a_reranker_is_a_pinned_part_of_the_query_pipeline(tmp_path, tok):
    """The reranker slot: a version published with a reranker part searches through it (flows.search too); a
    version without one searches as before; ``depth`` is capped by the search's own limit."""
    from retrieval.bundle import load_bundle
    from retrieval.hits import SearchHit
    from retrieval.pipeline import QueryPipeline
    from retrieval.query import QueryLimits
    from retrieval.rerankers import WindowBM25Reranker, reranker_from_json
    from retrieval.stages import index_stage
    from retrieval.chunks import ChunkConfig
    from tests.retrieval_builders import save_tiny_policybert, write_clean

    clean = write_clean(policy_docs(), tmp_path / "data" / "documents_clean")
    ckpt = save_tiny_policybert(tmp_path / "ckpt", seed=1)
    index = tmp_path / "data" / "index"
    index_stage(clean, ckpt, index, ChunkConfig(max_chars=120, overlap=30), tokenizer=tok)
    plain = load_bundle(index, tokenizer=tok)
    assert not plain.pipeline.rerankers
    query = "养老托育第7项要完善什么？"
    base = plain.pipeline.search(query, 10)
    assert base == plain.retriever.search(query, 10)  # no reranker: the search itself

    cfg = tmp_path / "reranker.json"
    cfg.write_text(json.dumps({"kind": "bm25-window", "window": 300, "weight": 1.0, "depth": 20}))
    index_stage(clean, ckpt, index, ChunkConfig(max_chars=120, overlap=30), tokenizer=tok, reranker=cfg)
    b = load_bundle(index, tokenizer=tok)
    assert b.version == "v2" and b.manifest["parts"]["reranker"]["sha256"]
    got = b.pipeline.search(query, 10)
    assert all(isinstance(h, SearchHit) and h.rerank_score is not None for h in got)  # typed through the reranker
    # weight 1: ordered by the window BM25 alone, which is the kernel over the hand-built windows
    r = b.pipeline.rerankers[0]
    wins = r.windows(got)
    texts = dict(zip(b.texts["doc_id"], b.texts["text"]))
    assert wins[0] == texts[got[0].doc_id][max(0, got[0].start - 300):got[0].end + 300]
    scores = [h.rerank_features["window_bm25"] for h in got]
    assert scores == sorted(scores, reverse=True) and scores[0] > 0
    assert {h.chunk_id for h in got} <= {h.chunk_id for h in b.retriever.search(query, 20)}
    out = subprocess.run([sys.executable, "-m", "flows.search", query, "--data-dir", str(tmp_path / "data"), "-k",
                          "3"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert [json.loads(x)["rerank_score"] is not None for x in out.stdout.splitlines()] == [True] * 3

    capped = QueryPipeline(_Limited(b.retriever, QueryLimits(max_k=5)), (r,))
    assert len(capped.search(query, 3)) == 3  # asks the searcher for 5, not its depth of 20
    with pytest.raises(ValueError, match="weight = 2"):
        reranker_from_json('{"kind": "bm25-window", "weight": 2}', {}, tok[0])
    with pytest.raises(ValueError, match="kind must be"):
        reranker_from_json('{"kind": "colbert"}', {}, tok[0])
    with pytest.raises(ValueError, match="needs its part file"):
        reranker_from_json('{"kind": "cross-encoder"}', {}, tok[0])
    assert WindowBM25Reranker({}, tok[0]).rerank(query, []) == []


class _Limited:
    """A searcher with a smaller ``k`` limit over a real one (the searcher role's contract)."""

    def __init__(self, inner, limits):
        self.inner, self.limits = inner, limits

    def search(self, query, k, mode="hybrid", tokens=None):
        assert k <= self.limits.max_k
        return self.inner.search(query, k, mode=mode, tokens=tokens)


def test_one_bm25_kernel():
    """BM25 is scored by bm25s over the index (retrieval/term_counts.py builds it) and, for texts outside the
    index (a question's sentences, a reranker's windows), by :func:`retrieval.sparse.bm25_scores`; the only other
    formula is the PolicySM char-level baseline (model/baselines.py, documented as a baseline)."""
    import re

    idf = re.compile(r"df\s*\+\s*0\.5|k\s*\+\s*0\.5\)\)")  # BM25's idf, ln(1 + (N - df + 0.5) / (df + 0.5))
    assert idf.search("math.log(1 + (n - df + 0.5) / (df + 0.5))")
    found = sorted(str(f.relative_to(REPO)) for pkg in ("storage", "crawler", "corpus", "model", "retrieval", "answers",
                                                        "flows", "tasks", "ops", "bench")
                   for f in (REPO / pkg).rglob("*.py")
                   if idf.search("\n".join(line for line in f.read_text(encoding="utf-8").splitlines()
                                             if not line.lstrip().startswith(('"', "#")))))
    assert found == ["model/baselines.py", "retrieval/sparse.py"], found
