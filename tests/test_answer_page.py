"""The answer page in headless Chromium (system Chromium through Playwright): ask, see the answer and its
source, survive a bad question, keep a screenshot."""
from __future__ import annotations

import shutil

import pytest

from tests.answer_builders import build_data_dir


@pytest.mark.slow
def test_page_in_chromium_shows_answer_and_source(tmp_path):
    from ops.answer_page import ask_in_browser, served
    from ops.ui_check import UICheckError, find_chromium
    from retrieval.sparse import make_tokenizer

    try:
        find_chromium()
    except UICheckError as exc:
        pytest.skip(str(exc))
    tok = make_tokenizer("auto")
    data = build_data_dir(tmp_path, tok)
    with served(data) as url:
        got = ask_in_browser(url, ["？？？", "生态环境工作现就哪些方面提出意见？"], tmp_path / "page.png")
    bad, good = got
    assert bad["status"] == 400 and "no letters or digits" in bad["error"]
    assert good["status"] == 200 and good["mark"] and good["mark"] in good["answer"]
    assert "生态环境" in good["answer"] and good["source"] == "关于加强生态环境保护坚决打好污染防治攻坚战的意见"
    assert "v1" in good["footer"] and "models" in good["footer"]
    png = (tmp_path / "page.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    shutil.copy(tmp_path / "page.png", tmp_path / "kept.png")
