"""Crawl diff, document lifecycle and per-source partitions (SPEC §2, refreshes), on real
local HTTP servers: a first crawl, then a refresh after pages changed, appeared, went 404, a source's host
went down and a source left the registry."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from crawler.crawl import CrawlConfig
from crawler.diff import content_sha256, crawl_diff
from crawler.fetch import FetchConfig
from crawler.hostclock import HostClock
from crawler.stages import crawl_stage
from storage import read_manifest, read_table
from tests.builders import gov_page
from tests.http_hosts import hosts, send

FAST = CrawlConfig(fetch=FetchConfig(delay=0.02, retries=1, backoff=0.02, connect_timeout=0.5, read_timeout=0.5,
                                     deadline=5))
ROBOTS = {"/robots.txt": lambda h: send(h, 200, b"User-agent: *\nAllow: /\n", "text/plain")}


def _doc(text: str) -> bytes:
    return gov_page(text + "数据要素市场化配置改革的若干措施，" * 20 + "。").encode()


def _routes(pages: dict[str, str]) -> dict:
    return {**ROBOTS, **{p: (lambda h, b=_doc(t): send(h, 200, b)) for p, t in pages.items()}}


def _registry(path, entries: list[dict]) -> str:
    path.write_text(json.dumps({"allow_private_addresses": True, "sources": entries}, ensure_ascii=False), "utf-8")
    return str(path)


def _run(tmp_path, registry, refresh=False) -> dict:
    d = tmp_path / "data"
    return crawl_stage(d / "documents", d / "crawl_failures", d / "crawl", registry,
                       CrawlConfig(fetch=FAST.fetch, refresh=refresh), diff_dir=d / "crawl_diff")


def test_refresh_diff_lifecycle_and_a_failing_source(tmp_path):
    a_pages = {"/doc/1.html": "第一号文件。", "/doc/2.html": "第二号文件。", "/doc/3.html": "第三号文件。"}
    with hosts(_routes(a_pages), _routes({"/doc/1.html": "乙站文件。"}), _routes({"/doc/1.html": "丙站文件。"}),
               first_ip=70) as (a, b, c):
        entries = [{"name": "甲", "id": "src-a", "hosts": [a.netloc], "seeds": [a.url(p) for p in a_pages]},
                   {"name": "乙", "id": "src-b", "hosts": [b.netloc], "seeds": [b.url("/doc/1.html")]},
                   {"name": "丙", "id": "src-c", "hosts": [c.netloc], "seeds": [c.url("/doc/1.html")]}]
        reg = _registry(tmp_path / "sources.yaml", entries)
        first = _run(tmp_path, reg)
        assert first["diff"]["all"]["new"] == 5 and first["unreachable"] == []
        docs1 = read_table(tmp_path / "data" / "documents").set_index("url")
        assert (docs1["first_seen"] == docs1["last_seen"]).all() and (docs1["last_changed"] == docs1["first_seen"]).all()

        # the sites change: A1 edited, A3 withdrawn (404), A4 published; B's host goes down; C leaves the registry
        a.routes["/doc/1.html"] = lambda h, body=_doc("第一号文件（修订）。"): send(h, 200, body)
        a.routes["/doc/3.html"] = lambda h: send(h, 404, b"gone", "text/plain")
        a.routes["/doc/4.html"] = lambda h, body=_doc("第四号文件。"): send(h, 200, body)
        b.server.shutdown()
        b.server.server_close()
        entries[0]["seeds"].append(a.url("/doc/4.html"))
        reg = _registry(tmp_path / "sources.yaml", entries[:2])
        second = _run(tmp_path, reg, refresh=True)

    url = {p: a.url(p) for p in ("/doc/1.html", "/doc/2.html", "/doc/3.html", "/doc/4.html")}
    diff = read_table(tmp_path / "data" / "crawl_diff")
    status = dict(zip(diff["url"], diff["status"]))
    assert status == {url["/doc/1.html"]: "changed", url["/doc/2.html"]: "unchanged", url["/doc/3.html"]: "gone",
                      url["/doc/4.html"]: "new", b.url("/doc/1.html"): "kept", c.url("/doc/1.html"): "dropped"}
    assert second["diff"]["src-a"] == {"new": 1, "changed": 1, "unchanged": 1, "gone": 1, "kept": 0, "dropped": 0}
    assert second["unreachable"] == ["src-b"]
    assert second["per_source"]["src-a"]["reused"] == 1  # the unchanged body was not extracted again
    assert read_table(tmp_path / "data" / "crawl_failures").query("reason == 'source_unreachable'")["source_id"].tolist() == ["src-b"]

    docs2 = read_table(tmp_path / "data" / "documents").set_index("url")
    assert set(docs2.index) == {url["/doc/1.html"], url["/doc/2.html"], url["/doc/4.html"], b.url("/doc/1.html")}
    a1, a2, b1 = docs2.loc[url["/doc/1.html"]], docs2.loc[url["/doc/2.html"]], docs2.loc[b.url("/doc/1.html")]
    old1, old2 = docs1.loc[url["/doc/1.html"]], docs1.loc[url["/doc/2.html"]]
    assert "修订" in a1["text"] and a1["first_seen"] == old1["first_seen"] and a1["last_changed"] > old1["last_changed"]
    assert a2["last_seen"] > old2["last_seen"] and a2["last_changed"] == old2["last_changed"]
    assert b1["last_seen"] == docs1.loc[b.url("/doc/1.html")]["last_seen"]  # not confirmed: not advanced
    assert read_manifest(tmp_path / "data" / "documents")["stats"]["diff"]["all"]["gone"] == 1


def test_no_change_refresh_is_all_unchanged(tmp_path):
    with hosts(_routes({"/doc/1.html": "第一号文件。", "/doc/2.html": "第二号文件。"}), first_ip=74) as (a,):
        reg = _registry(tmp_path / "sources.yaml", [{"name": "甲", "id": "src-a", "hosts": [a.netloc],
                                                     "seeds": [a.url("/doc/1.html"), a.url("/doc/2.html")]}])
        _run(tmp_path, reg)
        again = _run(tmp_path, reg, refresh=True)
    assert again["diff"]["all"] == {"new": 0, "changed": 0, "unchanged": 2, "gone": 0, "kept": 0, "dropped": 0}
    assert again["per_source"]["src-a"]["reused"] == 2


def test_diff_ignores_raw_changes_that_leave_the_text_alone():
    t0, t1 = pd.Timestamp("2026-01-01", tz="UTC"), pd.Timestamp("2026-02-01", tz="UTC")
    prev = pd.DataFrame([{"url": "u1", "source_id": "s", "doc_id": "aa", "text": "正文", "fetched_at": t0,
                          "first_seen": t0, "last_seen": t0, "last_changed": t0}])
    cur = pd.DataFrame([{"url": "u1", "source_id": "s", "doc_id": "bb", "text": "正文", "fetched_at": t1}])
    docs, diff = crawl_diff(prev, cur, {}, ["s"])
    assert diff["status"].tolist() == ["unchanged"] and diff["previous_doc_id"].tolist() == ["aa"]
    assert docs.loc[0, "last_changed"] == t0 and docs.loc[0, "last_seen"] == t1
    assert docs.loc[0, "content_sha256"] == content_sha256("正文")


def test_host_clock_spaces_requests_across_crawlers(tmp_path):
    import threading
    import time

    clock, stamps = HostClock(tmp_path, 0.2), []

    def hit():
        clock.wait("www.gov.cn")
        stamps.append(time.monotonic())

    threads = [threading.Thread(target=hit) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    gaps = [b - a for a, b in zip(sorted(stamps), sorted(stamps)[1:])]
    assert len(gaps) == 3 and min(gaps) >= 0.18
    with pytest.raises(ValueError):
        HostClock(tmp_path, -1)


@pytest.mark.slow
def test_crawl_flow_maps_one_task_per_source_and_a_dead_source_fails_alone(prefect_harness, tmp_path):
    """The crawl subflow: one ``crawl-<source_id>`` task per source; a source whose host is down fails its
    own task (after its retry), the merge still runs, reports it and keeps the other source's documents;
    the diff is published as the ``crawl-diff`` artifact."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.crawl import crawl_sources

    with hosts(_routes({"/doc/1.html": "第一号文件。"}), ROBOTS, first_ip=76) as (a, b):
        b.server.shutdown()
        b.server.server_close()
        reg = _registry(tmp_path / "sources.yaml", [
            {"name": "甲", "id": "src-a", "hosts": [a.netloc], "seeds": [a.url("/doc/1.html")]},
            {"name": "乙", "id": "src-b", "hosts": [b.netloc], "seeds": [b.url("/doc/1.html")]}])
        stats = crawl_sources(str(tmp_path / "data"), reg)
    assert stats["unreachable"] == ["src-b"] and stats["diff"]["src-a"]["new"] == 1
    assert read_table(tmp_path / "data" / "documents")["source_id"].tolist() == ["src-a"]
    with get_client(sync_client=True) as client:
        runs = {r.name: r for r in client.read_task_runs() if r.name.startswith("crawl-src-")}
        art = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["crawl-diff"])))
    assert runs["crawl-src-a"].state.is_completed() and runs["crawl-src-b"].state.is_failed()
    assert runs["crawl-src-b"].run_count == 2  # retried once, alone
    assert art and "src-a" in str(art[0].data)


def test_scheduled_refresh_discovers_exactly_the_newly_published_documents(tmp_path):
    """A TRS column configured as registry data: the refresh's diff holds exactly the 3 documents published
    since the first crawl as new, and the 12 earlier ones as unchanged (not fetched again)."""
    from tests.discovery_hosts import Catalog, trs_path, trs_routes

    cat = Catalog.of(12, trs_path)
    with hosts(trs_routes(cat), first_ip=78) as (a,):
        reg = _registry(tmp_path / "sources.yaml", [{
            "name": "部委", "id": "src-trs", "hosts": [a.netloc],
            "discovery": [{"kind": "trs", "url": a.url("/xxgk/tz/index.html"), "checked_live": False}]}])
        first = _run(tmp_path, reg)
        published = cat.publish(3)
        second = _run(tmp_path, reg)
    assert first["diff"]["src-trs"]["new"] == 12
    diff = read_table(tmp_path / "data" / "crawl_diff")
    assert set(diff.loc[diff.status == "new", "url"]) == {a.url(it.path) for it in published}
    assert second["diff"]["src-trs"] == {"new": 3, "changed": 0, "unchanged": 12, "gone": 0, "kept": 0, "dropped": 0}
    assert len(read_table(tmp_path / "data" / "documents")) == 15


def test_a_page_of_two_sources_is_kept_once_and_an_old_single_state_is_carried_over(tmp_path):
    """A URL registered under two sources is one document (the first source in registry order), and a data dir
    crawled before per-source partitions (one ``crawl/state.sqlite``) is not fetched again."""
    from crawler.archive import CrawlState, RawArchive
    from crawler.crawl import crawl
    from crawler.registry import load_registry

    with hosts(_routes({"/doc/1.html": "共享文件。", "/doc/2.html": "乙站文件。"}), first_ip=80) as (a,):
        shared = a.url("/doc/1.html")
        reg = _registry(tmp_path / "sources.yaml", [
            {"name": "甲", "id": "src-a", "hosts": [a.netloc], "seeds": [shared]},
            {"name": "乙", "id": "src-b", "hosts": [a.netloc], "seeds": [shared, a.url("/doc/2.html")]}])
        legacy = CrawlState(tmp_path / "data" / "crawl" / "state.sqlite")  # an older crawl of the same registry
        crawl(load_registry(reg), legacy, RawArchive(tmp_path / "data" / "crawl"), FAST)
        legacy.close()
        hits = dict(a.hits)
        stats = _run(tmp_path, reg)
        again = {p: n - hits.get(p, 0) for p, n in a.hits.items() if p.startswith("/doc/")}
        # the old state filed the shared page under one source: only the other one fetches it once more
        assert again["/doc/2.html"] == 0 and again["/doc/1.html"] <= 1
    docs = read_table(tmp_path / "data" / "documents")
    assert docs["url"].tolist().count(shared) == 1 and docs.set_index("url").loc[shared, "source_id"] == "src-a"
    assert docs["doc_id"].is_unique and stats["diff"]["all"]["new"] == 2
