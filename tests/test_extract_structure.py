"""Structure of extracted HTML (SPEC §2), on pages built like the held-out real ones and run
through the crawl's extraction entry point (:class:`crawler.sandbox.ExtractionPool`, i.e. a worker
process calling :func:`crawler.extract.extract`): a TRS 信息公开 page whose header table (索引号,
发文机关, 成文日期 …) goes to metadata and not into the body, a penalty-disclosure page whose body is
a table with multi-line cells (one line per row, once), and titles carrying ``<div>`` markup."""
from collections import Counter
from datetime import date

import pytest

from crawler.document import ExtractConfig
from crawler.sandbox import ExtractionPool


def char_f1(pred: str, gold: str) -> float:
    """Character-level F1 of ``pred`` against ``gold``: bags of non-whitespace characters."""
    p, g = Counter(c for c in pred if not c.isspace()), Counter(c for c in gold if not c.isspace())
    overlap = sum((p & g).values())
    if not overlap:
        return 0.0
    precision, recall = overlap / sum(p.values()), overlap / sum(g.values())
    return 2 * precision * recall / (precision + recall)


@pytest.fixture(scope="module")
def pool():
    with ExtractionPool(ExtractConfig(timeout=60, memory=1 << 30)) as p:
        yield p


def extract_page(pool, html: str, url: str):
    return pool.extract(html.encode("utf-8"), url, "text/html; charset=utf-8")


# ---------------------------------------------------------------- TRS 信息公开 page with a header table

TITLE = "浙江省人民政府办公厅关于进一步加强数据资源管理促进数字经济高质量发展的通知"
HEADER = {"索引号": "002482070/2023-00123", "主题分类": "综合政务/其他", "发文机关": "浙江省人民政府办公厅",
          "成文日期": "2023-06-15", "标题": TITLE, "发文字号": "浙政办发〔2023〕31号", "发布日期": "2023-06-20"}
BODY = ["各市、县（市、区）人民政府，省政府直属各单位：",
        "为深入贯彻落实党中央、国务院关于构建数据基础制度的决策部署，加快数据资源开发利用，经省政府同意，现就有关事项通知如下。",
        "一、健全数据资源管理体制。各地要明确数据资源主管部门，统筹推进公共数据归集、治理、共享和开放工作。",
        "二、推进公共数据授权运营。在保障安全的前提下，探索公共数据授权运营机制，培育数据要素市场主体。",
        "三、强化数据安全保障。落实数据分类分级保护制度，建立健全数据安全风险评估、监测预警和应急处置机制。",
        "四、加强组织实施。各地各部门要结合实际制定具体措施，确保各项任务落到实处，重大情况及时报告省政府。",
        "浙江省人民政府办公厅", "2023年6月15日"]


def _header_table() -> str:
    cell = '<td class="lab">{}：</td><td>{}</td>'
    rows = [("索 引 号", "主题分类"), ("发文机关", "成文日期"), ("标　　题",), ("发文字号", "发布日期")]
    trs = "".join("<tr>" + "".join(cell.format(k, HEADER[k.replace(" ", "").replace("　", "")]) for k in row)
                  + "</tr>" for row in rows)
    mobile = "".join(f"<li><span>{k}：</span><span>{v}</span></li>" for k, v in HEADER.items())
    return (f'<div class="xxgk_table"><table width="100%" border="0">{trs}</table></div>'
            f'<div class="xxgk_mobile" style="display:none"><ul>{mobile}</ul></div>')


def trs_xxgk_page(container: str) -> str:
    """A TRS 信息公开 page: the header table (and its hidden mobile copy) above a TRS_Editor body,
    both inside ``container`` (a CMS class the extractor knows, or one it does not)."""
    paras = "".join(f'<p style="text-indent:2em;">　　{p}</p>\n' for p in BODY[:-2])
    paras += "".join(f'<p align="right">{p}</p>' for p in BODY[-2:])
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8">
<title>{TITLE}_省政府办公厅文件_浙江省人民政府门户网站</title>
<meta name="ArticleTitle" content="{TITLE}"><meta name="PubDate" content="2023-06-20 16:30">
<meta name="ContentSource" content="浙江省人民政府办公厅"></head><body>
<div class="header"><a href="/">首页</a> <a href="/xxgk/">信息公开</a></div>
<div class="crumb">当前位置：首页 &gt; 信息公开 &gt; 省政府办公厅文件</div>
<div class="{container}">{_header_table()}
<div class="title_box"><h1>{TITLE}</h1></div>
<div class="TRS_Editor"><style type="text/css">.TRS_Editor P{{margin-top:5px;font-size:12pt;}}</style>
<div class="Custom_UnionStyle">{paras}</div></div>
<div class="fj">相关附件：无</div></div>
<div class="share">分享到：微信 微博</div>
<div class="footer">主办单位：浙江省人民政府办公厅 浙ICP备05001234号</div>
</body></html>"""


@pytest.mark.parametrize("container", ["pages_content", "zw_content"])  # a CMS container; trafilatura's fallback
def test_header_table_goes_to_metadata_once_and_not_into_the_body(pool, container):
    doc = extract_page(pool, trs_xxgk_page(container), "https://www.zj.gov.cn/art/2023/6/20/art_1229017138_2479999.html")
    for label in ("索引号", "索 引 号", "主题分类", "发文机关", "成文日期", "发文字号", "发布日期", "标题", "标　　题"):
        assert label not in doc.text, (label, doc.text)
    for value in ("002482070/2023-00123", "综合政务/其他", "浙政办发〔2023〕31号"):
        assert value not in doc.text, (value, doc.text)
    assert doc.title == TITLE and doc.issuer == "浙江省人民政府办公厅" and doc.doc_number == "浙政办发〔2023〕31号"
    assert doc.pubtime == date(2023, 6, 20) and doc.written_date == date(2023, 6, 15)
    gold = "\n".join(BODY)
    assert all(doc.text.count(p) == 1 for p in BODY[1:-2]), doc.text  # every paragraph once
    f1 = char_f1(doc.text, gold)
    assert f1 >= 0.95, (f1, doc.text)


# ---------------------------------------------------------------- penalty disclosure: a table body

PENALTY_ROWS = [
    ["序号", "当事人名称", "主要违法违规行为", "行政处罚内容", "作出决定机关"],
    ["1", ["中国某某银行股份有限公司北京市分行", "（统一社会信用代码：91110000MA00ABCD1X）"],
     ["一、贷款“三查”不尽职，导致信贷资金被挪用；", "二、违规向房地产开发企业发放流动资金贷款；",
      "三、个人经营性贷款资金用途管控不到位。"], "罚款合计120万元", "北京金融监管局"],
    ["2", ["张某某", "（时任中国某某银行股份有限公司北京市分行公司业务部总经理）"],
     "对上述第一项违法违规行为负有直接责任", "警告并罚款5万元", "北京金融监管局"],
    ["3", ["李某某", "（时任中国某某银行股份有限公司北京市分行副行长）"],
     ["对上述第一、二项违法违规行为", "负有管理责任"], "警告并罚款5万元", "北京金融监管局"],
]


def _word_cell(value, n: int, header: bool) -> str:
    """A cell as Word's HTML export writes it: ``<p class=MsoNormal>`` per line (or ``<br>`` between
    lines for the party column), spans, ``<o:p>``, source lines wrapped mid-text."""
    lines = value if isinstance(value, list) else [value]
    span = "<span style='font-size:10.5pt;font-family:仿宋_GB2312'>{}<o:p></o:p></span>"
    if n == 1:  # one paragraph, lines split by <br>
        inner = "<p class=MsoNormal>" + "<br>\n".join(span.format(ln) for ln in lines) + "</p>"
    else:
        wrap = [ln[:9] + "\n" + ln[9:] if len(ln) > 12 else ln for ln in lines]  # Word wraps source lines
        inner = "".join(f"<p class=MsoNormal align=center>{span.format(ln)}</p>" for ln in wrap)
    tag = "th" if header else "td"
    return f"<{tag} width=120 valign=top style='border:solid windowtext 1.0pt'>{inner}</{tag}>"


def penalty_page(container: str) -> str:
    """An NFRA 行政处罚信息公开表 page: a heading paragraph and a Word-exported table in ``container``."""
    rows = "".join("<tr>" + "".join(_word_cell(v, n, i == 0) for n, v in enumerate(row)) + "</tr>\n"
                   for i, row in enumerate(PENALTY_ROWS))
    return f"""<html><head><meta charset="utf-8">
<title>北京金融监管局行政处罚信息公开表（京金罚决字〔2024〕12号）</title></head><body>
<div class="nav">首页 机构概况 新闻资讯 政务信息 在线服务 互动交流</div>
<div class="{container}"><div class="Section0">
<p class=MsoNormal align=center><b><span style='font-size:16pt'>行政处罚信息公开表</span></b></p>
<table class=MsoNormalTable border=1 cellspacing=0 cellpadding=0>{rows}</table>
<p class=MsoNormal><span>&nbsp;</span></p></div></div>
<div class="footer">版权所有：国家金融监督管理总局 京ICP备05044186号</div>
</body></html>"""


def _flat(value) -> str:
    return "".join(value) if isinstance(value, list) else value


@pytest.mark.parametrize("container", ["TRS_Editor", "wenzhang-content"])  # a CMS container; the fallback
def test_table_body_one_line_per_row_once(pool, container):
    doc = extract_page(pool, penalty_page(container), "https://www.nfra.gov.cn/cn/view/pages/ItemDetail.html?docId=1")
    lines = doc.text.splitlines()
    for row in PENALTY_ROWS:
        cells = ["".join(_flat(v).split()) for v in row]
        hits = [ln for ln in lines if "".join(ln.split("\t")[1:2]).replace(" ", "") == cells[1]]
        assert len(hits) == 1, (row[0], doc.text)  # the row comes out once, on one line
        assert ["".join(c.split()) for c in hits[0].split("\t")] == cells, hits[0]  # its cells in order
    assert doc.text.count("对上述第一项违法违规行为负有直接责任") == 1
    gold = "行政处罚信息公开表\n" + "\n".join("\t".join(_flat(v) for v in row) for row in PENALTY_ROWS)
    f1 = char_f1(doc.text, gold)
    assert f1 >= 0.95, (f1, doc.text)


# ---------------------------------------------------------------- titles without markup

CLEAN = "关于开展2024年度数据要素典型案例征集工作的通知"


@pytest.mark.parametrize("where", ["meta", "meta_escaped", "header_cell", "title_tag", "h1"])
def test_title_markup_is_stripped_from_every_source(pool, where):
    marked = f'<div class="title">{CLEAN}</div>'
    escaped = marked.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    head = {"meta": f'<meta name="ArticleTitle" content="{escaped}">',  # content is the literal markup
            "meta_escaped": f'<meta name="ArticleTitle" content="{escaped.replace("&", "&amp;")}">',
            "title_tag": f"<title>{marked}\n  </title>"}.get(where, "")
    body = {"header_cell": f"<table><tr><td>标题：</td><td>{escaped}</td></tr>"
                           "<tr><td>发文机关：</td><td>国家数据局</td></tr></table>",
            "h1": f"<h1>\n<div>{CLEAN}</div>\n</h1>"}.get(where, "")
    html = (f'<html><head><meta charset="utf-8">{head}</head><body>{body}<div class="TRS_Editor">'
            "<p>各省、自治区、直辖市数据管理部门：为总结推广数据要素应用经验，现组织开展典型案例征集工作。</p></div></body></html>")
    doc = extract_page(pool, html, "https://www.nda.gov.cn/sjj/zwgk/tzgg/0101/20240101000000000001_pc.html")
    assert doc.title == CLEAN, (where, doc.title)
