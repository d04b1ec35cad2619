"""Hostile cache records (tasks/caching.py): a record that names code is a cache miss, never decoded."""
from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

import pandas as pd

from storage.tables import write_table
from tasks.caching import PROJECT_SERIALIZER, record_is_safe

MARKER_ENV = {"path": ""}


def touch_marker(obj):
    """An 'object decoder' a hostile record names: it leaves a file behind when it runs."""
    Path(MARKER_ENV["path"]).touch()
    return obj


@dataclasses.dataclass
class Evil:
    """A class a hostile result names with ``__class__``: Prefect's decoder would build it (running this)."""
    x: int = 0

    def __post_init__(self):
        Path(MARKER_ENV["path"]).touch()


def _record(result, **serializer) -> dict:
    return {"metadata": {"storage_key": "/k", "expiration": None,
                         "serializer": {**PROJECT_SERIALIZER, **serializer}, "prefect_version": "3.8.8",
                         "storage_block_id": None},
            "result": json.dumps(result)}


def test_only_records_exactly_as_the_project_writes_them_are_read(tmp_path):
    cases = {
        "ok": _record({"rows": 3, "ranges": [[0, 1]]}),
        "decoder": _record({"rows": 3}, object_decoder="subprocess.run"),
        "jsonlib": _record({"rows": 3}, jsonlib="pickle"),
        "loads_kwargs": _record({"rows": 3}, loads_kwargs={"cls": "x"}),
        "class_payload": _record({"rows": {"__class__": "tests.test_hostile_cache.Evil", "data": {"x": 1}}}),
        "exc_payload": _record([{"__exc_type__": "builtins.SystemExit", "message": "1"}]),
        "storage_block": {**_record({}), "metadata": {**_record({})["metadata"], "storage_block_id": str(uuid.uuid4())}},
        "extra_key": {**_record({}), "hook": "os.system"},
        "not_a_dict": ["metadata", "result"],
        "metadata_str": {"metadata": "serializer", "result": "{}"},
    }
    got = {}
    for name, doc in cases.items():
        (tmp_path / name).write_text(json.dumps(doc))
        got[name] = record_is_safe(tmp_path / name)
    deep = _record(1)
    deep["result"] = "[" * 100_000 + "]" * 100_000
    (tmp_path / "deep").write_text(json.dumps(deep))
    got["deep"] = record_is_safe(tmp_path / "deep")
    assert got == {"ok": True, **{n: False for n in cases if n != "ok"}, "deep": False}


def test_record_naming_a_decoder_is_a_miss_and_the_decoder_never_runs(prefect_harness, tmp_path):
    """The end-to-end attack: a cached record edited to name a callable as its JSON object decoder, then one
    whose result names a class. The next run runs the stage again; neither callable runs."""
    from prefect import flow

    from tasks import stages as T
    from tasks.caching import record_path

    data = tmp_path / "data"
    tag = uuid.uuid4().hex[:8]  # content unique to this run: cache records outlive a test session
    texts = [f"一{tag}", f"二{tag}", f"三{tag}"]
    write_table(pd.DataFrame({"doc_id": ["d"] * 3, "sent_idx": [0, 1, 2], "text": texts,
                              "clauses": [[t] for t in texts]}), data / "sentences", name="sentences")

    @flow
    def plan_flow():
        return T.segment_plan(str(data), 2, return_state=True)

    first = plan_flow()
    assert first.name == "Completed" and plan_flow().name == "Cached"
    key = first.data.metadata.storage_key
    record = Path(key) if str(key).startswith("/") else record_path(key)
    MARKER_ENV["path"] = str(tmp_path / "decoder-ran")
    for edit in ({"object_decoder": "tests.test_hostile_cache.touch_marker"},
                 {"result": json.dumps({"__class__": "tests.test_hostile_cache.Evil", "data": {"x": 1}})}):
        doc = json.loads(record.read_text())
        if "result" in edit:
            doc["result"] = edit["result"]
        else:
            doc["metadata"]["serializer"].update(edit)
        record.write_text(json.dumps(doc))
        again = plan_flow()
        assert again.name == "Completed" and again.result()["rows"] == 3
        assert not (tmp_path / "decoder-ran").exists()
        assert record_is_safe(record)


def test_stage_results_are_written_as_plain_json_that_reads_back_as_a_hit(tmp_path):
    """What a stage returns (numpy numbers, paths, dataclasses) is made plain JSON before Prefect writes it, so
    its record names no class and passes the check (a record that did would be a miss on every run)."""
    import numpy as np
    from prefect.serializers import JSONSerializer

    from storage.binding import jsonable

    out = {"rows": np.int64(3), "vec": np.arange(2), "path": tmp_path, "cfg": Evil.__new__(Evil)}
    object.__setattr__(out["cfg"], "x", 1)
    raw = JSONSerializer().dumps(jsonable(out)).decode()
    (tmp_path / "rec").write_text(json.dumps({**_record({}), "result": raw}))
    assert record_is_safe(tmp_path / "rec") and json.loads(raw)["cfg"] == {"x": 1}
    unconverted = JSONSerializer().dumps({"path": tmp_path, "cfg": out["cfg"]}).decode()
    (tmp_path / "rec").write_text(json.dumps({**_record({}), "result": unconverted}))
    assert not record_is_safe(tmp_path / "rec")  # unconverted, Prefect's encoder names the classes
