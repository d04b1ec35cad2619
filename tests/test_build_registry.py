"""crawler/build_registry.py (rebuild keeps hand edits) and the discovery data of crawler/sources.yaml."""
from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from crawler.build_registry import NO_SEED_NOTE, build, load_existing, merge, rebuild
from crawler.registry import DEFAULT_REGISTRY, load_registry
from tests.conftest import SHARED_CORPUS

DOCS = str(SHARED_CORPUS / "policy_docs.csv")
PROVENANCE = str(SHARED_CORPUS / "policy_sources.csv")
KINDS = {"trs", "hanweb", "paged", "sitemap", "feed", "links"}
GOV = "中华人民共和国中央人民政府"


def _sources(path) -> dict[str, dict]:
    return {e["name"]: e for e in yaml.safe_load(Path(path).read_text(encoding="utf-8"))["sources"]}


# ---------------------------------------------------------------- rebuild keeps hand edits

def test_rebuild_keeps_hand_edits_and_adds_new_provenance_seeds(tmp_path):
    out = tmp_path / "sources.yaml"
    rebuild(DOCS, PROVENANCE, out, replace=True)
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    by_name = {e["name"]: e for e in doc["sources"]}
    assert len(by_name) == 61
    gov, ndrc = by_name[GOV], by_name["中华人民共和国国家发展和改革会员会"]
    dropped = gov["seeds"].pop(0)                      # a provenance seed the file no longer has
    gov["hosts"].append("sousuo.www.gov.cn")
    gov["seeds"].append("https://www.gov.cn/zhengce/content/202401/content_1.htm")
    gov["discovery"] = [{"kind": "trs", "url": "https://www.gov.cn/zhengce/zuixin/home.htm",
                         "link_pattern": r"/content_\d+\.htm$", "checked_live": False, "note": "hand"}]
    gov["since"] = "2024-01-01"
    ndrc.update(listings=["https://www.ndrc.gov.cn/xxgk/zcfb/tz/index.html"], link_pattern=r"/t\d{8}_\d+\.html$",
                extract={"body": ".TRS_Editor"}, note="hand note")
    doc["sources"].append({"name": "手工来源", "id": "src-hand", "hosts": ["a.gov.cn"], "seeds": [],
                           "discovery": [{"kind": "sitemap", "url": "robots", "checked_live": False}]})
    doc["allow_private_addresses"] = True
    out.write_text(yaml.safe_dump(doc, allow_unicode=True, sort_keys=False), encoding="utf-8")

    rebuild(DOCS, PROVENANCE, out)
    again = yaml.safe_load(out.read_text(encoding="utf-8"))
    after = {e["name"]: e for e in again["sources"]}
    assert again["allow_private_addresses"] is True
    assert [e["name"] for e in again["sources"]][:61] == [e["name"] for e in doc["sources"]][:61]
    assert list(after)[-1] == "手工来源" and after["手工来源"]["discovery"][0]["url"] == "robots"
    g = after[GOV]
    assert g["discovery"] == gov["discovery"] and g["since"] == "2024-01-01"
    assert "sousuo.www.gov.cn" in g["hosts"] and "https://www.gov.cn/zhengce/content/202401/content_1.htm" in g["seeds"]
    assert g["seeds"][-1] == dropped and g["seeds"].count(dropped) == 1      # provenance seed re-added once
    n = after["中华人民共和国国家发展和改革会员会"]
    assert n["listings"] == ndrc["listings"] and n["link_pattern"] == ndrc["link_pattern"]
    assert n["extract"] == {"body": ".TRS_Editor"} and n["note"] == "hand note"
    pdf = after["中国信息通信研究院"]
    assert pdf["extract"] == {"expect": "pdf"}                                 # built hints still there
    load_registry(out)                                                         # still a valid registry


def test_merge_matches_by_id_then_name_and_drops_stale_no_seed_note():
    fresh = [{"name": "A", "id": "src-a", "hosts": ["a.cn"], "seeds": ["https://a.cn/1"], "listings": [],
              "link_pattern": None, "extract": {"expect": "pdf"}},
             {"name": "B", "id": "src-b", "hosts": ["b.cn"], "seeds": ["https://b.cn/1"], "listings": [],
              "link_pattern": None, "extract": {}}]
    existing = [{"name": "B", "id": "src-other", "hosts": [], "seeds": [], "note": NO_SEED_NOTE},
                {"name": "A renamed by hand", "id": "src-a", "hosts": ["a.cn", "x.cn"], "seeds": [],
                 "extract": {"expect": "html"}, "since": "2023-06-01"}]
    a, b = merge(fresh, existing)
    assert a["name"] == "A renamed by hand" and a["hosts"] == ["a.cn", "x.cn"] and a["seeds"] == ["https://a.cn/1"]
    assert a["extract"] == {"expect": "html"} and a["since"] == "2023-06-01" and a["listings"] == []
    assert b["id"] == "src-other" and b["seeds"] == ["https://b.cn/1"] and "note" not in b
    assert merge(fresh, []) == fresh and merge(fresh, []) is not fresh


def test_rebuild_refuses_a_broken_registry_and_replace_overrides(tmp_path):
    out = tmp_path / "sources.yaml"
    out.write_text("sources: [unclosed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="not valid YAML"):
        rebuild(DOCS, PROVENANCE, out)
    assert out.read_text(encoding="utf-8") == "sources: [unclosed\n"      # untouched
    out.write_text("sources: {a: 1}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'sources' list"):
        load_existing(out)
    rebuild(DOCS, PROVENANCE, out, replace=True)
    assert len(_sources(out)) == 61


def test_rebuilding_the_real_registry_changes_nothing(tmp_path):
    """The committed file is exactly what a rebuild writes: no hand edit is lost, nothing is reformatted."""
    out = tmp_path / "sources.yaml"
    text = Path(DEFAULT_REGISTRY).read_text(encoding="utf-8")
    out.write_text(text, encoding="utf-8")
    rebuild(DOCS, PROVENANCE, out)
    assert out.read_text(encoding="utf-8") == text
    fresh = {e["name"]: e for e in build(DOCS, PROVENANCE)}
    real = _sources(DEFAULT_REGISTRY)
    assert all(set(fresh[n]["seeds"]) <= set(real[n]["seeds"]) for n in fresh)


# ---------------------------------------------------------------- discovery data of the real registry

def _discovery():
    for name, e in _sources(DEFAULT_REGISTRY).items():
        for d in e.get("discovery") or []:
            yield name, e, d


def _listing_dir(url: str) -> str:
    path = urlsplit(url).path
    return path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"


def test_real_registry_discovery_entries_are_well_formed():
    problems = []
    for name, e, d in _discovery():
        where = f"{name} {d.get('url')}"
        if d.get("kind") not in KINDS:
            problems.append(f"{where}: kind {d.get('kind')!r}")
        if not isinstance(d.get("checked_live"), bool) or not (d.get("note") or "").strip():
            problems.append(f"{where}: checked_live must be true/false and a note must say where it came from")
        url = d.get("url")
        if not (d.get("kind") == "sitemap" and url == "robots"):
            parts = urlsplit(url or "")
            if parts.scheme not in ("http", "https") or parts.hostname not in e["hosts"]:
                problems.append(f"{where}: not an http(s) URL on hosts {e['hosts']}")
        if d.get("kind") == "hanweb" and not re.search(r"/col/col\d+/index\.html?$", url):
            problems.append(f"{where}: a Hanweb column page is /col/col<id>/index.html")
        if d.get("kind") == "trs" and not re.search(r"/(index|home|[a-z_]+)\.s?html?$", url):
            problems.append(f"{where}: a TRS listing is the first page (index.html / home.htm …)")
        pat = d.get("link_pattern")
        if pat is not None:
            try:
                rx = re.compile(pat)
            except re.error as exc:
                problems.append(f"{where}: link_pattern does not compile: {exc}")
                continue
            covered = [s for s in e["seeds"] if urlsplit(s).hostname == urlsplit(url).hostname
                       and urlsplit(s).path.startswith(_listing_dir(url))]
            if covered and not any(rx.search(s) for s in covered):
                problems.append(f"{where}: link_pattern matches none of the seeds under its column {covered}")
            if d.get("kind") == "hanweb":
                col = re.search(r"/col/col(\d+)/", url).group(1)
                if not any(rx.search(s) for s in e["seeds"] if f"art_{col}_" in s):
                    problems.append(f"{where}: link_pattern misses the seeds of column {col}")
    for name, e in _sources(DEFAULT_REGISTRY).items():
        if e.get("since") is not None:
            try:
                date.fromisoformat(str(e["since"]))
            except ValueError:
                problems.append(f"{name}: since {e['since']!r} is not an ISO date")
    assert not problems, "\n".join(problems)


def test_real_registry_covers_the_government_sources():
    by_source: dict[str, list[dict]] = {}
    for name, _, d in _discovery():
        by_source.setdefault(name, []).append(d)
    for name in (GOV, "中华人民共和国国家发展和改革会员会", "中华人民共和国国家互联网信息办公室", "中华人民共和国科学技术部",
                 "国家统计局", "北京市人民政府", "上海市人民政府", "山东省人民政府", "江西省人民政府"):
        assert name in by_source, name
    kinds = {d["kind"] for ds in by_source.values() for d in ds}
    assert {"trs", "hanweb", "feed", "links"} <= kinds
    assert len(by_source) >= 35
    # a TRS seed matched by its column's pattern: NDRC 解读 (a TRS column page of dated 解读 articles)
    ndrc = by_source["中华人民共和国国家发展和改革会员会"]
    jd = next(d for d in ndrc if d["url"].endswith("/xxgk/jd/jd/index.html"))
    assert re.search(jd["link_pattern"], "https://www.ndrc.gov.cn/xxgk/jd/jd/202212/t20221219_1343665.html")
    assert not re.search(jd["link_pattern"], "https://www.ndrc.gov.cn/xxgk/jd/jd/index_1.html")


def test_real_registry_loads_through_the_loader():
    """crawler.registry validates discovery (kinds, keys, URLs on hosts, regexes, since) and keeps every entry."""
    sources = load_registry()
    assert len(sources) == 61
    raw = _sources(DEFAULT_REGISTRY)
    for s in sources:
        e = raw[s.name]
        links = {d["url"] for d in e.get("discovery") or [] if d["kind"] == "links"}
        legacy = [u for u in e.get("listings") or [] if u not in links]
        assert [(d.kind, d.url, d.link_pattern) for d in s.discovery][:len(e.get("discovery") or [])] == \
            [(d["kind"], d["url"], d.get("link_pattern")) for d in e.get("discovery") or []], s.name
        assert len(s.discovery) == len(e.get("discovery") or []) + len(legacy), s.name
    assert sum(1 for s in sources if s.discovery) >= 35
