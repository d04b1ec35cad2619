"""Browser check of the Prefect UI: headless Chromium opens the last pipeline flow run.

    python -m ops.ui_check --api-url http://127.0.0.1:4200/api --data-dir data

finds the newest run of the ``policy-pipeline`` flow through the server's REST API, loads its page in
the UI with Playwright driving the system Chromium (Debian ``chromium``; Playwright never downloads a
browser here), saves a PNG of the flow-run graph to ``data/ui/flow-run-<name>.png``, opens the
*Task Runs* tab and checks that every task run of that flow run is listed on the page. The result
(run, URL, expected and missing task names, the tab's text, screenshot path, seconds) is written to
``data/ui/flow-run-<name>.json``. Exit status: 0 all task names shown, 1 some missing, 2 the check
could not run (server unreachable, no flow run, no Chromium).

No prefect import: this talks to the server over HTTP only, so it runs from any environment.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import requests

from storage import atomic_write_bytes, atomic_write_text
from storage import layout as L

# as the env notes prescribe for this closed network: no background connections, no GPU, no sandbox (root)
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync")
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
GRAPH_SELECTOR = ".flow-run-graph"


class UICheckError(RuntimeError):
    """The check could not run: server unreachable, no such flow run, or no Chromium."""


@dataclass
class UICheckConfig:
    """Where the server is and how the browser looks at it.

    ``api_url``: the server's API (``…/api``); the UI is served at the same origin without ``/api``.
    ``viewport``: (width, height) in CSS pixels. ``timeout_s``: per page action, seconds.
    ``settle_s``: wait after the graph data arrived, for the canvas to draw, seconds.
    """

    api_url: str = "http://127.0.0.1:4200/api"
    flow_name: str = "policy-pipeline"
    chromium: str | None = None
    viewport: tuple[int, int] = (1600, 1000)
    timeout_s: float = 60.0
    settle_s: float = 2.0

    @property
    def ui_url(self) -> str:
        return self.api_url.rstrip("/").removesuffix("/api")


@dataclass
class UICheckResult:
    """What the browser showed for one flow run (``missing``: task run names absent from the page)."""

    flow_run_id: str
    flow_run_name: str
    state: str
    url: str
    task_runs: list[str]
    missing: list[str]
    graph_png: str
    graph_size_px: tuple[int, int]
    completed_bar_px: int
    page_text: str = field(repr=False)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.missing and bool(self.task_runs)


def find_chromium(explicit: str | None = None) -> str:
    """Path of the Chromium binary: ``explicit``, ``$POLICYBERT_CHROMIUM``, or the first on ``PATH``.

    Raises:
        UICheckError: when none is found (install Debian's ``chromium``: ``make setup`` does).
    """
    for cand in (explicit, os.environ.get("POLICYBERT_CHROMIUM"), *CHROMIUM_NAMES):
        if cand and (path := shutil.which(cand)):
            return path
    raise UICheckError("no Chromium found (tried $POLICYBERT_CHROMIUM, " + ", ".join(CHROMIUM_NAMES)
                       + "); install Debian's chromium (make setup)")


def _post(api_url: str, route: str, body: dict, timeout_s: float) -> list[dict]:
    url = f"{api_url.rstrip('/')}/{route}"
    try:
        resp = requests.post(url, json=body, timeout=timeout_s)
    except requests.RequestException as exc:
        raise UICheckError(f"Prefect API unreachable at {api_url}: {exc}") from exc
    if resp.status_code != 200:
        raise UICheckError(f"POST {url} answered {resp.status_code}: {resp.text[:300]}")
    return resp.json()


def latest_flow_run(api_url: str, flow_name: str, timeout_s: float = 30.0) -> dict:
    """The most recently started run of flow ``flow_name`` (the API's flow-run object).

    Raises:
        UICheckError: server unreachable, or the flow has no started run.
    """
    runs = _post(api_url, "flow_runs/filter",
                 {"flows": {"name": {"any_": [flow_name]}}, "flow_runs": {"start_time": {"is_null_": False}},
                  "sort": "START_TIME_DESC", "limit": 1}, timeout_s)
    if not runs:
        raise UICheckError(f"no started run of flow {flow_name!r} on {api_url}")
    return runs[0]


def task_run_names(api_url: str, flow_run_id: str, timeout_s: float = 30.0) -> list[str]:
    """Names of the task runs of ``flow_run_id``, sorted (up to 200, the API's page size)."""
    runs = _post(api_url, "task_runs/filter",
                 {"flow_runs": {"id": {"any_": [flow_run_id]}}, "limit": 200}, timeout_s)
    return sorted(r["name"] for r in runs)


def completed_pixels(png: bytes) -> int:
    """Pixels of the Completed-state green that the UI paints task bars with (0 on an empty graph)."""
    import numpy as np
    from PIL import Image

    rgb = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return int(((g - r > 60) & (g - b > 40)).sum())


def _task_runs_tab_text(page, timeout_ms: int) -> str:
    """Text of the open Task Runs tab, scrolled to the end (the list is a virtual scroller)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.wait_for_selector("#task-runs-content .task-run-list")
    seen: list[str] = []
    for _ in range(50):  # each pass renders the next chunk of rows
        try:
            page.wait_for_load_state("networkidle", timeout=min(timeout_ms, 10_000))
        except PlaywrightTimeout:  # the UI polls running flow runs: never idle, the rows are there anyway
            pass
        text = page.inner_text("#task-runs-content")
        if text in seen:
            break
        seen.append(text)
        page.locator("#task-runs-content .p-virtual-scroller__bottom").scroll_into_view_if_needed()
    return "\n".join(seen)


def _capture(cfg: UICheckConfig, url: str) -> tuple[bytes, str]:
    """Load ``url``; return (PNG of the graph element, text of the Task Runs tab)."""
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    ms = int(cfg.timeout_s * 1000)
    with sync_playwright() as pw:
        try:
            browser = pw.chromium.launch(executable_path=find_chromium(cfg.chromium), args=list(CHROMIUM_FLAGS))
        except PlaywrightError as exc:
            raise UICheckError(f"Chromium did not start: {str(exc).splitlines()[0]}") from exc
        try:
            page = browser.new_page(viewport={"width": cfg.viewport[0], "height": cfg.viewport[1]})
            page.set_default_timeout(ms)
            with page.expect_response(lambda r: "/graph-v2" in r.url and r.ok):
                page.goto(url)
            page.wait_for_selector(f"{GRAPH_SELECTOR} canvas", state="attached")
            time.sleep(cfg.settle_s)  # the graph animates its nodes into place after the data arrives
            png = page.locator(GRAPH_SELECTOR).first.screenshot(type="png")
            page.click("#task-runs")
            text = _task_runs_tab_text(page, ms)
        except PlaywrightError as exc:
            raise UICheckError(f"the UI page {url} did not show the flow run: {str(exc).splitlines()[0]}") from exc
        finally:
            browser.close()
    return png, text


def check_flow_run_page(cfg: UICheckConfig, data_dir: str | os.PathLike,
                        flow_run_id: str | None = None) -> UICheckResult:
    """Open the flow run (default: the latest of ``cfg.flow_name``) in the UI; save graph PNG and report JSON.

    Files: ``<data_dir>/ui/flow-run-<name>.png`` (the graph element, viewport width) and ``.json``
    (this result), both written atomically. Raises :class:`UICheckError` when the check cannot run.
    """
    from PIL import Image

    t0 = time.perf_counter()
    if flow_run_id:
        found = _post(cfg.api_url, "flow_runs/filter", {"flow_runs": {"id": {"any_": [flow_run_id]}}}, cfg.timeout_s)
        if not found:
            raise UICheckError(f"no flow run {flow_run_id} on {cfg.api_url}")
        run = found[0]
    else:
        run = latest_flow_run(cfg.api_url, cfg.flow_name, cfg.timeout_s)
    names = task_run_names(cfg.api_url, run["id"], cfg.timeout_s)
    url = f"{cfg.ui_url}/runs/flow-run/{run['id']}"
    png, text = _capture(cfg, url)
    out = Path(data_dir) / L.UI / f"flow-run-{run['name']}.png"
    atomic_write_bytes(out, png)
    result = UICheckResult(
        flow_run_id=run["id"], flow_run_name=run["name"], state=run.get("state_name") or run["state_type"],
        url=url, task_runs=names, missing=[n for n in names if n not in text], graph_png=str(out),
        graph_size_px=Image.open(io.BytesIO(png)).size, completed_bar_px=completed_pixels(png), page_text=text,
        seconds=round(time.perf_counter() - t0, 2))
    atomic_write_text(out.with_suffix(".json"), json.dumps(asdict(result), ensure_ascii=False, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    """CLI: see the module docstring."""
    ap = argparse.ArgumentParser(prog="python -m ops.ui_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--api-url", default=os.environ.get("PREFECT_API_URL") or UICheckConfig.api_url)
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--flow", default=UICheckConfig.flow_name, help="flow name (default: policy-pipeline)")
    ap.add_argument("--flow-run-id", default=None, help="a specific flow run instead of the latest")
    ap.add_argument("--chromium", default=None, help="Chromium binary (default: $POLICYBERT_CHROMIUM or PATH)")
    args = ap.parse_args(argv)
    cfg = UICheckConfig(api_url=args.api_url, flow_name=args.flow, chromium=args.chromium)
    try:
        res = check_flow_run_page(cfg, args.data_dir, args.flow_run_id)
    except UICheckError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"flow run {res.flow_run_name} ({res.state}) {res.url}\n"
          f"task runs listed in the UI: {len(res.task_runs) - len(res.missing)}/{len(res.task_runs)}"
          + (f"; missing: {', '.join(res.missing)}" if res.missing else "") +
          f"\ngraph screenshot: {res.graph_png} ({res.graph_size_px[0]}x{res.graph_size_px[1]} px, "
          f"{res.completed_bar_px} px of Completed bars) in {res.seconds:.1f} s")
    return 0 if res.ok else 1


if __name__ == "__main__":
    sys.exit(main())
