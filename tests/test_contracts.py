"""Stage contracts (storage/contracts.py) and the cache built on them (tasks/caching.py)."""
from __future__ import annotations

import base64
import json
import pickle

import pandas as pd
import pytest

from flows.registry import PIPELINE
from storage import write_table
from storage.contracts import (
    REPO_ROOT,
    Output,
    Registry,
    Stage,
    code_modules,
    folder,
    local_sources,
    module_closure,
    stamp,
    stamped_key,
    table,
    used_modules,
)


def _rel(files):
    return {str(f.relative_to(REPO_ROOT)) for f in files}


def test_every_output_has_one_producer_and_every_read_is_produced():
    stages = list(PIPELINE)
    writes = [w for s in stages for w in s.write_paths(".") if s.name != "crawl"]
    assert len(writes) == len(set(writes)), "an output is declared by two stages"
    produced = set(writes) | {"documents"}
    for s in stages:
        assert set(s.read_paths(".")) <= produced, (s.name, set(s.read_paths(".")) - produced)
    assert PIPELINE.producer_of("vocab").name == "vocab"
    assert PIPELINE.producer_of("models/finetune-policysm1").name == "finetune"
    with pytest.raises(ValueError, match="declared twice"):
        Registry((*PIPELINE.stages, PIPELINE.named("vocab")))


def test_outputs_are_typed_and_kinds_follow_the_declaration():
    kinds = {n: k for s in PIPELINE for n, k in s.output_kinds().items()}
    assert kinds["vocab"] == "table" and kinds["eval/retrieval"] == "table" and kinds["index"] == "versioned"
    assert kinds["models/pretrain"] == "checkpoint" and kinds["tokenizer"] == "folder" and kinds["report"] == "folder"
    assert PIPELINE.named("pretrain").output_kinds({"out": "models/ablation/x"}) == {"models/ablation/x": "checkpoint"}
    with pytest.raises(TypeError, match="have no kind"):
        Stage("s", "corpus.stages:clean_stage", writes=("untyped",))
    with pytest.raises(ValueError, match="unknown kind"):
        Output("x", "blob")


def test_every_stage_setting_names_a_config_field_and_every_config_field_is_set_somewhere():
    """Stage settings are PipelineConfig field paths (so ``--set`` reaches them); every stage config field of
    the PipelineConfig is used by a stage (the model size, sample query and mapped part counts included)."""
    from dataclasses import fields

    from flows.profiles import PipelineConfig, setting

    cfg = PipelineConfig()
    used = {f.split(".")[0] for s in PIPELINE for f in s.settings.values()}
    for s in PIPELINE:
        for param, path in s.settings.items():
            setting(cfg, path)  # raises AttributeError when the field does not exist
    # answer_scorer (and its fallback), reranker, answer_reranker, answer_questions: files the flow resolves from the repository root and gives the
    # index stage as inputs (their content, not their path, enters the cache key); part_files: the same for parts
    # declared without a field of their own
    assert {f.name for f in fields(cfg)} - used == {"name", "sample_query", "answer_scorer", "answer_scorer_fallback",
                                                   "reranker",
                                                   "answer_reranker", "answer_questions", "related_pairs",
                                                   "related_corpus", "part_files"}


def test_segmenter_setting_tokenizes_both_bm25s_and_sparse_fusion_are_settable():
    from flows.profiles import get_profile, with_settings

    cfg = with_settings(get_profile("tiny"), ["segmenter=jieba", "sparse.k1=1.2", "fusion.rrf_k=30"])
    assert (cfg.segmenter, cfg.sparse.segmenter, cfg.sparse.k1, cfg.fusion.rrf_k) == ("jieba", "jieba", 1.2, 30)
    with pytest.raises(ValueError, match="one tokenizer"):
        with_settings(get_profile("tiny"), ["sparse.segmenter=jieba"])


def test_code_version_follows_a_stage_own_modules_only():
    report = _rel(module_closure(("corpus.report",)))
    clean = _rel(module_closure(("corpus.documents", "storage")))
    assert "corpus/report.py" in report and "corpus/clean.py" not in report
    assert {"corpus/clean.py", "corpus/dedup.py", "storage/tables.py"} <= clean and "corpus/report.py" not in clean
    # the stage function's helpers in its own module count, the module's other stages do not
    srcs = "\n".join(local_sources("model.stages", "finetune_stage"))
    assert "def _finish_finetuning" in srcs and "def pretrain_stage" not in srcs
    by_name = {s.name: s.code_version() for s in PIPELINE}
    assert len(set(by_name.values())) == len(by_name)


def test_code_version_is_derived_from_what_the_stage_function_imports(tmp_path):
    """Modules the stage function uses, at module level or in a lazy (function-level) import, are in its code
    version without a hand list; modules its module imports for other stages are not."""
    evaluate = {str(f.relative_to(REPO_ROOT)) for f in code_modules(PIPELINE.named("evaluate-retrieval").fn)}
    # query.py: used by a helper class of evaluate_stage (missed by the old hand list); evaluate.py: a lazy import
    assert {"retrieval/query.py", "retrieval/evaluate.py"} <= evaluate
    vocab = {str(f.relative_to(REPO_ROOT)) for f in code_modules("corpus.stages:vocab_stage")}
    assert "corpus/vocab.py" in vocab and "corpus/pairs.py" not in vocab and "corpus/clean.py" not in vocab
    assert "corpus.vocab.count_words" in used_modules("corpus.stages", "vocab_stage")
    # the index stage's code= is derived, not by hand: the serving-part declarations' modules, named by string
    from retrieval.serving_parts import part_modules, serving_parts

    assert PIPELINE.named("index").code == part_modules(serving_parts())
    assert all(not s.code for s in PIPELINE if s.name != "index"), "a hand code= list is only for modules no import reaches"


def test_stamps_in_tables_and_folders(tmp_path):
    write_table(pd.DataFrame({"a": [1, 2]}), tmp_path / "t", name="t")
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.json").write_text("{}")
    stage = Stage("s", "corpus.stages:clean_stage", writes=(table("t"), folder("ckpt")))
    assert not stage.outputs_carry(tmp_path, "k1")
    stage.stamp_outputs(tmp_path, "k1")
    assert stamped_key(tmp_path / "t") == "k1" and stamped_key(tmp_path / "ckpt") == "k1"
    assert json.loads((tmp_path / "t" / "manifest.json").read_text())["produced_by"] == {"stage": "s", "cache_key": "k1"}
    assert stage.outputs_carry(tmp_path, "k1") and not stage.outputs_carry(tmp_path, "k2")
    stamp(tmp_path / "ckpt", "s", "k2")
    assert not stage.outputs_carry(tmp_path, "k1")
    missing = Stage("m", "corpus.stages:clean_stage", writes=(table("nothing-here"),))
    with pytest.raises(FileNotFoundError, match="did not write its declared output nothing-here"):
        missing.stamp_outputs(tmp_path, "k")


def _sentences(data):
    """A sentences table with content unique to this test run (cache records outlive a test session)."""
    import uuid

    tag = uuid.uuid4().hex[:8]
    texts = [f"一{tag}", f"二{tag}", f"三{tag}"]
    write_table(pd.DataFrame({"doc_id": ["d"] * 3, "sent_idx": [0, 1, 2], "text": texts,
                              "clauses": [[t] for t in texts]}), data / "sentences", name="sentences")


class _Evil:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(MARKER),))


MARKER = ""


def test_pickle_record_is_a_cache_miss_never_deserialized(prefect_harness, tmp_path):
    """A cached result record edited to name the pickle serializer (with a payload that would create a file
    when unpickled) is dropped: the task runs again and the payload never runs."""
    global MARKER
    from prefect import flow

    from tasks import stages as T
    from tasks.caching import record_path

    data = tmp_path / "data"
    _sentences(data)

    @flow
    def plan_flow():
        return T.segment_plan(str(data), 2, return_state=True)

    first = plan_flow()
    assert first.name == "Completed" and plan_flow().name == "Cached"
    key = first.data.metadata.storage_key
    record = record_path(key) if not str(key).startswith("/") else __import__("pathlib").Path(key)
    doc = json.loads(record.read_text())
    MARKER = str(tmp_path / "payload-ran")
    doc["metadata"]["serializer"] = {"type": "pickle", "picklelib": "pickle"}
    doc["result"] = base64.b64encode(pickle.dumps(_Evil())).decode()
    record.write_text(json.dumps(doc))
    third = plan_flow()
    assert third.name == "Completed" and third.result()["rows"] == 3
    assert not (tmp_path / "payload-ran").exists()
    assert json.loads(record.read_text())["metadata"]["serializer"]["type"] == "json"


def test_deleted_output_is_rebuilt_and_identical_output_stops_below(prefect_harness, tmp_path):
    from prefect import flow

    from corpus.vocab import VocabConfig
    from tasks import stages as T

    data = tmp_path / "data"
    _sentences(data)

    @flow
    def seg_flow():
        plan = T.segment_plan(str(data), 2)
        parts = [T.segment_part(str(data), plan=plan, part=i, backend="hanlp-dict") for i in range(2)]
        seg = T.segment(str(data), backend="hanlp-dict", parts=parts, return_state=True)
        voc = T.vocab(str(data), VocabConfig(min_freq=1, min_len=1), None, wait_for=[seg], return_state=True)
        return seg, voc

    assert [s.name for s in seg_flow()] == ["Completed", "Completed"]
    assert [s.name for s in seg_flow()] == ["Cached", "Cached"]
    import shutil

    target = data / "segments"
    (target.unlink() if target.is_symlink() else shutil.rmtree(target))
    seg, voc = seg_flow()
    assert (seg.name, voc.name) == ("Completed", "Cached") and (data / "segments" / "manifest.json").is_file()


def _two_tables(first_dir, second_dir, out_dir, cfg=None):
    return {"first": first_dir, "second": second_dir, "out": out_dir}


BY_NAME = {"first_dir": "a", "second_dir": "b", "out_dir": "out"}


def test_paths_bind_by_name_whatever_the_order_of_the_declared_reads(tmp_path):
    """Two declarations that list the same reads in the other order give each parameter the same path (a
    positional binding would swap them)."""
    from storage.binding import bind

    ab = Stage("s", "corpus.stages:clean_stage", reads=("a", "b"), writes=(table("out"),), args=BY_NAME)
    ba = Stage("s", "corpus.stages:clean_stage", reads=("b", "a"), writes=(table("out"),), args=BY_NAME)
    want = {"first_dir": tmp_path / "a", "second_dir": tmp_path / "b", "out_dir": tmp_path / "out", "cfg": 3}
    assert bind(ab, _two_tables, str(tmp_path), {"cfg": 3}) == bind(ba, _two_tables, str(tmp_path), {"cfg": 3}) == want


def test_a_function_taking_kwargs_gets_the_declared_inputs(tmp_path):
    """The index stage's function takes each serving part's setting through ``**part_inputs``: every declared
    input given to the task reaches it (they were once dropped, and versions were published without their
    answer scorer); a task parameter that is no declared input does not."""
    from storage.binding import bind
    from retrieval.contracts import INDEX
    from storage.binding import stage_function

    params = {"answer_scorer": "/x/scorer.json", "related_corpus": "/x/corpus.jsonl.gz", "cfg": {},
              "unrelated": 1}
    kwargs = bind(INDEX, stage_function(INDEX), str(tmp_path), params)
    assert kwargs["answer_scorer"] == "/x/scorer.json" and kwargs["related_corpus"] == "/x/corpus.jsonl.gz"
    assert "unrelated" not in kwargs and "reranker" not in kwargs


@pytest.mark.parametrize("reads, args, message", [
    (("a", "b"), {"first_dir": "a", "out_dir": "out"}, "stage s: declared read 'b' is bound to no parameter"),
    (("a",), {"first_dir": "a", "out_dir": "out"}, "stage s: parameter 'second_dir' of .* gets no declared path"),
    (("a", "b"), {**BY_NAME, "second_dir": "c"}, "stage s: args source 'c' of parameter 'second_dir'"),
    (("a", "b"), {**BY_NAME, "third_dir": "b"}, "stage s: args binds 'b' to parameter 'third_dir'"),
])
def test_an_unbound_path_or_parameter_is_an_error(tmp_path, reads, args, message):
    from storage.binding import BindingError, bind

    stage = Stage("s", "corpus.stages:clean_stage", reads=reads, writes=(table("out"),), args=args)
    with pytest.raises(BindingError, match=message):
        bind(stage, _two_tables, str(tmp_path), {})


def test_every_stage_contract_fits_its_function():
    """Every declared path of every stage reaches a parameter of its function by name and every parameter is
    covered; placeholders and the records of mapped stages bind too."""
    from pathlib import Path

    from storage.binding import bind, stage_function

    for s in PIPELINE:
        params = {**s.defaults, **{p: None for p in s.parameters if p not in s.defaults}}
        bind(s, stage_function(s), "/d", params, part=Path("/d/p") if s.part_file is not None else None)
    ft = PIPELINE.named("finetune")
    got = bind(ft, stage_function(ft), "/d", {**ft.defaults, "pretrained": "models/ablation/x", "cfg": None,
                                              "max_eval_examples": None})
    assert (str(got["pretrained_dir"]), str(got["dataset_dir"])) == ("/d/models/ablation/x", "/d/policysm1")
    embed = PIPELINE.named("embed-part")
    got = bind(embed, stage_function(embed), "/d", {"plan": {"path": "/d/cache/parts/index-plan/k"}, "part": 1,
                                                    "n_parts": 2, "batch_size": 4}, part=Path("/d/p.npz"))
    assert (str(got["staging"]), str(got["out_file"]), got["part"]) == ("/d/cache/parts/index-plan/k", "/d/p.npz", 1)


def test_mapped_parts_are_named_by_their_key_carried_relative_and_pruned_after_the_merge(prefect_harness, tmp_path):
    """The generic mapped tasks: each part's file is named by its cache key under the stage's part folder, its
    record's path is relative to the data dir (a moved data dir hits the cache), and the merge of a new plan
    removes the part files of the earlier one."""
    import shutil
    from pathlib import Path

    from prefect import flow

    from tasks import stages as T

    data = tmp_path / "data"
    _sentences(data)

    @flow
    def seg_flow(data_dir: str, n: int):
        plan = T.segment_plan(data_dir, n)
        states = [T.segment_part(data_dir, plan=plan, part=i, backend="hanlp-dict", return_state=True)
                  for i in range(n)]
        parts = [s.result() for s in states]
        return states, parts, T.segment(data_dir, backend="hanlp-dict", parts=parts, return_state=True)

    states, parts, seg = seg_flow(str(data), 2)
    folder = Path("cache/parts/segment-part")
    assert [r["part"] for r in parts] == [0, 1] and sum(r["rows"] for r in parts) == 3
    for state, r in zip(states, parts):
        key = Path(str(state.data.metadata.storage_key)).name
        assert r["path"] == str(folder / f"{key[:32]}.parquet") and (data / r["path"]).is_file()
    moved = tmp_path / "moved"
    shutil.copytree(data, moved, symlinks=True)
    states2, parts2, seg2 = seg_flow(str(moved), 2)
    assert [s.name for s in states2] == ["Cached", "Cached"] and seg2.name == "Cached" and parts2 == parts
    _, parts3, seg3 = seg_flow(str(data), 3)
    assert seg3.name == "Completed"
    assert sorted(p.name for p in (data / folder).iterdir()) == sorted(Path(r["path"]).name for r in parts3)
