"""Crawler: registry, polite fetching with faults against real local servers, archive/state resume,
extraction of pages and PDFs the tests build."""
import json
import socket
import subprocess
import sys
import time

import pytest

from crawler.archive import CrawlState, RawArchive
from crawler.crawl import CrawlConfig, crawl, documents_from_archive
from crawler.document import ExtractionError
from crawler.extract import extract
from crawler.fetch import FetchConfig, Fetcher
from crawler.registry import RegistryError, Source, load_registry
from tests.builders import GOV_BODY, gbk_page, gov_page, image_pdf, text_pdf
from tests.conftest import REPO
from tests.http_hosts import hosts, send

FAST = FetchConfig(delay=0.05, retries=2, backoff=0.05, connect_timeout=1, read_timeout=0.5, max_retry_after=2)


def page(body: bytes, ctype="text/html; charset=utf-8", headers=None):
    return lambda h: send(h, 200, body, ctype, headers)


# ---------------------------------------------------------------- registry

def test_real_registry_loads_61_sources():
    sources = load_registry()
    assert len(sources) == 61 and len({s.name for s in sources}) == 61
    assert sum(len(s.seeds) for s in sources) >= 80
    gov = next(s for s in sources if s.name == "中华人民共和国中央人民政府")
    assert "www.gov.cn" in gov.hosts and all(u.startswith("http") for u in gov.seeds)


def test_registry_errors_name_each_bad_entry(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("""sources:
- name: A
  hosts: [a.gov.cn]
  seeds: [https://b.gov.cn/x.htm]
- name: ""
  hosts: []
  seeds: [https://d.cn/x.htm]
- name: C
  hosts: [c.cn]
  link_pattern: "(["
- name: A
  hosts: [a.gov.cn]
""", encoding="utf-8")
    with pytest.raises(RegistryError) as e:
        load_registry(p)
    msg = str(e.value)
    assert "not in hosts" in msg and "name missing" in msg and "hosts must be" in msg
    assert "link_pattern does not compile" in msg and "duplicate source name 'A'" in msg


# ---------------------------------------------------------------- fetcher faults

def test_faults_end_as_retried_success_or_recorded_failure():
    state = {"flaky": 0, "limited": 0, "reset": 0}

    def flaky(h):  # 500 then 200
        state["flaky"] += 1
        send(h, 500 if state["flaky"] == 1 else 200, b"<p>ok after 500</p>")

    def limited(h):  # 429 with Retry-After, then 200
        state["limited"] += 1
        if state["limited"] == 1:
            send(h, 429, b"slow down", "text/plain", {"Retry-After": "1"})
        else:
            send(h, 200, b"<p>ok after 429</p>")

    def slow(h):
        time.sleep(1.5)
        send(h, 200, b"late")

    def reset(h):  # connection reset on the first try, fine afterwards
        state["reset"] += 1
        if state["reset"] == 1:
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            h.connection.close()
            h.close_connection = True
        else:
            send(h, 200, b"<p>ok after reset</p>")

    def truncated(h):
        h.send_response(200)
        h.send_header("Content-Type", "text/html")
        h.send_header("Content-Length", "1000")
        h.end_headers()
        h.wfile.write(b"<p>only part")
        h.close_connection = True

    def redirect(to):
        return lambda h: send(h, 302, b"", headers={"Location": to})

    routes = {"/robots.txt": page(b"User-agent: *\nDisallow: /private/\n", "text/plain"),
              "/flaky": flaky, "/limited": limited, "/slow": slow, "/reset": reset, "/truncated": truncated,
              "/loop1": redirect("/loop2"), "/loop2": redirect("/loop1"),
              "/away": redirect("http://127.0.0.99:9/elsewhere"), "/big": page(b"x" * 5000),
              "/private/x": page(b"secret"), "/gone": lambda h: send(h, 404, b"no")}
    with hosts(routes) as (a,):
        f = Fetcher({a.netloc}, FetchConfig(**{**FAST.__dict__, "max_bytes": 2000}), allow_private=True)
        t = time.monotonic()
        r = f.fetch(a.url("/limited"))
        assert r.ok and r.body == b"<p>ok after 429</p>" and r.attempts == 2 and time.monotonic() - t >= 1.0
        assert f.fetch(a.url("/flaky")).body == b"<p>ok after 500</p>"
        assert f.fetch(a.url("/reset")).body == b"<p>ok after reset</p>"
        assert state == {"flaky": 2, "limited": 2, "reset": 2}  # each failed once, then was retried
        expect = {"/slow": "timeout", "/truncated": "truncated", "/loop1": "redirect_loop",
                  "/away": "unregistered_host", "/big": "too_large", "/private/x": "robots_disallowed",
                  "/gone": "http_404"}
        for path, reason in expect.items():
            res = f.fetch(a.url(path))
            assert not res.ok and res.error == reason, (path, res.error, res.detail)
        assert a.hits["/slow"] == 3  # retried: 1 + 2 retries
        assert a.hits.get("/private/x") is None  # never requested
        assert all("PolicyBERT-corpus-crawler" in hd.get("User-Agent", "") for hd in a.headers_seen)


def test_politeness_delay_per_host_and_hosts_in_parallel():
    n, delay = 4, 0.3
    routes = {f"/p{i}": page(b"<p>x</p>") for i in range(n)}
    with hosts(routes, routes, routes) as hs:
        srcs = [Source(name=f"s{i}", id=f"s{i}", hosts=(h.netloc,), allow_private_addresses=True, seeds=tuple(h.url(f"/p{j}") for j in range(n)))
                for i, h in enumerate(hs)]
        import tempfile
        from pathlib import Path

        d = Path(tempfile.mkdtemp())
        t = time.monotonic()
        counts = crawl(srcs, CrawlState(d / "s.sqlite"), RawArchive(d),
                       CrawlConfig(fetch=FetchConfig(**{**FAST.__dict__, "delay": delay})))
        wall = time.monotonic() - t
    assert counts["fetched"] == 3 * n
    # robots.txt + n pages per host, spaced by `delay`: >= n * delay per host; hosts overlap
    assert n * delay <= wall < 2 * n * delay, wall


# ---------------------------------------------------------------- crawl, archive, resume, extraction

def _site():
    pdf = text_pdf(["数据作为新型生产要素，是数字化、网络化、智能化的基础。", "加快构建数据基础制度体系。", "促进数据合规高效流通使用。"])
    return {
        "/robots.txt": page(b"User-agent: *\nAllow: /\n", "text/plain"),
        "/list.html": page('<a href="/doc/1.html">1</a><a href="/doc/2.html">2</a><a href="/about">x</a>'.encode()),
        "/doc/1.html": page(gov_page().encode(), headers={"ETag": '"v1"'}),
        "/doc/2.html": page(gbk_page(), "text/html; charset=utf-8"),  # wrong charset header
        "/white.pdf": page(pdf, "application/pdf"),
        "/scan.pdf": page(image_pdf(["数据作为新型生产要素", "加快构建数据基础制度"]), "application/pdf"),
        "/fake.pdf": page(b"<html><body>404 page</body></html>", "application/pdf"),
        "/broken.pdf": page(pdf[:400], "application/pdf"),
    }


def test_crawl_extract_resume_and_conditional_refresh(tmp_path):
    with hosts(_site()) as (a,):
        src = Source(name="测试源", id="src-test", hosts=(a.netloc,), allow_private_addresses=True, listings=(a.url("/list.html"),),
                     link_pattern=r"/doc/\d+\.html$",
                     seeds=tuple(a.url(p) for p in ("/white.pdf", "/scan.pdf", "/fake.pdf", "/broken.pdf")))
        state, archive = CrawlState(tmp_path / "state.sqlite"), RawArchive(tmp_path)
        c1 = crawl([src], state, archive, CrawlConfig(fetch=FAST))
        assert c1["discovered"] == 2 and c1["fetched"] == 7 and not c1["failed"]
        # a second crawl (a restarted process) refetches nothing but the listing
        state.close()
        state = CrawlState(tmp_path / "state.sqlite")
        before = dict(a.hits)
        c2 = crawl([src], state, archive, CrawlConfig(fetch=FAST))
        assert c2["skipped"] == 6 and a.hits["/doc/1.html"] == before["/doc/1.html"]
        # refresh: conditional GET with the stored ETag -> 304
        a.routes["/doc/1.html"] = lambda h: (send(h, 304, b"") if h.headers.get("If-None-Match") == '"v1"'
                                             else send(h, 200, b"changed"))
        c3 = crawl([src], state, archive, CrawlConfig(fetch=FAST, refresh=True))
        assert c3["not_modified"] == 1
    docs, fails = documents_from_archive([src], state, archive)
    by_url = {u.rsplit("/", 1)[-1]: r for u, r in zip(docs["url"], docs.to_dict("records"))}
    assert set(by_url) == {"1.html", "2.html", "white.pdf", "scan.pdf"}
    assert by_url["1.html"]["title"].startswith("中共中央 国务院") and by_url["1.html"]["doc_number"] == "国发〔2022〕32号"
    assert str(by_url["1.html"]["pubtime"]) == "2022-12-19" and "分享到" not in by_url["1.html"]["text"]
    assert GOV_BODY[:30] in by_url["2.html"]["text"]  # GBK with a wrong header decodes right
    assert "加快构建数据基础制度体系" in by_url["white.pdf"]["text"] and "- 2 -" not in by_url["white.pdf"]["text"]
    assert "中国信息通信研究院 数据要素白皮书" not in by_url["white.pdf"]["text"]  # running header dropped
    assert by_url["scan.pdf"]["ocr"] and "数据基础制度" in by_url["scan.pdf"]["text"]
    reasons = dict(zip(fails["url"].str.rsplit("/", n=1).str[-1], fails["reason"]))
    assert reasons == {"fake.pdf": "extraction_failed", "broken.pdf": "extraction_failed"}
    assert set(docs.columns) >= {"doc_id", "source_id", "url", "title", "pubtime", "content_type", "raw_sha256", "text"}


def test_extract_errors_and_cli(tmp_path):
    with pytest.raises(ExtractionError, match="not a PDF"):
        extract(b"<html>oops</html>", "http://x.cn/a.pdf", "application/pdf")
    with pytest.raises(ExtractionError, match="corrupt PDF"):
        extract(b"%PDF-1.4\n garbage", "http://x.cn/a.pdf", "application/pdf")
    f = tmp_path / "page.html"
    f.write_bytes(gov_page().encode())
    out = subprocess.run([sys.executable, "-m", "crawler.extract", str(f), "--url", "https://www.gov.cn/a.htm"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    doc = json.loads(out.stdout)
    assert out.returncode == 0 and doc["issuer"] == "中共中央 国务院" and doc["content_type"] == "html"


def test_extractor_version_covers_every_extraction_module():
    """The extractor version hashes each module the extraction code is split into (and the chrome phrase
    list), so an edit to any of them re-extracts stored bodies; crawling code outside it does not."""
    from crawler.sandbox import extraction_files

    names = {f.name for f in extraction_files()}
    assert {"extract.py", "document.py", "charsets.py", "html_text.py", "html_header.py", "chrome.py",
            "html_extract.py", "pdf_extract.py", "sandbox.py", "textsafe.py", "chrome_phrases.txt"} <= names
    assert not names & {"fetch.py", "crawl.py", "discovery.py", "partition.py", "stages.py"}
