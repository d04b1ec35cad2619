"""The answer service made safe to expose (SPEC §9), on a real tiny index: idle and slow-header sockets cannot
lock requests out of a real uvicorn on loopback, API keys (hashed at rest, ``flows.keys``), rate limits (429
with ``Retry-After``), request ids and JSON access logs, ``/healthz`` and ``/readyz``, Prometheus metrics, a
client leaving mid-body, and ``flows.serve --workers 2``."""
from __future__ import annotations

import io
import json
import logging
import socket
import statistics
import sys
import threading
import time

import pytest

from tests.test_hostile_serving import _linear_scorer

FORM = {"content-type": "application/x-www-form-urlencoded"}
QUESTION = "养老托育工作现就哪些方面提出意见？"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """``answer_builders.build_data_dir`` without a scorer (8 documents, tiny PolicyBERT index ``v1``)."""
    from retrieval.sparse import make_tokenizer
    from tests.answer_builders import build_data_dir

    tok = make_tokenizer("auto")
    return build_data_dir(tmp_path_factory.mktemp("exposed"), tok, scorer=False), tok


@pytest.fixture(scope="module")
def answerer(data):
    from answers import Answerer

    d, tok = data
    return Answerer(d, scorer=_linear_scorer(), tokenizer=tok)


def _app(answerer, **cfg):
    from answers.service.app import ServiceConfig, service_app

    cfg.setdefault("rate_per_key", "")
    cfg.setdefault("rate_per_address", "")
    return service_app(answerer, ServiceConfig(str(answerer.data_dir), **cfg))


def _client(answerer, **cfg):
    from fastapi.testclient import TestClient

    return TestClient(_app(answerer, **cfg), raise_server_exceptions=False)


class _Server:
    """``app`` under a real uvicorn on 127.0.0.1 (a thread of this process) with ``settings`` (uvicorn.Config
    keyword arguments: flows.serve's by default)."""

    def __init__(self, app, settings: dict):
        import uvicorn

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="critical", log_config=None,
                                                    access_log=False, **settings))
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

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, float]:
        """(status, seconds) of ``GET path`` on a new connection (status 0: the connection was dropped)."""
        t = time.perf_counter()
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            head = b""
            while b"\r\n" not in head:
                got = s.recv(4096)
                if not got:
                    break
                head += got
        code = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.1 ") else 0
        return code, time.perf_counter() - t


def _closed(s: socket.socket) -> bool:
    """True when the server closed ``s`` (EOF or reset); False when it is still open after 0.2 s."""
    s.settimeout(0.2)
    try:
        return s.recv(1) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _siege(srv: _Server, idle: int, tricklers: int, seconds: float):
    """Open ``idle`` sockets that send nothing and ``tricklers`` that send a request line and then one header
    byte each 0.3 s; meanwhile GET /healthz (and /api/answer every 5th) one after another for ``seconds``.
    Returns (sockets, [(status, seconds)])."""
    socks = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(idle)]
    slow = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(tricklers)]
    for s in slow:
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
    stop = threading.Event()

    def trickle():
        while not stop.is_set():
            for s in slow:
                try:
                    s.send(b"X")
                except OSError:
                    pass
            stop.wait(0.3)

    t = threading.Thread(target=trickle, daemon=True)
    t.start()
    got, end, i = [], time.monotonic() + seconds, 0
    while time.monotonic() < end:
        path = "/api/answer?q=%E6%95%B0%E6%8D%AE&k=3" if i % 5 == 4 else "/healthz"
        try:
            got.append(srv.get(path))
        except OSError:
            got.append((0, 5.0))
        i += 1
    stop.set()
    t.join(5)
    return socks + slow, got


def test_idle_and_trickling_sockets_do_not_lock_requests_out(answerer):
    from answers.service.conn_guard import ConnectionBounds
    from flows.serve import uvicorn_settings

    bounds = ConnectionBounds(header_timeout_s=2.0, max_connections=1024, max_requests=64)
    with _Server(_app(answerer), uvicorn_settings(bounds)) as srv:
        socks, got = _siege(srv, idle=200, tricklers=20, seconds=4.0)
        try:
            codes = [c for c, _ in got]
            p95 = statistics.quantiles([s for _, s in got], n=20)[-1]
            assert len(got) >= 10 and set(codes) == {200}, codes
            assert p95 <= 1.0, p95
            # every idle and trickling socket is closed by now (4 s > the 2 s deadline), without a response
            assert all(_closed(s) for s in socks)
        finally:
            for s in socks:
                s.close()


def test_without_the_guard_idle_sockets_lock_requests_out(answerer):
    """The bounds flows.serve had before the guard (uvicorn's limit_concurrency counts idle sockets): the
    siege above gets 503s and keeps its sockets, so the test above can fail."""
    old = {"limit_concurrency": 64, "timeout_keep_alive": 5, "h11_max_incomplete_event_size": 16 * 1024}
    with _Server(_app(answerer), old) as srv:
        socks, got = _siege(srv, idle=70, tricklers=0, seconds=1.0)
        try:
            assert {c for c, _ in got} == {503}
            assert not any(_closed(s) for s in socks[:5])
        finally:
            for s in socks:
                s.close()


def test_connections_over_the_cap_close_the_oldest_idle_one(answerer):
    from answers.service.conn_guard import ConnectionBounds
    from flows.serve import uvicorn_settings

    bounds = ConnectionBounds(header_timeout_s=30.0, max_connections=8, max_requests=64)
    with _Server(_app(answerer), uvicorn_settings(bounds)) as srv:
        socks = []
        for _ in range(8):
            socks.append(socket.create_connection(("127.0.0.1", srv.port)))
            time.sleep(0.02)
        try:
            assert srv.get("/healthz")[0] == 200  # the 9th connection is served: the oldest idle one goes
            assert _closed(socks[0]) and not _closed(socks[-1])
        finally:
            for s in socks:
                s.close()


def test_a_keep_alive_connection_trickling_its_next_head_is_closed(answerer):
    from answers.service.conn_guard import ConnectionBounds
    from flows.serve import uvicorn_settings

    bounds = ConnectionBounds(header_timeout_s=1.5, max_connections=64, max_requests=64)
    with _Server(_app(answerer), uvicorn_settings(bounds)) as srv:
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert s.recv(4096).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET / HTTP/1.1\r\n")  # the next request's head, a byte at a time (each byte re-arms
        t, closed = time.monotonic(), False  # uvicorn's keep-alive timer, never the head deadline)
        while time.monotonic() - t < 6 and not closed:
            try:
                s.sendall(b"X")
            except OSError:
                closed = True
            closed = closed or _closed(s)
        assert closed and 1.0 < time.monotonic() - t < 4.0
        s.close()


def test_requests_in_flight_are_bounded_apart_from_connections(answerer):
    from answers.service.conn_guard import ConnectionBounds
    from flows.serve import uvicorn_settings

    bounds = ConnectionBounds(header_timeout_s=5.0, max_connections=64, max_requests=1)
    with _Server(_app(answerer), uvicorn_settings(bounds)) as srv:
        held = socket.create_connection(("127.0.0.1", srv.port))  # one request in flight: its body trickles
        held.sendall(b"POST /ask HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                     b"Content-Length: 100\r\n\r\nq=")
        time.sleep(0.3)
        try:
            assert srv.get("/healthz")[0] == 503
        finally:
            held.close()
        time.sleep(0.3)
        assert srv.get("/healthz")[0] == 200


# keys --------------------------------------------------------------------------------------------------------


def test_keys_cli_creates_lists_and_revokes_hashed_keys(tmp_path, capsys):
    from flows.keys import main

    assert main(["create", "--data-dir", str(tmp_path), "--name", "lab"]) == 0
    key = capsys.readouterr().out.strip()
    assert key.startswith("pa_") and len(key) > 40
    stored = (tmp_path / "service" / "keys.json").read_text()
    assert key not in stored and json.loads(stored)["keys"][0]["name"] == "lab"
    assert main(["create", "--data-dir", str(tmp_path), "--name", "lab"]) == 2
    assert "exists" in capsys.readouterr().err
    assert main(["create", "--data-dir", str(tmp_path), "--name", "bad name!"]) == 2
    assert capsys.readouterr().err.startswith("error: key name")
    assert main(["list", "--data-dir", str(tmp_path)]) == 0
    listed = capsys.readouterr().out
    assert "lab" in listed and key not in listed
    assert main(["revoke", "lab", "--data-dir", str(tmp_path)]) == 0
    assert main(["revoke", "lab", "--data-dir", str(tmp_path)]) == 2
    assert main(["list", "--data-dir", str(tmp_path / "missing")]) == 2


def test_api_needs_a_live_key_once_one_exists(answerer):
    from answers.service.keys import KeyStore

    store = KeyStore(answerer.data_dir)
    c = _client(answerer)
    assert c.get("/api/answer", params={"q": QUESTION}).status_code == 200  # no keys yet: open
    key, _ = store.create("svc-test")
    try:
        time.sleep(1.1)  # the server re-reads the key file at most once a second
        r = c.get("/api/answer", params={"q": QUESTION})
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer" and "required" in r.json()["error"]
        assert c.get("/api/answer", params={"q": QUESTION}, headers={"Authorization": "Bearer x"}).status_code == 401
        assert c.get("/api/answer", params={"q": QUESTION},
                     headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert c.get("/api/answer", params={"q": QUESTION}, headers={"X-API-Key": key}).status_code == 200
        assert c.get("/related", params={"doc_id": "d0"}).status_code == 401
        assert c.get("/metrics").status_code == 401
        assert c.get("/").status_code == 200 and c.get("/healthz").status_code == 200  # page and probes open
        assert _client(answerer, page_needs_key=True).get("/").status_code == 401
        store.revoke("svc-test")
        time.sleep(1.1)
        assert c.get("/api/answer", params={"q": QUESTION}, headers={"X-API-Key": key}).status_code == 200
    finally:
        if any(k["name"] == "svc-test" for k in store.list()):
            store.revoke("svc-test")
    assert _client(answerer, require_keys=True).get("/api/answer", params={"q": QUESTION}).status_code == 401


# rate limits, request ids, logs -------------------------------------------------------------------------------


def test_over_the_rate_is_429_with_retry_after(answerer):
    c = _client(answerer, rate_per_address="3/minute")
    codes = [c.get("/api/answer", params={"q": QUESTION}).status_code for _ in range(3)]
    r = c.get("/api/answer", params={"q": QUESTION})
    assert codes == [200] * 3 and r.status_code == 429
    assert 1 <= int(r.headers["retry-after"]) <= 60 and "3 per 1 minute" in r.json()["error"]
    assert c.get("/healthz").status_code == 200  # probes are not counted


def test_rate_per_key_counts_each_key_apart(answerer, tmp_path):
    from answers.service.app import Gate
    from answers.service.keys import KeyStore
    from answers.service.ratelimit import RateLimits

    rates = RateLimits(per_key="2/minute", per_address=None)
    assert rates.hit("a", "1.2.3.4") is None and rates.hit("a", "1.2.3.4") is None
    over = rates.hit("a", "1.2.3.4")
    assert over is not None and over[0] == "2 per 1 minute per key" and over[1] >= 1
    assert rates.hit("b", "1.2.3.4") is None and rates.hit(None, "1.2.3.4") is None  # no key: no key limit
    with pytest.raises(ValueError, match="not a rate"):
        RateLimits("sixty a minute")
    assert Gate(None, KeyStore(tmp_path), rates).needs_key("/api/answer") is False


def _capture_logs():
    from answers.service.requestid import configure_json_logging

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    buf = io.StringIO()
    configure_json_logging(logging.WARNING, buf)
    return buf, lambda: (root.handlers.__setitem__(slice(None), saved[0]), root.setLevel(saved[1]))


def test_request_ids_and_json_access_lines(answerer):
    buf, restore = _capture_logs()
    try:
        c = _client(answerer)
        r1 = c.get("/api/answer", params={"q": QUESTION}, headers={"X-Request-ID": "trace-42_a"})
        r2 = c.get("/api/answer", params={"q": QUESTION}, headers={"X-Request-ID": "bad id;" + "x" * 70})
        r3 = c.get("/no-such-page")
    finally:
        restore()
    assert r1.headers["x-request-id"] == "trace-42_a"
    assert len(r2.headers["x-request-id"]) == 16 and int(r2.headers["x-request-id"], 16) >= 0
    assert r3.status_code == 404 and r3.headers["x-request-id"]
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    access = [x for x in lines if x["logger"] == "answers.access"]
    assert [x["id"] for x in access] == ["trace-42_a", r2.headers["x-request-id"], r3.headers["x-request-id"]]
    first = access[0]
    assert {k: first[k] for k in ("method", "path", "status", "client", "key", "query_keys")} == {
        "method": "GET", "path": "/api/answer", "status": 200, "client": "testclient", "key": None,
        "query_keys": ["q"]}
    assert first["seconds"] > 0 and first["request_id"] == "trace-42_a"
    assert QUESTION not in buf.getvalue()  # the question (a query value) is never logged


def test_an_internal_error_log_line_carries_the_request_id(tmp_path):
    from answers import Answerer

    bare = tmp_path / "d"
    (bare / "index").mkdir(parents=True)
    (bare / "index" / "CURRENT").write_text("../../etc")
    buf, restore = _capture_logs()
    try:
        r = _client(Answerer(bare, scorer=_linear_scorer())).get("/api/answer?q=数据", headers={"X-Request-ID": "e1"})
    finally:
        restore()
    assert r.status_code == 500 and r.headers["x-request-id"] == "e1"
    lines = [json.loads(x) for x in buf.getvalue().splitlines()]
    errors = [x for x in lines if x["level"] == "ERROR"]
    assert errors and all(x["request_id"] == "e1" for x in errors) and "exc" in errors[0]


# health, readiness, metrics -----------------------------------------------------------------------------------


def test_healthz_and_readyz(answerer, tmp_path):
    from answers import Answerer

    c = _client(answerer)
    assert c.get("/healthz").json() == {"ok": True}
    r = c.get("/readyz")
    assert r.status_code == 200 and r.json()["ready"] and r.json()["version"] == "v1"
    bare = tmp_path / "empty-data-dir"
    bare.mkdir()
    r = _client(Answerer(bare, scorer=_linear_scorer())).get("/readyz")
    assert r.status_code == 503 and not r.json()["ready"] and "IndexMissingError" in r.json()["reason"]
    assert str(tmp_path) not in r.text


def test_metrics_parse_and_count_routes_statuses_answers_and_version(answerer):
    from prometheus_client.parser import text_string_to_metric_families

    c = _client(answerer)
    for q in (QUESTION, "乡村振兴第7项要完善什么？"):
        assert c.get("/api/answer", params={"q": q}).status_code == 200
    assert c.get("/api/answer", params={"q": ""}).status_code == 400
    assert c.post("/ask", data={"q": QUESTION}).status_code == 200
    assert c.get("/nope").status_code == 404
    fams = {f.name: f for f in text_string_to_metric_families(c.get("/metrics").text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in fams.values() for s in f.samples}
    assert samples[("answer_service_requests_total", (("route", "/api/answer"), ("status", "200")))] == 2
    assert samples[("answer_service_requests_total", (("route", "/api/answer"), ("status", "400")))] == 1
    assert samples[("answer_service_requests_total", (("route", "other"), ("status", "404")))] == 1
    assert samples[("answer_service_request_seconds_count", (("route", "/api/answer"),))] == 3
    answered = sum(v for (n, _), v in samples.items() if n == "answer_service_answers_total")
    assert answered == 3 and ("answer_service_answers_total", (("outcome", "found"),)) in samples
    version = [k for k, v in samples.items() if k[0] == "answer_service_version_info" and v == 1]
    assert version and dict(version[0][1])["version"] == "v1"


def test_a_client_leaving_mid_body_is_one_access_line_and_no_traceback(answerer):
    from flows.serve import uvicorn_settings

    buf, restore = _capture_logs()
    try:
        with _Server(_app(answerer), uvicorn_settings()) as srv:
            for i in range(3):
                s = socket.create_connection(("127.0.0.1", srv.port))
                s.sendall(b"POST /ask HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
                          b"X-Request-ID: gone-%d\r\nContent-Length: 1000\r\n\r\nq=%%E6%%95" % i)
                time.sleep(0.2)
                s.close()
            time.sleep(0.5)
            assert srv.get("/healthz")[0] == 200
    finally:
        restore()
    text = buf.getvalue()
    assert "Traceback" not in text and "ClientDisconnect" not in text, text[:2000]
    lines = [json.loads(x) for x in text.splitlines()]
    gone = [x for x in lines if str(x.get("request_id", "")).startswith("gone-")]
    assert [(x["id"], x["status"]) for x in gone] == [(f"gone-{i}", 499) for i in range(3)]


# flows.serve ------------------------------------------------------------------------------------------------


def test_serve_refuses_bad_flags_with_one_error_line(tmp_path, capsys):
    from flows.serve import main

    assert main(["--data-dir", str(tmp_path), "--rate", "sixty"]) == 2
    assert capsys.readouterr().err.startswith("error: rate 'sixty'")
    assert main(["--data-dir", str(tmp_path), "--workers", "0"]) == 2
    assert main(["--data-dir", str(tmp_path), "--header-timeout", "0"]) == 2
    before = logging.getLogger().handlers[:]
    assert main(["--data-dir", str(tmp_path)]) == 2  # no index published
    assert capsys.readouterr().err.count("\n") == 3
    assert logging.getLogger().handlers == before  # a refused start leaves logging as it was


def test_json_logging_follows_the_current_stderr(monkeypatch):
    """A handler set up while stderr was one stream keeps working after that stream is closed and replaced
    (it once kept the old one: every later log line raised, and Prefect's flow logs recursed)."""
    from answers.service.requestid import configure_json_logging

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    first, second = io.StringIO(), io.StringIO()
    try:
        monkeypatch.setattr(sys, "stderr", first)
        configure_json_logging(logging.WARNING)
        first.close()
        monkeypatch.setattr(sys, "stderr", second)
        logging.getLogger("tests.stderr").warning("after the swap")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])
    assert json.loads(second.getvalue())["msg"] == "after the swap"


@pytest.mark.slow
def test_serve_with_two_workers_answers_and_sums_metrics(tmp_path):
    import os
    import subprocess
    import sys
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    from retrieval.sparse import make_tokenizer
    from tests.answer_builders import build_data_dir

    data = build_data_dir(tmp_path, make_tokenizer("auto"))  # with its scorer: served as flows.serve serves
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "flows.serve", "--data-dir", str(data), "--port", str(port),
                             "--workers", "2", "--rate-address", ""], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if urllib.request.urlopen(base + "/readyz", timeout=5).status == 200:
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "flows.serve did not get ready"
                time.sleep(1)
        q = urllib.request.quote(QUESTION)
        for _ in range(12):
            body = json.loads(urllib.request.urlopen(f"{base}/api/answer?q={q}", timeout=30).read())
            assert body["answers"] and body["version"] == "v1"
        total = 0.0
        for _ in range(3):  # whichever worker answers, the sum over both
            text = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
            fams = {f.name: f for f in text_string_to_metric_families(text)}
            total = max(total, sum(s.value for s in fams["answer_service_requests"].samples
                                   if s.name == "answer_service_requests_total"
                                   and s.labels["route"] == "/api/answer"))
        assert total == 12
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "Traceback" not in err, err[-3000:]
