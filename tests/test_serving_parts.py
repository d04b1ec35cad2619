"""Serving parts declared once (SPEC §7, §9; retrieval.serving_parts): a part is one declaration, and the index
stage's inputs, the part written into a version, its sha256 check at load and the loader all follow from it —
shown with a toy part declared in this file alone."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from retrieval.serving_parts import ServingPart
from tests.retrieval_builders import policy_docs


def load_toy(bundle, path: Path) -> dict:
    """The toy part: its JSON, with the version it was loaded from."""
    return {**json.loads(path.read_text(encoding="utf-8")), "loaded_from": bundle.version}


TOY = ServingPart("toy_notes", "metadata", "toy-notes.json", setting="toy_notes",
                  load="tests.test_serving_parts:load_toy")
TOY_PARTS = (TOY,)


class FirstSentenceReader:
    """A reader part of this file: reads each candidate document's first sentence (a fixed rule, not a model),
    with its part file's threshold."""

    reranker = None

    def __init__(self, threshold: float, version: str):
        self.threshold, self.version = threshold, version

    def read(self, question: str, prep, k: int, passage_chars: int = 150) -> list:
        from answers.render import Answer

        out = []
        for rank, d in enumerate(prep.docs[:k], 1):
            a, b = d.entry.sentences[0]
            out.append(Answer(d.entry.text[a:b], 1.0 / rank, a, b, d.doc_id, version=self.version, doc_rank=rank))
        return out


def load_first_sentence_reader(bundle, path: Path) -> FirstSentenceReader:
    return FirstSentenceReader(json.loads(path.read_text(encoding="utf-8"))["threshold"], bundle.version)


TOY_READER = ServingPart("toy_reader", "reader", "toy-reader.json", setting="toy_reader",
                         load="tests.test_serving_parts:load_first_sentence_reader")
TOY_READER_PARTS = (TOY_READER,)


def test_declarations_are_checked_and_every_library_declares_its_own():
    from retrieval.contracts import INDEX
    from retrieval.serving_parts import ROLES, declared, index_inputs, serving_parts

    parts = serving_parts()
    names = [p.name for p in parts]  # registry order: retrieval's, then docmatch's, then answers' own
    assert names[:4] == ["texts", "reranker", "policy_records", "related"] and len(set(names)) == len(names)
    assert names.index("answer_reranker") < names.index("answer_scorer")  # a scorer may pin the cross-encoder
    assert {p.role for p in parts} <= set(ROLES) and declared("answer_scorer").role == "reader"
    assert INDEX.inputs == INDEX.files == index_inputs(parts)  # the stage's inputs are the declarations'
    assert "answer_questions" in INDEX.files and "related_corpus" in INDEX.files
    with pytest.raises(ValueError, match="unknown role"):
        ServingPart("x", "ranker", "x.json")
    with pytest.raises(ValueError, match="plain file name"):
        ServingPart("x", "metadata", "../x.json")
    with pytest.raises(ValueError, match="declared twice"):
        serving_parts(("retrieval.serving_parts:PARTS", "retrieval.serving_parts:PARTS"))
    with pytest.raises(KeyError, match="no serving part"):
        declared("nope")


def test_a_part_declared_in_one_file_is_written_checked_and_loaded(tmp_path, monkeypatch):
    """The toy part reaches a published version through its declaration alone: installed from its setting,
    recorded with its sha256, refused at load once changed, loaded by the one loader."""
    import retrieval.serving_parts as sp
    from retrieval.bundle import load_bundle
    from retrieval.chunks import ChunkConfig
    from retrieval.parts import PartError
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_stage
    from tests.retrieval_builders import save_tiny_policybert, write_clean

    monkeypatch.setattr(sp, "REGISTRY", (*sp.REGISTRY, "tests.test_serving_parts:TOY_PARTS"))
    assert "toy_notes" in sp.index_inputs(sp.serving_parts())
    notes = tmp_path / "notes.json"
    notes.write_text(json.dumps({"note": "玩具部件"}, ensure_ascii=False), encoding="utf-8")
    tok = make_tokenizer("auto")
    clean = write_clean(policy_docs(), tmp_path / "data" / "documents_clean")
    index = tmp_path / "data" / "index"
    res = index_stage(clean, save_tiny_policybert(tmp_path / "ckpt", seed=1), index,
                      ChunkConfig(max_chars=120, overlap=30), tokenizer=tok, toy_notes=notes)
    rec = res["serving_parts"]["toy_notes"]
    assert rec["file"] == "toy-notes.json" and len(rec["sha256"]) == 64
    b = load_bundle(index, tokenizer=tok)
    assert b.load(TOY) == {"note": "玩具部件", "loaded_from": "v1"}
    assert b.check_parts() == ["texts", "toy_notes"]
    (b.folder / "toy-notes.json").write_text('{"note": "changed"}', encoding="utf-8")
    fresh = load_bundle(index, tokenizer=tok)
    with pytest.raises(PartError, match="toy_notes file toy-notes.json changed"):
        fresh.load(TOY)
    with pytest.raises(PartError, match="toy_notes"):
        fresh.check_parts()
    with pytest.raises(TypeError, match="no serving part reads"):
        index_stage(clean, tmp_path / "ckpt", index, ChunkConfig(max_chars=120, overlap=30), tokenizer=tok,
                    toy_note=notes)


def test_the_reader_part_pins_its_answer_settings(tmp_path):
    """The reader's record carries the AnswerConfig fields that change answers (from its declaration)."""
    from answers.answer import AnswerConfig
    from answers.reader import Reader, ScorerReader
    from retrieval.serving_parts import part_sources, serving_parts

    f = tmp_path / "scorer.json"
    f.write_text(json.dumps({"info": {"provenance": {"encoder_model_id": "m", "segmenter": "s"}}}))
    (src,) = part_sources(serving_parts(), {"answer_scorer": f})
    assert src.name == "answer_scorer" and set(src.requires) == {"encoder_model_id", "segmenter"}
    free = tmp_path / "free.json"  # an encoder-free scorer names no encoder: only its segmenter is pinned
    free.write_text(json.dumps({"info": {"provenance": {"segmenter": "s"}}}))
    (src2,) = part_sources(serving_parts(), {"answer_scorer": f, "answer_scorer_fallback": free})
    assert src2.requires == src.requires and src2.fallback.requires == ("segmenter",)
    assert src.meta["reader"] == "answers.reader:ScorerReader"
    assert src.meta["settings"]["focus_sentences"] == AnswerConfig().focus_sentences
    reader = ScorerReader(SimpleNamespace(threshold=0.3))
    assert isinstance(reader, Reader) and reader.threshold == 0.3 and reader.reranker is None


def test_one_answer_record_renders_to_json_text_and_html():
    from answers.render import JSON_KEYS, Answer, highlight_html, result_json, result_text, source_html

    a = Answer("完善<养老>服务", 0.8, 9, 17, "d1", title="通知", url="javascript:alert(1)", source="国务院",
               passage="第七项要完善<养老>服务。", version="v3", passage_start=5, passage_end=18)
    r = result_json("要完善什么？", [a], True, 0.2, "v3", "enc", 0.01)
    j = r["answers"][0]
    assert tuple(j) == JSON_KEYS and "policy" not in j and Answer.from_json(j) == a
    assert Answer.from_json({**j, "policy": {"issuer": "国务院"}}).to_json()["policy"] == {"issuer": "国务院"}
    assert "A (0.80): 完善<养老>服务" in result_text(r) and "【完善<养老>服务】" in result_text(r)
    assert highlight_html(j) == "第七项要<mark>完善&lt;养老&gt;服务</mark>。"
    assert "<a " not in source_html(j) and "javascript:alert(1)" in source_html(j)


@pytest.mark.slow  # builds a tiny index (~10 s)
def test_a_reader_part_declared_in_one_file_answers_in_place_of_the_scorer(tmp_path, monkeypatch):
    """A second reader is its declaration and loader: set by ``part_files`` (no config field), installed in the
    version, and the version answers through it; a version without it answers with the span scorer."""
    import retrieval.serving_parts as sp
    from answers.answer import Answerer
    from answers.backend import SearchBackend
    from answers.reader import ScorerReader
    from flows.profiles import get_profile, with_settings
    from flows.stages import part_setting, serving_part_files
    from retrieval.chunks import ChunkConfig
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_stage
    from tests.retrieval_builders import save_tiny_policybert, write_clean

    monkeypatch.setattr(sp, "REGISTRY", (*sp.REGISTRY, "tests.test_serving_parts:TOY_READER_PARTS"))
    part = tmp_path / "toy-reader.json"
    part.write_text(json.dumps({"threshold": 0.25}), encoding="utf-8")
    cfg = with_settings(get_profile("tiny"), [f"part_files.toy_reader={part}"])
    assert cfg.part_files == {"toy_reader": str(part)} and part_setting(cfg, "toy_reader") == str(part)
    assert part_setting(cfg, "answer_scorer") == cfg.answer_scorer  # a config field still wins
    with pytest.raises(ValueError, match="no serving part reads"):
        serving_part_files(SimpleNamespace(cfg=with_settings(cfg, ["part_files.toy_readr=x"]), inputs={}))
    with pytest.raises(ValueError, match="every value is a file path"):
        serving_part_files(SimpleNamespace(cfg=with_settings(cfg, ['part_files={"toy_reader": 5}']), inputs={}))
    tok, ckpt = make_tokenizer("auto"), save_tiny_policybert(tmp_path / "ckpt", seed=1)
    clean = write_clean(policy_docs(), tmp_path / "data" / "documents_clean")
    index = tmp_path / "data" / "index"
    res = index_stage(clean, ckpt, index, ChunkConfig(max_chars=120, overlap=30), tokenizer=tok, toy_reader=part)
    assert res["serving_parts"]["toy_reader"]["file"] == "toy-reader.json"
    reader = SearchBackend(index, tokenizer=tok).reader()
    assert isinstance(reader, FirstSentenceReader) and reader.threshold == 0.25
    out = Answerer(tmp_path / "data", tokenizer=tok).answer("数据要素第7项要完善什么？", k=2)
    texts = dict(zip(policy_docs()["doc_id"], policy_docs()["text"]))
    assert out["threshold"] == 0.25 and out["answers"] and out["version"] == "v1"
    for a in out["answers"]:  # each the first sentence of its document, read from the version's own text
        assert texts[a["doc_id"]].startswith(a["text"]) and a["text"]
    res2 = index_stage(clean, ckpt, index, ChunkConfig(max_chars=120, overlap=30), tokenizer=tok,
                       answer_scorer=Path("answers/data/scorer-encoder-free.json"))
    assert "toy_reader" not in res2["serving_parts"]
    assert isinstance(SearchBackend(index, tokenizer=tok).reader(), ScorerReader)
