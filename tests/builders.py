"""Pages and PDFs the crawler tests build themselves."""
from __future__ import annotations

import io

GOV_BODY = ("为贯彻落实党中央、国务院决策部署，加快构建数据基础制度，充分发挥数据要素作用，现提出如下意见。"
            "一、总体要求。坚持促进数据合规高效流通使用，赋能实体经济。二、建立保障权益、合规使用的数据产权制度。")


def gov_page(body: str = GOV_BODY, charset_meta: str = "utf-8") -> str:
    """A page in the gov.cn/TRS template: meta tags, a header table, #UCAP-CONTENT, nav and share bar."""
    return f"""<!DOCTYPE html><html><head><meta http-equiv="Content-Type" content="text/html; charset={charset_meta}">
<title>国务院关于数据基础制度的意见_政策_中国政府网</title>
<meta name="ArticleTitle" content="中共中央 国务院关于构建数据基础制度更好发挥数据要素作用的意见">
<meta name="PubDate" content="2022-12-19 18:00">
<meta name="ContentSource" content="新华社">
<meta name="ColumnName" content="政策">
</head><body>
<div class="header"><a href="/">首页</a> | <a href="/zhengce/">政策</a></div>
<div class="nav">导航 政策 新闻 服务</div>
<table class="bd1"><tr><td><b>标　　题：</b></td><td>中共中央 国务院关于构建数据基础制度更好发挥数据要素作用的意见</td></tr>
<tr><td><b>发文机关：</b></td><td>中共中央 国务院</td><td><b>发文字号：</b></td><td>国发〔2022〕32号</td></tr>
<tr><td><b>成文日期：</b></td><td>2022年12月02日</td><td><b>发布日期：</b></td><td>2022年12月19日</td></tr></table>
<div class="pages_content" id="UCAP-CONTENT"><p>{body[:60]}</p><p>{body[60:]}</p></div>
<div class="share">分享到：微信 微博</div>
<div class="footer">版权所有：中国政府网 | 网站标识码bm01000001</div>
</body></html>"""


def gbk_page() -> bytes:
    """A Hanweb-style page encoded in GBK whose <meta> says gb2312 (servers will lie in the header)."""
    html = gov_page(charset_meta="gb2312").replace('class="pages_content" id="UCAP-CONTENT"', 'id="zoom"')
    return html.encode("gbk")


def text_pdf(pages: list[str]) -> bytes:
    """A PDF with a text layer (reportlab, CID font STSong-Light), one string per page, with a running
    header and a page-number footer on every page."""
    from reportlab.lib.pagesizes import A4
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfgen import canvas

    pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
    buf = io.BytesIO()
    c = canvas.Canvas(buf, pagesize=A4)
    c.setTitle("数据要素白皮书")
    for i, text in enumerate(pages, 1):
        c.setFont("STSong-Light", 10)
        c.drawString(60, 800, "中国信息通信研究院 数据要素白皮书")
        c.setFont("STSong-Light", 14)
        for j in range(0, len(text), 30):
            c.drawString(60, 740 - (j // 30) * 24, text[j:j + 30])
        c.setFont("STSong-Light", 10)
        c.drawString(290, 40, f"- {i} -")
        c.showPage()
    c.save()
    return buf.getvalue()


def image_pdf(lines: list[str]) -> bytes:
    """A scanned-style PDF: one page that is only an image of the text (no text layer)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc", 40)
    img = Image.new("RGB", (1400, 120 + 70 * len(lines)), "white")
    d = ImageDraw.Draw(img)
    for i, ln in enumerate(lines):
        d.text((60, 60 + 70 * i), ln, fill="black", font=font)
    buf = io.BytesIO()
    img.save(buf, format="PDF", resolution=200)
    return buf.getvalue()
