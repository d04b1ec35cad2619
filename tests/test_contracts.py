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
    assert {f.name for f in fields(cfg)} - used == {"name", "sample_query"}


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
    assert all(not s.code for s in PIPELINE), "a hand code= list is only for modules no import reaches"


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
        parts = [T.segment_part(str(data), plan, i, "hanlp-dict") for i in range(2)]
        seg = T.segment(str(data), "hanlp-dict", parts=parts, return_state=True)
        voc = T.vocab(str(data), VocabConfig(min_freq=1, min_len=1), None, wait_for=[seg], return_state=True)
        return seg, voc

    assert [s.name for s in seg_flow()] == ["Completed", "Completed"]
    assert [s.name for s in seg_flow()] == ["Cached", "Cached"]
    import shutil

    target = data / "segments"
    (target.unlink() if target.is_symlink() else shutil.rmtree(target))
    seg, voc = seg_flow()
    assert (seg.name, voc.name) == ("Completed", "Cached") and (data / "segments" / "manifest.json").is_file()
