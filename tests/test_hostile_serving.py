"""Hostile input against the serving surface, tried as an attacker would on loopback: script URLs as source
links (and at import), the answer page's response headers, oversized, compressed and trickling request bodies,
more questions at once than the server answers, error pages that would name the data dir, hostile lines in a
``flows.ask --questions`` batch, and a scorer file nested too deep for the JSON parser."""
from __future__ import annotations

import html
import json
import socket
import threading
import time
from html.parser import HTMLParser

import pytest

from crawler.textsafe import strip_controls

SCRIPT_URLS = ["javascript:alert(document.domain)", "JaVaScRiPt:alert(document.domain)",
               "  \t\njavascript:alert(document.domain)", "\x01\x00 javascript:alert(document.domain)",
               "java\tscript:alert(document.domain)", "data:text/html,<script>alert(1)</script>",
               "vbscript:msgbox(1)", "https://", "//evil.example/x", "/relative/path"]
FORM = {"content-type": "application/x-www-form-urlencoded"}


class _Links(HTMLParser):
    """Every ``href``/``src``/``action`` of a page, and whether it holds a script element."""

    def __init__(self):
        super().__init__()
        self.urls: list[str] = []
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        self.scripts += tag == "script"
        self.urls += [v for k, v in attrs if k in ("href", "src", "action", "formaction") and v is not None]


def _links(text: str) -> _Links:
    p = _Links()
    p.feed(text)
    return p


def _linear_scorer():
    """A scorer of the current features with zero weights: every answer is real, its ranking uninformed."""
    from answers.features import DOC_FEATURES, SPAN_FEATURES
    from answers.scorer import AnswerScorer, LinearModel

    def model(names):
        return LinearModel(list(names), [0.0] * len(names), [1.0] * len(names), [0.1] * len(names), 0.0)

    return AnswerScorer(model(DOC_FEATURES), model(SPAN_FEATURES))


@pytest.fixture
def bare(tmp_path):
    """A real Answerer over a data dir with no index published yet (as a server started too early sees)."""
    from answers import Answerer

    data = tmp_path / "srv-data-dir"
    data.mkdir()
    return Answerer(data, scorer=_linear_scorer())


def _client(answerer, **limits):
    from fastapi.testclient import TestClient

    from answers.web import Limits, create_app

    return TestClient(create_app(answerer, Limits(**limits)), raise_server_exceptions=False)


# 1. script URLs -------------------------------------------------------------------------------------------


def test_a_source_url_is_a_link_only_when_it_is_http():
    from answers.web import render_result

    def result(url):
        a = {"text": "数据", "score": 0.9, "doc_id": "d0", "title": "标题", "url": url, "source": "国务院",
             "pubtime": None, "start": 0, "end": 2, "passage": "数据要素", "passage_start": 0}
        return {"answers": [a, {**a, "doc_id": "d1"}], "found": True, "threshold": 0.3}

    for url in SCRIPT_URLS:
        page = render_result(result(url))
        assert _links(page).urls == [] and _links(page).scripts == 0, (url, page)
        assert html.escape(strip_controls(url, one_line=True)) in page  # shown as escaped text
    page = render_result(result(' \x01https://www.gov.cn/zhengce/a.htm?x=1&y="2"'))
    assert _links(page).urls == ['https://www.gov.cn/zhengce/a.htm?x=1&y="2"'] * 2
    assert "&amp;y=&quot;2&quot;" in page


def test_http_url_takes_only_absolute_http_addresses():
    from crawler.csv_import import http_url

    for url in SCRIPT_URLS + ["http://a b.cn/", "http://gov.cn@evil.example/", "https:/x.cn", "ftp://x.cn/a"]:
        assert http_url(url) is None, url
    assert http_url("  HTTPS://WWW.GOV.CN/a?b#c\r\n") == "HTTPS://WWW.GOV.CN/a?b#c"
    assert http_url("http://www.gov.cn") == "http://www.gov.cn"


def test_records_import_keeps_a_document_with_a_script_url_without_its_url(tmp_path):
    from crawler.records_import import ColumnMapping, read_records

    f = tmp_path / "r.jsonl"
    recs = [{"id": i, "text": f"第{i}份文件的正文。", "url": u} for i, u in enumerate(SCRIPT_URLS)]
    recs.append({"id": "ok", "text": "正文。", "url": "https://www.gov.cn/a.htm"})
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n", encoding="utf-8")
    docs, report, rejects = read_records(f, ColumnMapping(url_column="url", title_column=None))
    assert rejects == [] and len(docs) == len(recs)
    assert [u if isinstance(u, str) else None for u in docs["url"]] == [None] * len(SCRIPT_URLS) + [
        "https://www.gov.cn/a.htm"]
    assert report.warnings["url_not_http"] == len(SCRIPT_URLS)


def test_csv_import_joins_only_http_source_urls(tmp_path):
    from crawler.csv_import import read_corpus_csv
    from tests.conftest import write_corpus

    rows = [{"title": f"文件{i}", "pubtime": "2023-01-05", "channel": "国务院", "describes": f"c{i}",
             "contentText": f"第{i}份文件的正文。"} for i in range(len(SCRIPT_URLS) + 1)]
    corpus = write_corpus(tmp_path / "docs.csv", rows)
    sources = tmp_path / "sources.csv"
    urls = SCRIPT_URLS + ["https://www.gov.cn/b.htm"]
    with open(sources, "w", encoding="utf-8", newline="") as fh:
        import csv

        w = csv.writer(fh)
        w.writerow(["url", "describes"])
        w.writerows([u, f"c{i}"] for i, u in enumerate(urls))
    docs, report = read_corpus_csv(corpus, sources)
    assert len(docs) == len(rows)
    assert [u if isinstance(u, str) else None for u in docs["url"]] == [None] * len(SCRIPT_URLS) + [
        "https://www.gov.cn/b.htm"]
    assert report.warnings["citation_without_url"] == len(SCRIPT_URLS)


def test_every_response_carries_the_content_security_policy(bare):
    from answers.web import CONTENT_SECURITY_POLICY

    c = _client(bare)
    responses = [c.get("/"), c.get("/?q=数据政策&k=3"), c.get("/no-such-page"), c.get("/api/answer?q="),
                 c.post("/ask", content=b"q=&k=3", headers=FORM),
                 c.post("/ask", content=b"q=%E6%95%B0&k=3", headers=FORM)]
    assert [r.status_code for r in responses] == [200, 503, 404, 400, 400, 503]
    for r in responses:
        assert r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, r.request.url
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
    # the policy allows what the page uses and nothing else: no script, no resource from anywhere
    home = responses[0].text
    assert _links(home).scripts == 0 and _links(home).urls == ["/ask"] and "<style>" in home
    assert "script-src" not in CONTENT_SECURITY_POLICY and "default-src 'none'" in CONTENT_SECURITY_POLICY


# 2. bodies, slots, error pages ------------------------------------------------------------------------------


def test_a_body_over_the_cap_is_413_announced_or_not(bare):
    c = _client(bare, max_body_bytes=64 * 1024)
    r = c.post("/ask", content=b"q=" + b"a" * 100_000, headers=FORM)
    assert r.status_code == 413 and "65536 bytes" in r.text

    def chunks():  # no Content-Length: chunked, 1 MB in 1 KB pieces (that reading stops at the cap: on loopback)
        for i in range(1024):
            yield (b"q=" if i == 0 else b"") + b"a" * 1024

    r = c.post("/ask", content=chunks(), headers=FORM)
    assert r.status_code == 413 and "content-length" not in r.request.headers
    r = c.post("/ask", content=b"q=abc&k=3", headers={**FORM, "content-length": "9x"})
    assert r.status_code in (400, 413)


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip", "deflate", "x-unknown", "identity, gzip", "GZIP"])
def test_a_compressed_body_is_415(bare, coding):
    c = _client(bare)
    r = c.post("/ask", content=b"q=%E6%95%B0%E6%8D%AE&k=3", headers={**FORM, "content-encoding": coding})
    assert r.status_code == 415 and "Content-Encoding" in r.text
    assert r.headers["content-security-policy"]


def test_identity_body_is_read(bare):
    r = _client(bare).post("/ask", content=b"q=&k=3", headers={**FORM, "content-encoding": "identity"})
    assert r.status_code == 400 and "empty" in r.text


def test_error_pages_never_show_the_data_dir(bare, tmp_path):
    root = str(tmp_path)
    c = _client(bare)
    home = c.get("/")
    assert home.status_code == 200 and root not in home.text and "srv-data-dir" not in home.text
    for r in (c.post("/ask", content="q=数据政策&k=3".encode(), headers=FORM), c.get("/api/answer?q=数据&k=3")):
        assert r.status_code == 503 and root not in r.text and "srv-data-dir" not in r.text
    # an internal error that is not a missing index: CURRENT names no version (its message names the file)
    (bare.data_dir / "index").mkdir()
    (bare.data_dir / "index" / "CURRENT").write_text("../../etc")
    for r in (c.get("/?q=数据政策"), c.get("/api/answer?q=数据&k=3"), c.get("/")):
        assert root not in r.text and "srv-data-dir" not in r.text and "Traceback" not in r.text, r.text
    assert c.get("/?q=数据政策").status_code == 500 and "服务器内部错误" in c.get("/?q=数据政策").text
    assert c.get("/api/answer?q=数据&k=3").json()["error"] == "internal error"


class _Serving:
    """``create_app`` under a real uvicorn on 127.0.0.1 (a thread of this process), with flows.serve's limits."""

    def __init__(self, answerer, **limits):
        import uvicorn

        from answers.web import Limits, create_app
        from flows.serve import UVICORN_LIMITS

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        cfg = uvicorn.Config(create_app(answerer, Limits(**limits)), log_level="critical", **UVICORN_LIMITS)
        self.server = uvicorn.Server(cfg)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()

    def raw(self, data: bytes, timeout: float = 5.0) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.sendall(data)
        return s


def _status(s: socket.socket) -> int:
    """The status code of the response on ``s`` (raises socket.timeout when none comes)."""
    head = b""
    while b"\r\n" not in head:
        got = s.recv(4096)
        if not got:
            break
        head += got
    return int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0


def test_on_loopback_a_trickling_body_is_408_and_an_unending_one_413(bare):
    with _Serving(bare, body_timeout_s=1.0, max_body_bytes=64 * 1024) as srv:
        # 10 of the 100 announced bytes, then nothing: the server answers instead of waiting forever
        s = srv.raw(b"POST /ask HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                    b"Content-Length: 100\r\n\r\nq=%E6%95%B0")
        t = time.monotonic()
        assert _status(s) == 408 and time.monotonic() - t < 4
        s.close()
        # chunked, no Content-Length, 80 KB and no last chunk: refused at the cap without waiting for the end
        s = srv.raw(b"POST /ask HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + (b"2000\r\n" + b"a" * 0x2000 + b"\r\n") * 10)
        assert _status(s) == 413
        s.close()
        # headers that never end, past uvicorn's bound on an incomplete request head
        s = srv.raw(b"GET / HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 40_000)
        try:
            code = _status(s)
        except (ConnectionResetError, BrokenPipeError):
            code = 0
        assert code in (0, 400, 431), code
        s.close()
        # the server keeps serving
        s = srv.raw(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert _status(s) == 200
        s.close()


# answers over a small index ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served_data(tmp_path_factory):
    """A data dir built as ``answer_builders.build_data_dir`` builds it (8 documents, tiny PolicyBERT index),
    each document's URL a script URL but the last's (a real one), and a real Answerer over it."""
    import pandas as pd

    from answers import Answerer
    from retrieval.chunks import ChunkConfig
    from retrieval.sparse import make_tokenizer
    from retrieval.stages import index_stage
    from tests.retrieval_builders import policy_docs, save_tiny_policybert, write_clean

    tok = make_tokenizer("auto")
    root = tmp_path_factory.mktemp("hostile-serving")
    docs = policy_docs()
    docs["url"] = pd.Series([*SCRIPT_URLS[:len(docs) - 1], "https://www.gov.cn/zhengce/d7.htm"], dtype=object)
    data = root / "data"
    clean = write_clean(docs, data / "documents_clean")
    ckpt = save_tiny_policybert(root / "models" / "finetune", seed=1)
    index_stage(clean, ckpt, data / "index", ChunkConfig(max_chars=120, overlap=30), tokenizer=tok)
    return data, Answerer(data, scorer=_linear_scorer(), tokenizer=tok), docs


def test_answer_page_never_links_a_script_url(served_data):
    from answers.web import CONTENT_SECURITY_POLICY
    from tests.retrieval_builders import TOPICS

    data, answerer, docs = served_data
    c = _client(answerer)
    seen = set()
    for _, topic, _ in TOPICS:
        r = c.post("/ask", data={"q": f"{topic}工作现就哪些方面提出意见？", "k": "8"})
        assert r.status_code == 200 and r.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        links = _links(r.text)
        assert links.scripts == 0
        assert all(u == "/ask" or u == "https://www.gov.cn/zhengce/d7.htm" for u in links.urls), links.urls
        seen.update(links.urls)
        assert 'href="javascript' not in r.text.lower() and "<script>" not in r.text
    assert "https://www.gov.cn/zhengce/d7.htm" in seen  # a real URL still is a link


def test_questions_beyond_the_answering_slots_get_503_and_the_server_recovers(served_data):
    data, answerer, _ = served_data

    class Held:
        """The real answerer, each answer held at a gate until the test opens it."""

        def __init__(self, inner):
            self.inner, self.entered, self.gate = inner, threading.Event(), threading.Event()

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def answer(self, q, k=3, **scope):
            self.entered.set()
            assert self.gate.wait(30)
            return self.inner.answer(q, k, **scope)

    held = Held(answerer)
    c = _client(held, max_answering=1, queue_wait_s=0.2)
    first = {}
    t = threading.Thread(target=lambda: first.update(r=c.post("/ask", data={"q": "养老托育工作现就哪些方面提出意见？"})))
    t.start()
    assert held.entered.wait(30)
    busy = c.post("/ask", data={"q": "乡村振兴工作现就哪些方面提出意见？"})
    assert busy.status_code == 503 and busy.headers["retry-after"] and "繁忙" in busy.text
    assert c.get("/api/answer", params={"q": "数据"}).status_code == 503
    held.gate.set()
    t.join(60)
    assert first["r"].status_code == 200 and "<mark>" in first["r"].text
    assert c.post("/ask", data={"q": "乡村振兴工作现就哪些方面提出意见？"}).status_code == 200


# 4. hostile lines in a --questions batch ---------------------------------------------------------------------


def test_batch_keeps_going_past_hostile_lines_and_reads_a_bom(served_data, tmp_path, capsys):
    from flows.ask import _batch

    _, answerer, _ = served_data
    f = tmp_path / "q.jsonl"
    with open(f, "wb") as fh:
        fh.write(b"\xef\xbb\xbf" + json.dumps({"qid": "bom", "question": "养老托育工作现就哪些方面提出意见？"},
                                              ensure_ascii=False).encode() + b"\n")
        fh.write(b'{"qid": "s1", "question": "\\ud800"}\n')
        fh.write(b'{"qid": "s2", "question": "\\u517b\\u8001\\ud800\\u6258\\u80b2"}\n')
        fh.write(b'{"qid": "\\udfff", "question": "\\u517b\\u8001"}\n')
        fh.write(b"[" * 200_000 + b"\n")
        fh.write(b'{"qid": "deep", "question": ' + b"[" * 200_000 + b"}\n")
        fh.write(json.dumps({"qid": "last", "question": "乡村振兴第7项要完善什么？"}, ensure_ascii=False).encode() + b"\n")
    assert _batch(answerer, str(f), 3) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["line"] for x in out] == [1, 2, 3, 4, 5, 6, 7]
    assert out[0]["qid"] == "bom" and out[0]["answers"] and "error" not in out[0]
    for x in out[1:3]:
        assert "not valid Unicode" in x["error"] and "answers" not in x
    assert out[3]["qid"] is None and out[3]["answers"]  # a qid that cannot be written is not echoed
    assert "nested too deep" in out[4]["error"] and "nested too deep" in out[5]["error"]
    assert out[6]["qid"] == "last" and out[6]["answers"]


def test_records_import_reads_a_bom_on_the_first_line(tmp_path):
    from crawler.records_import import read_records

    f = tmp_path / "r.jsonl"
    f.write_bytes(b"\xef\xbb\xbf" + '{"id": "a", "text": "第一份。"}\n{"id": "b", "text": "第二份。"}\n'.encode())
    docs, _, rejects = read_records(f)
    assert rejects == [] and docs["external_id"].tolist() == ["a", "b"]


# 5. a scorer file nested too deep ---------------------------------------------------------------------------


def test_a_scorer_file_nested_too_deep_is_a_value_error():
    from answers.scorer import AnswerScorer

    with pytest.raises(ValueError, match="nested too deep"):
        AnswerScorer.from_json("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="nested too deep"):
        AnswerScorer.from_json('{"format": ' + '{"a": ' * 100_000 + "1" + "}" * 100_001)
    with pytest.raises(ValueError, match="not an answer scorer"):  # shallow JSON that is no scorer: as before
        AnswerScorer.from_json("[[1]]")
