"""The text side on Dask worker processes (flows/runners.py): the corpus-refresh flow on a LocalCluster of 2
worker processes writes the same bytes as on threads, its tasks report to the flow's Prefect API; the Dask
command-line flags are checked before anything runs."""
import os
from pathlib import Path

import numpy as np
import pytest


def _tables(data: Path) -> dict[str, str]:
    """Content fingerprint of every table the text stages declare as outputs (and of the segmentation cache)."""
    from corpus.stages import STAGES
    from storage import manifest_fingerprint

    names = sorted({w for s in STAGES for w in (*s.writes, *s.scratch)})
    out = {n: manifest_fingerprint(data / n) for n in names if (data / n / "manifest.json").is_file()}
    for cache in sorted((data / "cache" / "segments").glob("[!.]*/manifest.json")):  # not the versioned folders
        out[str(cache.parent.relative_to(data))] = manifest_fingerprint(cache.parent)
    return out


def _task_runs(flow_run_id) -> dict[str, int]:
    """Completed task runs of a flow run, counted by task name, as the flow's Prefect API knows them."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])), limit=200)
    counts: dict[str, int] = {}
    for r in runs:
        if r.state is not None and r.state.is_completed():
            name = r.name.rsplit("-", 1)[0]
            counts[name] = counts.get(name, 0) + 1
    return counts


@pytest.mark.slow
def test_corpus_refresh_on_worker_processes_is_byte_identical(prefect_harness, real_slice, tmp_path):
    """corpus-refresh (tiny profile, 5 real documents) on threads and on a local cluster of 2 worker
    processes: every text table has the same content fingerprint, vocab.txt the same bytes; the parts ran
    in the workers (other pids) and their task runs reached the flow's API (PREFECT_API_URL passed on)."""
    from distributed import Client

    from flows.deployments import corpus_refresh
    from flows.runners import local_process_cluster, prefect_api_url, task_runner
    from storage import layout as L

    with local_process_cluster(n_workers=2) as cluster, Client(cluster) as client:
        pids = set(client.run(os.getpid).values())
        urls = set(client.run(lambda: os.environ.get("PREFECT_API_URL")).values())
    assert len(pids) == 2 and os.getpid() not in pids
    assert urls == {prefect_api_url()}

    out, runs = {}, {}
    for kind in ("threads", "dask"):
        data = tmp_path / kind
        flow_ = corpus_refresh.with_options(task_runner=task_runner(kind, dask_workers=2))
        state = flow_(str(data), input=str(real_slice), profile="tiny", return_state=True)
        assert state.is_completed(), (kind, state)
        out[kind] = data
        runs[kind] = _task_runs(state.state_details.flow_run_id)
    a, b = (_tables(out[k]) for k in ("threads", "dask"))
    assert {L.DOCUMENTS, L.DOCUMENTS_CLEAN, L.SENTENCES, L.SEGMENTS, L.VOCAB, L.POLICYSM1, L.POLICYSM2} <= set(a)
    assert a == b
    assert (out["threads"] / L.VOCAB / "vocab.txt").read_bytes() == (out["dask"] / L.VOCAB / "vocab.txt").read_bytes()
    assert runs["dask"].get("segment-part") == 2, runs["dask"]  # both parts reported by the workers
    assert runs["dask"] == runs["threads"]


def _validate(argv: list[str], tmp_path: Path, env: dict | None = None):
    from flows.cli import check_dask_options, parser

    args = parser().parse_args(["--input", str(tmp_path / "x.csv"), "--data-dir", str(tmp_path / "d"), *argv])
    old = os.environ.pop("PREFECT_API_URL", None)
    os.environ.update(env or {})
    try:
        check_dask_options(args)
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        if old is not None:
            os.environ["PREFECT_API_URL"] = old


@pytest.mark.parametrize("argv, env, message", [
    (["--dask-address", "tcp://h:8786"], None, "--dask-address applies to --task-runner dask only"),
    (["--dask-workers", "3"], None, "--dask-workers applies to --task-runner dask only"),
    (["--task-runner", "dask", "--dask-workers", "0"], None, "--dask-workers 0: need at least 1"),
    (["--task-runner", "dask", "--dask-address", "tcp://h:8786"], None, "set PREFECT_API_URL"),
])
def test_bad_dask_flags_are_refused(argv, env, message, tmp_path):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        _validate(argv, tmp_path, env)


def test_good_dask_flags_pass(tmp_path):
    _validate(["--task-runner", "dask", "--dask-workers", "4"], tmp_path)
    _validate(["--task-runner", "dask", "--dask-address", "tcp://h:8786"], tmp_path,
              {"PREFECT_API_URL": "http://h:4200/api"})


def test_runner_kinds():
    from prefect.task_runners import ThreadPoolTaskRunner
    from prefect_dask import DaskTaskRunner

    from flows.runners import local_process_cluster, task_runner

    assert isinstance(task_runner("threads"), ThreadPoolTaskRunner)
    local = task_runner("dask", dask_workers=3)
    assert isinstance(local, DaskTaskRunner) and local.cluster_class is local_process_cluster
    assert local.cluster_kwargs["n_workers"] == 3 and local.cluster_kwargs["threads_per_worker"] == 1
    assert task_runner("dask", "tcp://h:8786").address == "tcp://h:8786"
    with pytest.raises(ValueError, match="unknown task runner"):
        task_runner("ray")
    with pytest.raises(ValueError, match="at least 1"):
        task_runner("dask", dask_workers=0)


def test_per_worker_loads_once_per_worker_process():
    """A model asked for by many parts is loaded once per worker process (and on every call outside Dask)."""
    from distributed import Client, LocalCluster

    from tasks.workers import per_worker

    def part(_i):
        return os.getpid(), per_worker(("m", 1), lambda: os.urandom(8))

    assert per_worker("k", lambda: os.urandom(8)) != per_worker("k", lambda: os.urandom(8))
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        got = client.gather(client.map(part, range(12), pure=False))
        swapped = client.run(lambda: per_worker(("m", 2), lambda: b"new"))  # a new model replaces the old one
    loaded = {}
    for pid, value in got:
        loaded.setdefault(pid, set()).add(value)
    assert all(len(v) == 1 for v in loaded.values()) and len(set().union(*loaded.values())) == len(loaded)
    assert set(swapped.values()) == {b"new"}


@pytest.mark.slow
def test_embedding_parts_on_worker_processes_are_byte_identical(prefect_harness, tmp_path):
    """The index stages (plan -> 3 embedding parts -> publish) on threads and on a local cluster of 2 worker
    processes publish the same vectors (to float precision), the same chunks and the same term counts (byte for
    byte); the parts' task runs reached the flow's API."""
    import shutil
    from dataclasses import replace

    from prefect import flow

    from flows.profiles import get_profile
    from flows.runners import task_runner
    from flows.stages import Run
    from retrieval.contracts import ENCODER
    from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

    cfg = replace(get_profile("tiny"), embed_parts=3, embed_batch_size=4)
    ckpt = save_tiny_policybert(tmp_path / "ckpt", seed=5)
    out, runs = {}, {}
    for kind in ("threads", "dask"):
        data = tmp_path / kind
        write_clean(policy_docs(), data / "documents_clean")
        shutil.copytree(ckpt, data / ENCODER)

        @flow(name=f"index-parts-{kind}", task_runner=task_runner(kind, dask_workers=2))
        def index_parts(data_dir: str) -> dict:
            return Run(cfg, data_dir).mapped("index-plan", "embed-part", "index", cfg.embed_parts, plan_to_merge=True)

        state = index_parts(str(data), return_state=True)
        assert state.is_completed(), (kind, state)
        out[kind], runs[kind] = state.result(), _task_runs(state.state_details.flow_run_id)
    assert out["threads"]["embedded"] == out["dask"]["embedded"] > 0
    v = {k: tmp_path / k / "index" / out[k]["version"] for k in out}
    assert (v["threads"] / "sparse/counts.npz").read_bytes() == (v["dask"] / "sparse/counts.npz").read_bytes()
    # the same parts in the same order; float sums may differ in the last bits between a process running torch on
    # several threads and a worker running one (Dask gives each worker OMP_NUM_THREADS=1)
    a, b = (np.load(v[k] / "embeddings.npy") for k in ("threads", "dask"))
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5
    import pandas as pd
    assert pd.read_parquet(v["threads"] / "chunks.parquet").equals(pd.read_parquet(v["dask"] / "chunks.parquet"))
    assert runs["dask"].get("embed-part") == 3 and runs["dask"] == runs["threads"], runs
