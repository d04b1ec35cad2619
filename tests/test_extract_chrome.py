"""Site chrome out of extracted bodies (SPEC §2): pages built like real government pages with a
language switch, 无障碍浏览, 手机扫一扫打开此页, 下载文字版/下载图片版, the title repeated, an empty
附件信息: and a 版权与免责声明 block, around and inside the article; a crawl of one source of 20 such pages
on a local server; the phrase list and the line filter on their own."""
import pytest

from crawler.archive import CrawlState, RawArchive
from crawler.chrome import drop_chrome_lines, is_chrome, load_chrome_phrases
from crawler.crawl import CrawlConfig, crawl, documents_from_archive
from crawler.extract import extract
from crawler.fetch import FetchConfig
from crawler.registry import Source
from tests.chrome_pages import CHROME_PHRASES, PENALTY, article, chrome_page, gold_text, layout_page
from tests.http_hosts import hosts, send
from tests.test_extract_structure import char_f1

PAGES = {
    "layout-penalty": lambda: (layout_page(PENALTY), PENALTY),
    "layout-notice": lambda: (layout_page(article(5)), article(5)),
    "unknown-container-chrome-inside": lambda: (chrome_page(article(3), "detail-body", True), article(3)),
    "unknown-container-chrome-around": lambda: (chrome_page(article(4), "detail-body", False), article(4)),
    "cms-container-chrome-inside": lambda: (chrome_page(article(6), "TRS_Editor", True), article(6)),
    "cms-container-chrome-around": lambda: (chrome_page(article(7), "TRS_Editor", False), article(7)),
}


def _squeezed(text: str) -> str:
    return "".join(text.split())


def assert_complete(text: str, a: dict) -> None:
    """Every paragraph of ``a`` on a line of ``text``, every table row on one line, cells in order."""
    lines = text.splitlines()
    for p in a["paras"] + a["sign"]:
        assert p in lines, (p, text)
    for row in a["table"]:
        assert "\t".join(row) in lines, (row, text)


@pytest.mark.parametrize("name", list(PAGES))
def test_chrome_leaves_the_body_and_the_real_text_stays(name):
    html, a = PAGES[name]()
    doc = extract(html.encode("utf-8"), "https://www.example.gov.cn/art/2024/3/1/art_1.html", "text/html; charset=utf-8")
    found = [p for p in CHROME_PHRASES if p in doc.text]
    assert not found, (found, doc.text)
    assert doc.text.count(a["title"]) == 0 and doc.title == a["title"]
    assert_complete(doc.text, a)
    f1 = char_f1(doc.text, gold_text(a))
    assert f1 >= 0.95, (f1, doc.text)


def test_chrome_phrases_and_real_lines():
    ph = load_chrome_phrases()
    for chrome in ("繁 | EN", "简体｜繁體｜English", "无障碍浏览", "手机扫一扫打开此页", "下载文字版 下载图片版", "附件信息:",
                   "【打印本页】 【关闭窗口】", "当前位置：首页 > 政策法规 > 通知公告", "京ICP备05044186号",
                   "版权与免责声明", "字号：大 中 小", " | "):
        assert is_chrome(chrome, ph), chrome
    for real in ("特此通知。", "国家数据局综合司", "2024年3月1日", "附件1", "附件：1. 数据要素典型案例推荐表", "一、总体要求",
                 "主办单位：国家数据局", "中文信息处理", "关于开展2024年度数据要素典型案例征集工作的通知",
                 "各省、自治区、直辖市人民政府：", "序号\t单位\t联系人\t电话", "EN 55032 电磁兼容标准"):
        assert not is_chrome(real, ph), real
    lines = ["繁 | EN", "首页", "机构概况", "无障碍浏览", "各有关单位：", "为做好数据要素工作，现通知如下。",
             "特此通知。", "国家数据局综合司", "2024年3月1日", "网站地图 | 联系我们", "主办单位：国家数据局"]
    # short lines between chrome go (a menu), short lines beside real text stay (salutation, signature)
    assert drop_chrome_lines(lines, ph) == lines[4:9]
    assert drop_chrome_lines(["通知", "放假7天"], ph) == ["通知", "放假7天"]  # nothing long: no context rule


def test_phrase_file_errors_name_the_line(tmp_path):
    bad = tmp_path / "phrases.txt"
    bad.write_text("# comment\n繁\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"phrases.txt:2"):
        load_chrome_phrases(str(bad))


SITE_LINE = "（本文来源：国家数据局门户网站，转载请注明出处）"


def _source_site(n: int = 20):
    """20 articles of one source: every page shares the header, menu, footer and disclaimer; the
    templates vary (CMS body class or not, chrome inside the body or around it, a table layout)."""
    def page(i):
        a = article(i)
        if i % 4 == 3:
            return layout_page(a), a
        return chrome_page(a, ("TRS_Editor", "detail-body")[i % 2], i % 3 == 0, site_line=SITE_LINE), a

    pages = {f"/art/{i}.html": page(i) for i in range(n)}
    routes = {"/robots.txt": lambda h: send(h, 200, b"User-agent: *\nAllow: /\n", "text/plain"),
              "/list.html": lambda h: send(h, 200, "".join(f'<a href="{p}">{i}</a>' for i, p in
                                                          enumerate(pages)).encode())}
    for path, (html, _) in pages.items():
        routes[path] = (lambda body: lambda h: send(h, 200, body))(html.encode("utf-8"))
    return routes, {p: a for p, (_, a) in pages.items()}


def test_crawl_of_one_source_shares_no_chrome_and_keeps_every_article(tmp_path):
    from corpus import stages as S
    from corpus.clean import CleanConfig
    from storage import read_manifest, read_table, write_table

    routes, articles = _source_site()
    with hosts(routes) as (h,):
        src = Source(name="数据局", id="src-nda", hosts=(h.netloc,), allow_private_addresses=True,
                     listings=(h.url("/list.html"),), link_pattern=r"/art/\d+\.html$")
        state, archive = CrawlState(tmp_path / "state.sqlite"), RawArchive(tmp_path)
        fast = FetchConfig(delay=0.0, retries=0, connect_timeout=2, read_timeout=5)
        stats = crawl([src], state, archive, CrawlConfig(fetch=fast))
        assert stats["fetched"] == 21 and not stats["failed"]  # the listing and 20 articles
    docs, fails = documents_from_archive([src], state, archive)
    assert len(docs) == 20 and not len(fails)
    for url, text in zip(docs["url"], docs["text"]):
        a = articles["/" + url.split("/", 3)[3]]
        bad = [ln for ln in text.splitlines() if is_chrome(ln, load_chrome_phrases()) or ln == a["title"]]
        assert not bad and not [p for p in CHROME_PHRASES if p in text], (url, bad, text)
        assert_complete(text, a)
    # a line the site adds to every article (no known phrase) goes in the clean stage: repeated per source
    assert (docs["text"].str.contains(SITE_LINE, regex=False)).sum() == 15
    write_table(docs.reindex(columns=S.DOCUMENTS_SCHEMA.names), tmp_path / "documents", name="documents",
                schema=S.DOCUMENTS_SCHEMA)
    st = S.clean_stage(tmp_path / "documents", tmp_path / "clean", tmp_path / "rejects", CleanConfig())
    assert st["repeated_lines"]["src-nda"] == {"documents": 20, "lines_removed": 15, "distinct_lines": 1,
                                               "examples": [SITE_LINE]}
    clean = read_table(tmp_path / "clean")
    assert len(clean) == 20 and not clean["text"].str.contains("转载请注明出处").any()
    for url, text in zip(clean["url"], clean["text"]):
        a = articles["/" + url.split("/", 3)[3]]
        for p in a["paras"][1:]:
            assert _squeezed(p) in _squeezed(text), (p, text)
    assert read_manifest(tmp_path / "clean")["stats"]["rule_matches"]["repeated_lines"] == 15
