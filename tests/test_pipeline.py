"""Integration: the whole flow on a 5-document slice of the real corpus with the tiny profile."""
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from storage import read_manifest, read_table
from storage import layout as L
from tests.conftest import REPO, write_corpus

STAGE_TASKS = {"import-documents", "clean", "sentences", "segment", "vocab", "datasets", "dataset-report",
               "pretrain-data", "pretrain", "finetune", "index", "evaluate-retrieval"}


def _task_states(flow_state) -> dict[str, str]:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_state.state_details.flow_run_id])),
                                     limit=200)
    return {r.name.rsplit("-", 1)[0]: r.state.name for r in runs}


def _record_opens(root: Path, opened: list) -> None:
    """Audit hook: every file opened under ``root`` inside a task run, as (task name, path)."""
    prefix = str(root)

    def hook(event, args):
        if event == "open" and opened is not None and isinstance(args[0], (str, Path)) and str(args[0]).startswith(prefix):
            from prefect.context import TaskRunContext

            ctx = TaskRunContext.get()
            if ctx is not None:
                opened.append((ctx.task.name, str(args[0])))

    sys.addaudithook(hook)


OPENED: list = []


@pytest.fixture(scope="module")
def pipeline_run(prefect_harness, real_slice, tmp_path_factory):
    from flows.pipeline import policy_pipeline

    data = tmp_path_factory.mktemp("data")
    _record_opens(data, OPENED)
    first = policy_pipeline(str(real_slice), str(data), "tiny", return_state=True)
    second = policy_pipeline(str(real_slice), str(data), "tiny", return_state=True)
    return data, first, second


def _declared_name(rel: Path, names: set[str]) -> str | None:
    """The declared output or scratch folder a data-dir relative path belongs to (temporary and versioned
    folders ``.name.<uid>.tmp|d`` and training state ``.name.train-state`` count as ``name``)."""
    import re

    parts = [re.sub(r"^\.(.+?)(\.[0-9a-z_]{8}\.(tmp|d|lnk|old)|\.train-state)$", r"\1", p) for p in rel.parts]
    for n in range(len(parts), 0, -1):
        if "/".join(parts[:n]) in names:
            return "/".join(parts[:n])
    return None


@pytest.mark.slow
def test_stages_open_only_declared_tables(pipeline_run):
    """Every file a stage task opened during the run lies in a table or folder its contract declares
    (reads, writes or scratch): no stage reads an input its cache key does not see."""
    from flows.registry import PIPELINE

    data, _, _ = pipeline_run
    stages = {s.name: s for s in PIPELINE}
    allowed = {n: set(s.read_paths(data)) | set(s.write_paths(data)) | set(s.scratch) for n, s in stages.items()}
    names = set().union(*allowed.values())
    seen = {(t, _declared_name(Path(p).relative_to(data), names)) for t, p in OPENED if t in stages}
    assert {t for t, _ in seen} >= {"clean", "segment-part", "vocab", "pretrain", "finetune", "index", "dataset-report"}
    undeclared = sorted((t, n) for t, n in seen if n not in allowed[t])
    assert not undeclared, undeclared


@pytest.mark.slow
def test_every_stage_output(pipeline_run):
    data, first, _ = pipeline_run
    assert first.is_completed()
    docs = read_table(data / L.DOCUMENTS)
    assert len(docs) == 5 and docs["source"].nunique() >= 2 and docs["url"].notna().sum() >= 4
    clean = read_table(data / L.DOCUMENTS_CLEAN)
    rejects = read_table(data / L.REJECTS)
    assert len(clean) + len(rejects) == 5 and (clean["n_chars"] > 100).all()
    sents = read_table(data / L.SENTENCES)
    assert len(sents) > 300 and set(sents["doc_id"]) == set(clean["doc_id"])
    segs = read_manifest(data / L.SEGMENTS)
    assert segs["stats"]["backend"] == "hanlp-dict" and segs["rows"] == len(sents)
    vocab = read_manifest(data / L.VOCAB)
    words = (data / L.VOCAB / "vocab.txt").read_text(encoding="utf-8").split()
    assert len(words) == vocab["rows"] > 100 and vocab["stats"]["sentence_coverage"] > 0.9
    assert vocab["stats"]["backend"] == "hanlp-dict" and "数据" in words
    for name in (L.POLICYSM1, L.POLICYSM2):
        pairs = read_table(data / name, verify=True)
        assert set(pairs["split"]) == {"train", "dev", "test"}
        docs_by_split = {s: set(pairs[pairs.split == s][["doc_a", "doc_b"]].stack()) for s in ("train", "dev", "test")}
        assert not (docs_by_split["train"] & docs_by_split["dev"]) and not (docs_by_split["train"] & docs_by_split["test"])
        assert not pairs.duplicated(["text_a", "text_b"]).any()
    pre = read_table(data / L.PRETRAIN / "epoch=0")
    assert set(pre["nsp_label"]) == {0, 1} and len(pre) > 100
    for ckpt in (L.PRETRAINED_MODEL, L.FINETUNED_MODEL):
        assert {"config.json", "model.safetensors", "vocab.txt", "word_vocab.txt", "metrics.json"} <= {
            p.name for p in (data / ckpt).iterdir()}
    metrics = json.loads((data / L.FINETUNED_MODEL / "metrics.json").read_text())
    sm1 = read_table(data / L.POLICYSM1)
    for split in ("dev", "test"):  # every pair of the split evaluated, up to the tiny profile's 200
        m, n_pairs = metrics[split], int((sm1["split"] == split).sum())
        assert m["examples"] == min(n_pairs, 200), (split, m["examples"], n_pairs)
        assert abs(round(m["accuracy"] * m["examples"]) - m["accuracy"] * m["examples"]) < 1e-6  # a count of hits
    assert 0.5 <= metrics["majority_test"] < 1 and metrics["dataset"] == L.POLICYSM1
    idx = json.loads((data / L.INDEX / "v1" / "manifest.json").read_text())
    assert (data / L.INDEX / "CURRENT").read_text() == "v1" and idx["size"] > 10
    ev = read_table(data / L.RETRIEVAL_EVAL)
    assert {"policybert", "untrained", "bm25-hanlp"} <= set(ev["system"]) and (ev["queries"] >= 5).all()
    assert ev.set_index("system").loc["bm25-hanlp", "recall@10"] > 0.5
    assert (data / L.REPORT / "report.md").is_file() and (data / L.REPORT / "sources.png").is_file()
    summary = json.loads((data / L.SUMMARY).read_text())
    assert summary["documents_in"] == 5 and len(summary["sample_query"]) == 3
    assert summary["sample_query"][0]["title"]
    # the serving parts are in the version: the texts of its documents, and, as the shipped e5 scorer does not
    # fit this tiny PolicyBERT encoder, the shipped encoder-free scorer in its place, saying what it replaced;
    # the summary's sample answer comes from it
    texts = pd.read_parquet(data / L.INDEX / "v1" / idx["parts"]["texts"]["file"])
    assert set(texts["doc_id"]) == set(read_table(data / L.DOCUMENTS_CLEAN, ["doc_id"])["doc_id"])
    scorer = idx["parts"]["answer_scorer"]
    assert "refused" not in scorer and "encoder_model_id" not in scorer["provenance"]
    replaced = scorer["fallback_for"]
    assert "fitted with another encoder_model_id" in replaced and idx["model_id"] in replaced
    assert summary["sample_answer"].get("text") or summary["sample_answer"]["note"] == "no answer found"


@pytest.mark.slow
def test_rerun_hits_the_cache_for_every_stage(pipeline_run):
    _, first, second = pipeline_run
    assert second.is_completed()
    states = _task_states(second)
    assert STAGE_TASKS <= set(states), STAGE_TASKS - set(states)
    assert {t: states[t] for t in STAGE_TASKS} == {t: "Cached" for t in STAGE_TASKS}
    assert {t: s for t, s in _task_states(first).items() if t in STAGE_TASKS} == {t: "Completed" for t in STAGE_TASKS}


@pytest.mark.slow
def test_search_cli_prints_json_lines(pipeline_run, capsys):
    from flows.search import main

    data, _, _ = pipeline_run
    assert main(["什么是数据基础制度体系？", "--data-dir", str(data), "-k", "4"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert len(lines) == 4 and {"score", "doc_id", "title", "source", "url", "text"} <= set(lines[0])
    assert lines[0]["score"] >= lines[-1]["score"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flows.pipeline", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("case", ["missing", "columns", "empty", "unwritable", "registry"])
def test_bad_input_one_line_error_nothing_written(tmp_path, case):
    data = tmp_path / "data"
    inp = tmp_path / "in.csv"
    if case == "columns":
        inp.write_text("title,body\na,b\n", encoding="utf-8")
    elif case in ("empty", "unwritable"):
        write_corpus(inp, [] if case == "empty" else [{"title": "t", "contentText": "数据要素是基础。" * 10}])
    if case == "unwritable":
        data = tmp_path / "a-file"
        data.write_text("x")
    extra = []
    if case == "registry":
        reg = tmp_path / "sources.yaml"
        reg.write_text("sources:\n- name: x\n  hosts: []\n  seeds: [ftp://x.cn/a]\n", encoding="utf-8")
        extra = ["--registry", str(reg)]
    arg = "crawl" if case == "registry" else str(inp)
    res = _cli("--input", arg, "--data-dir", str(data), "--profile", "tiny", *extra)
    assert res.returncode == 2
    err = [line for line in res.stderr.splitlines() if line.strip()]
    assert err[0].startswith("error: ") and (len(err) == 1 or case == "registry")
    expected = {"missing": "not found", "columns": "lacks required column", "empty": "empty corpus",
                "unwritable": "not writable", "registry": "problem(s)"}[case]
    assert expected in err[0]
    if case != "unwritable":
        assert not data.exists() or not [p for p in data.rglob("*") if p.is_file() and ".prefect" not in p.parts]


@pytest.mark.slow
def test_ablation_flow_table(pipeline_run, real_slice):
    from flows.ablation import policybert_ablation

    data, _, _ = pipeline_run
    table = policybert_ablation(str(real_slice), str(data), "tiny", models=["plain", "attn"], seeds=2)
    assert [t["model"] for t in table] == ["plain", "attn", "majority", "overlap_lr"]
    assert [t["seeds"] for t in table] == [2, 2, 1, 1]
    assert " ± " in table[0]["policysm1_test_accuracy"] and " ± " in table[1]["nsp_accuracy"]
    rows = read_table(data / L.ABLATION)
    assert len(rows) == 6 and set(rows.columns) >= {"mlm_loss", "nsp_accuracy", "policysm2_test_f1", "seed"}
    assert rows[rows.model == "overlap_lr"]["mlm_loss"].isna().all()
    for model, model_type in (("plain", "bert"), ("attn", "policybert")):
        for seed in (13, 14):
            cfg = json.loads((data / L.ABLATION_MODELS / model / f"seed={seed}" / "pretrain" / "config.json").read_text())
            assert cfg["model_type"] == model_type and cfg.get("fusion", "plain") == model


@pytest.mark.slow
def test_pipeline_from_a_crawl_of_local_hosts(prefect_harness, real_slice, tmp_path):
    """--input crawl end to end: 5 real documents served as gov.cn pages and a PDF by local hosts."""
    import csv

    from flows.pipeline import policy_pipeline
    from tests.builders import gov_page, text_pdf
    from tests.http_hosts import hosts, send

    csv.field_size_limit(sys.maxsize)
    rows = list(csv.DictReader(open(real_slice, encoding="utf-8")))
    routes = {"/robots.txt": lambda h: send(h, 200, b"User-agent: *\nAllow: /\n", "text/plain")}
    for i, r in enumerate(rows[:4]):
        body = gov_page(r["contentText"]).encode()
        routes[f"/doc/{i}.html"] = lambda h, b=body: send(h, 200, b)
    pdf = text_pdf([rows[4]["contentText"][k:k + 300] for k in range(0, 900, 300)])
    routes["/white.pdf"] = lambda h: send(h, 200, pdf, "application/pdf")
    with hosts(routes, first_ip=40) as (a,):
        reg = tmp_path / "sources.yaml"
        reg.write_text(json.dumps({"allow_private_addresses": True, "sources": [{"name": "本地测试源", "hosts": [a.netloc], "seeds":
                                                [a.url(f"/doc/{i}.html") for i in range(4)] + [a.url("/white.pdf")]}]},
                                  ensure_ascii=False), encoding="utf-8")
        data = tmp_path / "data"
        state = policy_pipeline("crawl", str(data), "tiny", registry=str(reg), return_state=True)
    assert state.is_completed()
    docs = read_table(data / L.DOCUMENTS)
    assert len(docs) == 5 and set(docs["content_type"]) == {"html", "pdf"} and docs["fetched_at"].notna().all()
    assert (data / L.CRAWL / "raw_index.parquet").is_file()
    assert json.loads((data / L.SUMMARY).read_text())["index"]["chunks"] > 10


@pytest.mark.slow
def test_killed_run_resumes_at_the_first_unfinished_task(real_slice, tmp_path):
    """SIGKILL the CLI while it pretrains, once a training state is on disk; rerun it: the finished
    stages are cache hits and pretraining resumes from the saved step, not from step 0."""
    import os
    import re
    import signal
    import time as _time

    data = tmp_path / "data"
    cmd = [sys.executable, "-m", "flows.pipeline", "--input", str(real_slice), "--data-dir", str(data),
           "--profile", "tiny"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True)
    position = data / "models" / ".pretrain.train-state" / "trainer_state" / "position.json"
    deadline = _time.monotonic() + 240
    while not position.is_file():
        assert proc.poll() is None, "the run ended before pretraining saved a state"
        assert _time.monotonic() < deadline, "no training state within 240 s"
        _time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group, server included
    proc.wait(timeout=60)
    saved = json.loads(position.read_text())["step"]
    assert saved > 0 and not (data / L.PRETRAINED_MODEL).exists()
    out = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    states = dict(re.findall(r"Task run '([\w-]+)-\w{3}' - Finished in state (\w+)", log))
    for t in ("import-documents", "clean", "sentences", "segment", "vocab", "datasets", "pretrain-data"):
        assert states[t] == "Cached", (t, states)
    for t in ("pretrain", "finetune", "index"):
        assert states[t] == "Completed", (t, states)
    resumed = [int(n) for n in re.findall(r"resumed from step (\d+)", log)]
    assert resumed and resumed[0] >= saved, log[-3000:]
    metrics = json.loads((data / L.PRETRAINED_MODEL / "metrics.json").read_text())
    assert metrics["train"]["resumed_from"] == resumed[0] and metrics["train"]["steps"] == 60


@pytest.mark.slow
def test_outputs_are_assets_with_upstream_lineage(pipeline_run):
    """The first run emitted asset materialization events keyed by file:// manifests, with upstream assets."""
    import time as _time

    from prefect.client.orchestration import get_client
    from prefect.events.filters import EventFilter, EventNameFilter, EventOccurredFilter, EventResourceFilter

    data, _, _ = pipeline_run
    lineage = (data / L.LINEAGE).read_text(encoding="utf-8")
    assert "`documents_clean`" in lineage and "`models/finetune-policysm1`" in lineage
    flt = EventFilter(event=EventNameFilter(prefix=["prefect.asset.materialization"]),
                      resource=EventResourceFilter(id_prefix=[f"file://{data}/"]),
                      occurred=EventOccurredFilter(since=__import__("datetime").datetime(2000, 1, 1,
                                                   tzinfo=__import__("datetime").timezone.utc)))
    events = []
    for _ in range(20):  # events are written asynchronously
        with get_client(sync_client=True) as client:
            events = client.read_events(filter=flt, limit=50).events
        if any(str(e.resource.id).endswith(f"{data}/{L.VOCAB}/manifest.json") for e in events):
            break
        _time.sleep(0.5)
    by_key = {str(e.resource.id): e for e in events if str(e.resource.id).startswith(f"file://{data}/")}
    vocab = by_key[f"file://{data}/{L.VOCAB}/manifest.json"]
    upstream = {str(r.id) for r in vocab.related if r.role == "asset"}
    assert f"file://{data}/{L.SEGMENTS}/manifest.json" in upstream
    assert f"file://{data}/{L.DOCUMENTS_CLEAN}/manifest.json" in by_key


@pytest.mark.slow
def test_dask_runner_gives_byte_identical_outputs(real_slice, tmp_path):
    """The mapped stages (segmentation, embedding) under Dask write the same bytes as under threads
    (each run a fresh CLI process, as users run it)."""
    import numpy as np

    out = {}
    for runner in ("threads", "dask"):
        data = tmp_path / runner
        try:
            res = subprocess.run([sys.executable, "-m", "flows.pipeline", "--input", str(real_slice), "--data-dir",
                                  str(data), "--profile", "tiny", "--task-runner", runner], cwd=REPO,
                                 capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired as exc:  # say where it stood, not only that it did not end
            tail = (exc.stderr or b"")[-4000:]
            pytest.fail(f"{runner} run not done in 600 s; its log ends:\n"
                        f"{tail.decode(errors='replace') if isinstance(tail, bytes) else tail}")
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        out[runner] = data
    a, b = out["threads"], out["dask"]
    for table in (L.SEGMENTS, L.VOCAB, L.POLICYSM1, L.POLICYSM2):
        assert [s["sha256"] for s in read_manifest(a / table)["shards"]] == \
            [s["sha256"] for s in read_manifest(b / table)["shards"]], table
    assert (a / L.INDEX / "v1" / "chunks.parquet").read_bytes() == (b / L.INDEX / "v1" / "chunks.parquet").read_bytes()
    assert np.array_equal(np.load(a / L.INDEX / "v1" / "embeddings.npy"), np.load(b / L.INDEX / "v1" / "embeddings.npy"))


@pytest.mark.slow
def test_one_document_corpus_runs_end_to_end(prefect_harness, real_slice, tmp_path):
    """A corpus of one document (every pair in train: empty dev/test splits, no held-out documents for
    pretraining) still runs every stage and writes its summary."""
    import csv

    from flows.pipeline import policy_pipeline

    csv.field_size_limit(sys.maxsize)
    with open(real_slice, encoding="utf-8", newline="") as fh:
        first = list(csv.DictReader(fh))[:1]
    src = write_corpus(tmp_path / "one.csv", first)
    state = policy_pipeline(str(src), str(tmp_path / "data"), "tiny", return_state=True)
    assert state.is_completed(), state
    summary = json.loads((tmp_path / "data" / L.SUMMARY).read_text())
    assert summary["documents_out"] == 1 and summary["pretrain_heldout"] is None
    assert set(read_table(tmp_path / "data" / L.POLICYSM1)["split"]) == {"train"}
