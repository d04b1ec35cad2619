"""Pages built like real government pages with their site chrome around (and inside) the article: a
language switch (繁 / EN), an accessibility link (无障碍浏览), "手机扫一扫打开此页", download links
(下载文字版 / 下载图片版), the title repeated, an empty "附件信息:" and a 版权与免责声明 block of
numbered paragraphs. The real text of each page is known (:func:`gold_text`)."""
from __future__ import annotations

CHROME_PHRASES = ("繁", "EN", "无障碍", "手机扫一扫", "下载文字版", "下载图片版", "附件信息", "版权与免责声明",
                  "凡本网注明", "京ICP备", "当前位置", "打印本页", "关闭窗口", "网站地图", "联系我们")

DISCLAIMER = ["一、凡本网注明“来源：国家金融监督管理总局”的所有作品，版权均属于国家金融监督管理总局，未经本网授权，"
              "任何单位及个人不得转载、摘编或以其它方式使用上述作品。",
              "二、凡本网注明“来源：XXX（非国家金融监督管理总局）”的作品，均转载自其它媒体，转载目的在于传递更多信息，"
              "并不代表本网赞同其观点和对其真实性负责。",
              "三、如因作品内容、版权和其它问题需要同本网联系的，请在30日内进行。"]


def article(n: int) -> dict:
    """The real text of article ``n``: title, paragraphs and a table (rows of cells)."""
    title = f"关于开展第{n}批数据要素典型案例征集工作的通知"
    paras = [f"各省、自治区、直辖市及计划单列市、新疆生产建设兵团数据管理部门：",
             f"为深入贯彻落实党中央、国务院关于构建数据基础制度的决策部署，推动第{n}批数据要素典型案例经验交流，"
             "现就征集工作有关事项通知如下。",
             f"一、征集范围。围绕数据产权、流通交易、收益分配、安全治理等方面，征集第{n}批具有示范意义的实践案例。",
             f"二、工作要求。各地要认真组织推荐，于2024年{n % 12 + 1}月30日前报送推荐材料，逾期不予受理。",
             "三、联系方式。联系人及电话见下表。"]
    table = [["序号", "单位", "联系人", "电话"], ["1", f"数据资源处{n}科", "王某某", f"010-6855{n:04d}"],
             ["2", "政策法规处", "李某某", "010-68551234"]]
    return {"title": title, "paras": paras, "table": table, "sign": ["国家数据局综合司", f"2024年{n % 12 + 1}月1日"]}


def gold_text(a: dict) -> str:
    """The article's real text as the extractor should give it: paragraphs, the table one row per line
    (cells tab-separated), the signature."""
    return "\n".join(a["paras"] + ["\t".join(r) for r in a["table"]] + a["sign"])


def _table(rows: list[list[str]]) -> str:
    return ('<table border="1" class="MsoTableGrid">' + "".join(
        "<tr>" + "".join(f"<td><p>{c}</p></td>" for c in r) + "</tr>" for r in rows) + "</table>")


def chrome_page(a: dict, container: str = "detail-body", chrome_inside: bool = True, site_line: str = "") -> str:
    """A page of article ``a`` with every kind of chrome; ``container`` is the class of the element holding
    the text (one the extractor knows, e.g. ``TRS_Editor``, or not). With ``chrome_inside`` the download
    links, the repeated title and the empty 附件信息 sit inside that element, as some CMS templates put them;
    ``site_line``, a paragraph the site puts at the end of every article, goes inside it too."""
    paras = "".join(f"<p style='text-indent:2em'>{p}</p>" for p in a["paras"])
    sign = "".join(f"<p align='right'>{s}</p>" for s in a["sign"])
    inner_top = (f"<div class='dl'><a href='/x.txt'>下载文字版</a> <a href='/x.jpg'>下载图片版</a></div>"
                 f"<h2 class='art-title'>{a['title']}</h2>")
    inner_end = "<div class='fujian'><span>附件信息:</span></div>"
    sign += f"<p>{site_line}</p>" if site_line else ""
    top, end = (inner_top, inner_end) if chrome_inside else ("", "")
    out_top, out_end = ("", "") if chrome_inside else (inner_top, inner_end)
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>{a['title']}</title></head><body>
<div class="topbar"><div class="lang"><a href="/tw/">繁</a> | <a href="/en/">EN</a></div>
<div class="tools"><a href="javascript:void(0)" id="cniil_wza">无障碍浏览</a> <a href="/login">登录</a></div></div>
<div class="logo"><a href="/"><img src="/logo.png" alt="国家数据局"></a></div>
<div class="menu"><ul><li><a href="/">首页</a></li><li><a href="/jg/">机构概况</a></li><li><a href="/xw/">新闻发布</a></li>
<li><a href="/zc/">政策法规</a></li><li><a href="/hd/">互动交流</a></li></ul></div>
<div class="location">当前位置：<a href="/">首页</a> &gt; <a href="/zc/">政策法规</a> &gt; 通知公告</div>
<div class="main"><div class="title-area"><h1>{a['title']}</h1>
<div class="info"><span>发布时间：2024-03-01</span> <span>来源：综合司</span>
<span class="ewm">手机扫一扫打开此页<img src="/qr.png"></span></div></div>{out_top}
<div class="{container}">{top}{paras}{_table(a['table'])}{sign}{end}</div>{out_end}
<div class="print"><a href="javascript:window.print()">打印本页</a> <a href="javascript:window.close()">关闭窗口</a></div>
<div class="related"><h3>相关文章</h3><ul><li><a href="/a/1.html">关于印发《数据要素行动计划》的通知</a></li>
<li><a href="/a/2.html">国家数据局关于公布首批数据要素典型案例的公告</a></li></ul></div></div>
<div class="bqsm"><div class="bqsm-tit">版权与免责声明</div><div class="bqsm-con">
{''.join(f'<p>{p}</p>' for p in DISCLAIMER)}</div></div>
<div class="foot"><a href="/map">网站地图</a> | <a href="/lx">联系我们</a><br>主办单位：国家数据局
京ICP备2023012345号 京公网安备11010202001234号</div>
</body></html>"""


PENALTY = {"title": "北京金融监管局行政处罚信息公开表（京金罚决字〔2024〕12号）",
           "paras": ["行政处罚信息公开表"],
           "table": [["序号", "当事人名称", "主要违法违规行为", "行政处罚内容", "作出决定机关"],
                     ["1", "中国某某银行股份有限公司北京市分行", "贷款“三查”不尽职，导致信贷资金被挪用；违规向房地产开发企业发放流动资金贷款",
                      "罚款合计120万元", "北京金融监管局"],
                     ["2", "张某某（时任中国某某银行股份有限公司北京市分行公司业务部总经理）",
                      "对上述第一项违法违规行为负有直接责任", "警告并罚款5万元", "北京金融监管局"],
                     ["3", "李某某（时任中国某某银行股份有限公司北京市分行副行长）",
                      "对上述第一、二项违法违规行为负有管理责任", "警告并罚款5万元", "北京金融监管局"]],
           "sign": []}


def layout_page(a: dict) -> str:
    """An older template: the page laid out in tables, the article's text and every kind of chrome in
    the same layout cells (no CMS body class): the case where the extractor falls back to trafilatura."""
    paras = "".join(f"<p>{p}</p>" for p in a["paras"])
    sign = "".join(f"<p align='right'>{s}</p>" for s in a["sign"])
    return f"""<html><head><meta charset="utf-8"><title>{a['title']}</title></head><body>
<table width="1000" align="center"><tr><td>
<table width="100%"><tr><td align="left"><a href="/tw/">繁</a>&nbsp;|&nbsp;<a href="/en/">EN</a></td>
<td align="right"><a href="javascript:;" onclick="aria.start()">无障碍浏览</a></td></tr></table>
<table width="100%"><tr><td><a href="/">首页</a></td><td><a href="/jg">机构概况</a></td><td><a href="/zw">政务信息</a></td>
<td><a href="/fw">在线服务</a></td><td><a href="/hd">互动交流</a></td></tr></table>
<table width="100%"><tr><td valign="top">
<div class="wenzhang">
<div class="wenzhang-title">{a['title']}</div>
<div class="wenzhang-info">发布时间：2024-03-01 来源：北京监管局 <span>手机扫一扫打开此页</span></div>
<div class="wenzhang-dl"><a href="/d/1.txt">下载文字版</a>&nbsp;<a href="/d/1.jpg">下载图片版</a></div>
<div class="wenzhang-content"><div class="Section0">{paras}{_table(a['table'])}{sign}</div></div>
<div class="wenzhang-fj">附件信息:</div>
<div class="wenzhang-title2">{a['title']}</div>
<div class="wenzhang-sm"><b>版权与免责声明</b>{''.join(f'<p>{p}</p>' for p in DISCLAIMER)}</div>
</div></td></tr></table>
<table width="100%"><tr><td align="center">版权所有：国家金融监督管理总局 京ICP备05044186号<br>
<a href="/map">网站地图</a> | <a href="/lx">联系我们</a></td></tr></table>
</td></tr></table></body></html>"""
