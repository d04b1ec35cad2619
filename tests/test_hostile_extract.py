"""Hostile bodies against extraction, on crafted files: a FlateDecode bomb, a gigapixel
OCR page, too many pages, a PDF that parses forever, 100k nested tags, NUL characters; and a failed
page is not extracted again until its bytes change. Each bounded to seconds and the pool's memory cap."""
import io
import time
import zlib

import pytest

from crawler.archive import CrawlState, RawArchive
from crawler.crawl import CrawlConfig, crawl, documents_from_archive
from crawler.document import ExtractConfig, ExtractionError
from crawler.extract import extract
from crawler.fetch import FetchConfig
from crawler.html_extract import extract_html
from crawler.registry import Source
from crawler.sandbox import ExtractionPool, SandboxError
from tests.builders import gov_page, text_pdf
from tests.http_hosts import hosts, send

# Generous clocks: these tests assert which bound stops a body (and that it stops in seconds, not the
# minutes or gigabytes it would take unbounded), not how fast a loaded machine spawns a worker.
BOUNDED = ExtractConfig(timeout=60, memory=256 * 2**20, max_pages=20)


def raw_pdf(content: bytes, width: float = 595, height: float = 842, flate: bool = True) -> bytes:
    """A one-page PDF whose page content stream is ``content`` (zlib-compressed when ``flate``)."""
    stream = zlib.compress(content, 9) if flate else content
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {width} {height}] /Contents 4 0 R >>".encode(),
            b"<< /Length %d%s >>\nstream\n" % (len(stream), b" /Filter /FlateDecode" if flate else b"")
            + stream + b"\nendstream"]
    out, offsets = io.BytesIO(), []
    out.write(b"%PDF-1.4\n")
    for i, body in enumerate(objs, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref))
    return out.getvalue()


def flate_bomb_pdf(decoded: int) -> bytes:
    """A PDF whose content stream inflates to ``decoded`` bytes of spaces (about 1000:1)."""
    z = zlib.compressobj(9)
    block = b" " * (1 << 20)
    stream = b"".join([z.compress(block) for _ in range(decoded >> 20)] + [z.flush()])
    return raw_pdf(stream, flate=False).replace(b"/Length", b"/Filter /FlateDecode /Length", 1)


def blank_pdf(pages: int, size=(595, 842)) -> bytes:
    """``pages`` empty pages of ``size`` points (reportlab): no text layer, so OCR would be asked."""
    from reportlab.pdfgen import canvas

    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=size)
    for _ in range(pages):
        c.showPage()
    c.save()
    return buf.getvalue()


@pytest.fixture(scope="module")
def pool():
    with ExtractionPool(BOUNDED) as p:
        yield p


def test_flate_bomb_pdf_fails_on_the_memory_cap_and_the_worker_recovers(pool):
    bomb = flate_bomb_pdf(400 << 20)  # ~400 KB that inflates to 400 MB (the probe's 2 MB: > 4 GB)
    t = time.monotonic()
    with pytest.raises(SandboxError) as e:
        pool.extract(bomb, "http://x.cn/bomb.pdf", "application/pdf")
    took = time.monotonic() - t  # the 256 MB cap stops it, well before the 60 s clock
    assert e.value.reason == "extraction_memory" and took < 30, (e.value.reason, str(e.value), took)
    doc = pool.extract(text_pdf(["数据作为新型生产要素，是数字化、网络化、智能化的基础。"]), "http://x.cn/ok.pdf", None)
    assert "新型生产要素" in doc.text  # the pool goes on after a failure


def test_gigapixel_ocr_page_and_too_many_pages_are_refused_before_rendering(pool):
    giant = blank_pdf(1, (14400, 14400))
    assert len(giant) < 2000
    t = time.monotonic()
    with pytest.raises(SandboxError, match="too large to OCR") as e:
        pool.extract(giant, "http://x.cn/giant.pdf", "application/pdf")
    took = time.monotonic() - t  # refused from its size: rendering 3.6 Gpx would hit the cap or take minutes
    assert e.value.reason == "extraction_failed" and took < 30, took
    with pytest.raises(ExtractionError, match="30 pages, over the cap of 20"):
        extract(blank_pdf(30), "http://x.cn/many.pdf", "application/pdf", cfg=BOUNDED)


def test_a_pdf_that_parses_forever_hits_the_wall_clock_limit():
    slow = raw_pdf(b"1 0 0 1 0 0 cm\n" * 3_000_000)  # 45 MB of operators in ~70 KB
    with ExtractionPool(ExtractConfig(timeout=1.5, memory=1 << 30)) as p:
        t = time.monotonic()
        with pytest.raises(SandboxError) as e:
            p.extract(slow, "http://x.cn/slow.pdf", "application/pdf")
        took = time.monotonic() - t
        assert e.value.reason == "extraction_timeout" and took < 20, (e.value.reason, took)  # unbounded: ~100 s
        assert p.extract(gov_page().encode(), "http://x.cn/a.html", "text/html").title  # a fresh worker


@pytest.mark.parametrize("tag", ["b", "span", "table"])
def test_100k_nested_tags_extract_in_linear_time(tag):
    body = gov_page().replace("</body>", f"<{tag}>" * 100_000 + "</body>").encode()  # 300-700 KB
    t = time.monotonic()
    doc = extract_html(body, "https://www.gov.cn/a.htm")
    took = time.monotonic() - t
    assert doc.doc_number == "国发〔2022〕32号" and doc.issuer == "中共中央 国务院"
    assert took < 10, took  # was ~19 min: get_text() on every header-table cell over the whole tree


def test_nul_and_control_characters_leave_titles_and_text():
    page = gov_page().replace("<title>", "<title>\x00").replace("国发〔2022〕32号", "国发\x00〔2022〕32号\x07")
    page = page.replace('content="中共中央', 'content="\x00中共中央')
    doc = extract_html(page.encode(), "https://www.gov.cn/a.htm")
    for value in (doc.title, doc.text, doc.doc_number, doc.issuer):
        assert value and not any(ord(c) < 32 and c not in "\n\t" for c in value), repr(value)
    assert doc.doc_number == "国发〔2022〕32号"


def test_failed_page_is_not_extracted_again_until_its_bytes_change(tmp_path):
    slow = raw_pdf(b"1 0 0 1 0 0 cm\n" * 3_000_000)
    fixed = text_pdf(["数据作为新型生产要素，是数字化、网络化、智能化的基础。"])
    routes = {"/robots.txt": lambda h: send(h, 200, b"User-agent: *\nAllow: /\n", "text/plain"),
              "/slow.pdf": lambda h: send(h, 200, slow, "application/pdf")}
    cfg = CrawlConfig(fetch=FetchConfig(delay=0.05, retries=0, read_timeout=2),
                      extract=ExtractConfig(timeout=5, memory=1 << 30))  # the fixed PDF: ~0.3 s
    with hosts(routes) as (a,):
        src = Source(name="慢", id="src-slow", hosts=(a.netloc,), seeds=(a.url("/slow.pdf"),),
                     allow_private_addresses=True)
        state, archive = CrawlState(tmp_path / "state.sqlite"), RawArchive(tmp_path)
        crawl([src], state, archive, cfg)
        t = time.monotonic()
        _, f1 = documents_from_archive([src], state, archive, cfg.extract)
        first = time.monotonic() - t
        t = time.monotonic()
        _, f2 = documents_from_archive([src], state, archive, cfg.extract)
        second = time.monotonic() - t
        assert f1["reason"].tolist() == f2["reason"].tolist() == ["extraction_timeout"]
        assert first >= 5 and second < 3, (first, second)  # recorded by sha256: no worker started
        a.routes["/slow.pdf"] = lambda h: send(h, 200, fixed, "application/pdf")  # the bytes change
        crawl([src], state, archive, CrawlConfig(fetch=cfg.fetch, extract=cfg.extract, refresh=True))
        docs, f3 = documents_from_archive([src], state, archive, cfg.extract)
        state.close()
    assert len(f3) == 0 and "新型生产要素" in docs["text"][0]
