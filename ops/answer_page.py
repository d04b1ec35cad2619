"""Drive the answer page in headless Chromium (Playwright with the system Chromium, as ``ops.ui_check``
does): start ``flows.serve`` on a data dir, ask questions through the form, time them, keep a screenshot."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(data_dir: str | os.PathLike, port: int | None = None, timeout_s: float = 180.0, env: dict | None = None):
    """``python -m flows.serve`` on ``data_dir`` at 127.0.0.1:``port``; yields the base URL; stopped on exit.

    Raises:
        RuntimeError: the server exited or did not answer within ``timeout_s`` (its stderr in the message).
    """
    port = port or free_port()
    repo = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "flows.serve", "--data-dir", str(data_dir), "--port", str(port)],
                            cwd=repo, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"flows.serve exited {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                urllib.request.urlopen(url + "/", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"flows.serve did not answer on {url} within {timeout_s:.0f} s") from None
                time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def ask_in_browser(url: str, questions: list[str], screenshot: str | os.PathLike | None = None,
                   chromium: str | None = None, timeout_s: float = 60.0) -> list[dict]:
    """Type each question into the page's box and submit; per question: seconds (submit to page loaded),
    status, the answer block's text (``#answer``), the source link's text and href, the error shown, the
    answer's related policies (``related``: each item's text, ``related_hrefs``: their links or None). The last
    page is saved as a PNG to ``screenshot`` (full page)."""
    from playwright.sync_api import sync_playwright

    from ops.ui_check import CHROMIUM_FLAGS, find_chromium

    out = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=find_chromium(chromium), args=list(CHROMIUM_FLAGS))
        try:
            page = browser.new_page(viewport={"width": 1000, "height": 700})
            page.set_default_timeout(int(timeout_s * 1000))
            page.goto(url + "/")
            for q in questions:
                page.fill("input[name=q]", q)
                t = time.perf_counter()
                with page.expect_navigation() as nav:
                    page.click("button[type=submit]")
                status = nav.value.status if nav.value else None
                page.wait_for_load_state("load")
                sec = time.perf_counter() - t
                ans = page.locator("#answer")
                src = page.locator("#answer a.source, #answer span.source").first
                out.append({"question": q, "seconds": sec, "status": status,
                            "answer": ans.inner_text() if ans.count() else "",
                            "mark": page.locator("#answer mark").first.inner_text() if ans.count() else "",
                            "source": src.inner_text() if src.count() else "",
                            "href": src.get_attribute("href") if src.count() else None,
                            "error": page.locator("#error").inner_text() if page.locator("#error").count() else "",
                            "footer": page.locator("footer").inner_text(), **_related(page)})
            if screenshot:
                Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(screenshot), full_page=True)
        finally:
            browser.close()
    return out


def _related(page) -> dict:
    """The related-policies list beside the answer's source (``#answer ol.related``): item texts and links."""
    items = page.locator("#answer ol.related li")
    links = [items.nth(i).locator("a.rel") for i in range(items.count())]
    return {"related": [items.nth(i).inner_text() for i in range(items.count())],
            "related_hrefs": [a.get_attribute("href") if a.count() else None for a in links]}
