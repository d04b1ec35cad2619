"""Operations: a real Prefect server on 127.0.0.1, a process worker, the deployments of prefect.yaml,
and `prefect deployment run` of the whole pipeline on the 5-document slice."""
import json
import os
import shutil
import socket
import subprocess

import pytest
import yaml

from storage import layout as L
from storage import read_table
from tests.conftest import REPO


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_prefect_yaml_deployments():
    doc = yaml.safe_load((REPO / "prefect.yaml").read_text())
    deps = {d["name"]: d for d in doc["deployments"]}
    assert set(deps) == {"daily-corpus-refresh", "weekly-model-rebuild", "index-refresh", "full-pipeline"}
    for d in deps.values():
        assert d["work_pool"]["name"] == "policybert-process"
        for s in d["schedules"]:
            assert s["timezone"] == "Asia/Shanghai" and len(s["cron"].split()) == 5
        path, func = d["entrypoint"].split(":")
        assert f"def {func}(" in (REPO / path).read_text()
    pull = json.dumps(doc["pull"])
    assert "{{ $POLICYBERT_REPO }}" in pull and str(REPO) not in pull


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("prefect-server")
    env = {**os.environ, "POLICYBERT_PREFECT_HOME": str(home), "PREFECT_PORT": str(_free_port()),
           "PREFECT_BIN": str(REPO / ".venv" / "bin" / "prefect") if (REPO / ".venv" / "bin" / "prefect").exists()
           else shutil.which("prefect") or "prefect"}
    for k in ("PREFECT_API_URL", "PREFECT_HOME"):
        env.pop(k, None)
    script = str(REPO / "scripts" / "prefect-local.sh")
    start = subprocess.run([script, "server"], env=env, capture_output=True, text=True, timeout=180)
    if start.returncode != 0:
        pytest.skip(f"Prefect server could not start here: {start.stderr.strip()[-500:]}")
    try:
        yield script, env
    finally:
        subprocess.run([script, "stop"], env=env, timeout=60)


@pytest.mark.slow
def test_deployment_run_completes_against_a_local_server(server, real_slice, tmp_path):
    script, env = server
    dep = subprocess.run([script, "deploy"], env=env, capture_output=True, text=True, timeout=300)
    assert dep.returncode == 0, dep.stdout[-3000:] + dep.stderr[-3000:]
    data = tmp_path / "data"
    run = subprocess.run([script, "run", "policy-pipeline/full-pipeline", "--param", f"input={real_slice}",
                          "--param", f"data_dir={data}", "--param", "profile=tiny"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    worker = subprocess.run([script, "worker", "--run-once"], env=env, capture_output=True, text=True, timeout=600)
    log = worker.stdout + worker.stderr
    assert worker.returncode == 0, log[-4000:]
    assert "Completed" in log, log[-4000:]
    assert len(read_table(data / L.DOCUMENTS)) == 5 and (data / L.INDEX / "CURRENT").is_file()
    assert (data / L.LINEAGE).read_text(encoding="utf-8").startswith("# Lineage")
    # the deployments carry their schedules, parameter schema and an unfrozen pull step
    prefect_bin = env["PREFECT_BIN"]
    ins_env = {**env, "PREFECT_API_URL": f"http://127.0.0.1:{env['PREFECT_PORT']}/api"}
    ins = subprocess.run([prefect_bin, "deployment", "inspect", "corpus-refresh/daily-corpus-refresh", "-o", "json"],
                         env=ins_env, capture_output=True, text=True, timeout=120)
    assert ins.returncode == 0, ins.stderr[-2000:]
    d = json.loads(ins.stdout)
    sched = d["schedules"][0]["schedule"]
    assert sched["cron"] == "0 2 * * *" and sched["timezone"] == "Asia/Shanghai"
    assert {"data_dir", "input", "profile", "refresh"} <= set(d["parameter_openapi_schema"]["properties"])
    assert "{{ $POLICYBERT_REPO }}" in json.dumps(d["pull_steps"])
    # orchestrator limits created by the deploy script
    gpu = subprocess.run([prefect_bin, "concurrency-limit", "inspect", "gpu"], env=ins_env, capture_output=True,
                         text=True, timeout=60)
    assert gpu.returncode == 0 and "gpu" in gpu.stdout
    gcl = subprocess.run([prefect_bin, "global-concurrency-limit", "inspect", "crawl-www.gov.cn"], env=ins_env,
                         capture_output=True, text=True, timeout=60)
    assert gcl.returncode == 0, gcl.stdout + gcl.stderr
    _check_ui_shows_the_run(script, env, ins_env["PREFECT_API_URL"], data)


def _check_ui_shows_the_run(script, env, api_url, data):
    """Headless Chromium opens the run in the UI: the graph PNG is saved and every task run is on the page."""
    import requests
    from PIL import Image

    ui = subprocess.run([script, "ui-check", "--data-dir", str(data)], env=env, capture_output=True, text=True,
                        timeout=300)
    assert ui.returncode == 0, ui.stdout[-3000:] + ui.stderr[-3000:]
    run = requests.post(f"{api_url}/flow_runs/filter", json={"sort": "START_TIME_DESC", "limit": 1},
                        timeout=30).json()[0]
    names = [t["name"] for t in requests.post(f"{api_url}/task_runs/filter", json={
        "flow_runs": {"id": {"any_": [run["id"]]}}, "limit": 200}, timeout=30).json()]
    assert len(names) >= 15 and any(n.startswith("pretrain-") for n in names), names
    report = json.loads((data / L.UI / f"flow-run-{run['name']}.json").read_text(encoding="utf-8"))
    assert report["flow_run_id"] == run["id"] and report["missing"] == []
    for name in names:  # the text the browser rendered from the Task Runs tab
        assert name in report["page_text"], name
    png = Image.open(data / L.UI / f"flow-run-{run['name']}.png")
    assert png.format == "PNG" and png.size[0] >= 800 and png.size[1] >= 200
    assert report["completed_bar_px"] > 1000  # the graph drew its (green) Completed task bars


def test_completed_pixels_counts_state_green_only():
    import io

    from PIL import Image

    from ops.ui_check import completed_pixels

    img = Image.new("RGB", (100, 50), (30, 31, 36))  # the UI's dark background
    img.paste((40, 160, 80), (10, 10, 40, 20))  # a Completed bar, 30 x 10 px
    img.paste((200, 60, 60), (50, 10, 90, 20))  # a Failed bar
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    assert completed_pixels(buf.getvalue()) == 300


def test_ui_check_names_an_unreachable_server(tmp_path, capsys):
    from ops.ui_check import main

    assert main(["--api-url", f"http://127.0.0.1:{_free_port()}/api", "--data-dir", str(tmp_path)]) == 2
    assert "Prefect API unreachable" in capsys.readouterr().err
    assert not (tmp_path / L.UI).exists()
