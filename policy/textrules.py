"""Text rules of the policy record (SPEC §2 metadata): dates, Chinese numerals, titles in 《》 and the sentences
that link one document to another (废止, 实施, 根据), the issuer a title names, and the kind of a title.

Each function returns what it found and where (char offsets), so the record can say which words a field came
from. Patterns follow the drafting conventions of 《立法技术规范（试行）》 (全国人大常委会法工委, 2009): 施行日期
(``本条例自2020年1月1日起施行``), 废止 (``《…》同时废止``) and 制定依据 (``根据《…》，制定本条例``).
"""
from __future__ import annotations

import re
import unicodedata
from datetime import date

_CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_CN_UNITS = {"十": 10, "百": 100, "千": 1000}
CN_NUMBER = r"[零〇一二两三四五六七八九十百千\d]+"
DATE = r"(\d{4})\s*年\s*(\d{1,2})\s*月\s*(\d{1,2})\s*日"
_EFFECTIVE = re.compile(rf"自\s*{DATE}\s*起\s*(?:施行|实施|执行|生效)")
_EFFECTIVE_ON = re.compile(r"自\s*(公布|发布|印发|颁布|下发)之日起\s*(?:施行|实施|执行|生效)")
_EXPIRY_YEARS = re.compile(rf"有效期(?:为|暂定为|暂定|是)?\s*({CN_NUMBER})\s*年")
_EXPIRY_UNTIL = re.compile(rf"有效期(?:至|到|截至)\s*{DATE}")
_SELF = re.compile(r"本(?:办法|通知|方案|意见|规定|措施|政策|细则|规划|条例|决定|文件|实施意见|若干措施|计划)|施行|实施日期")
_TITLE = r"《([^《》]{2,80})》"
_PAREN = r"(?:\s*[（(][^（）()]{0,80}[）)])?"
_TITLE_LIST = rf"{_TITLE}{_PAREN}(?:\s*(?:[、,，]|和|及|以及|与)\s*{_TITLE}{_PAREN})*"
_REPEAL_AFTER = re.compile(rf"((?:{_TITLE_LIST}))\s*(?:[，,]?\s*)(?:同时|一并|予以|即行|相应)?\s*(?:废止|停止执行)")
_REPEAL_BEFORE = re.compile(rf"废止\s*((?:{_TITLE_LIST}))")
_IMPLEMENT = re.compile(rf"(?:贯彻)?实施\s*((?:{_TITLE_LIST}))")
_CITE = re.compile(rf"(?:根据|依据|依照)\s*((?:{_TITLE_LIST}))")
_ANY_TITLE = re.compile(_TITLE)
_ISSUER_END = (r"(?:人民政府办公厅|人民政府办公室|人民政府|人民代表大会常务委员会|人大常委会|人民代表大会|办公厅|办公室|"
               r"委员会|领导小组|小组|省委|市委|区委|县委|中央|国务院|[部厅局委署院行会处办]|部门|中心)")
_TITLE_ISSUER = re.compile(rf"^\s*((?:[\u4e00-\u9fff]{{1,30}}?{_ISSUER_END}[\s、]*)+?)\s*(?:关于|印发|发布|转发)")
_INTERPRET = re.compile(r"解读|答记者问|答问|问答|一图读懂|一图速看|一图看懂|图解|负责人就|政策吹风")
_NEWS = re.compile(r"^《|发布[:：]?$|发布《|印发《|出台|召开|举行|会议|观察|评述|速看|重磅|明确|将出台|正式印发|"
                   r"^[\u4e00-\u9fff]{2,3}(?:印发|发布)《")
_REPORT = re.compile(r"报告|白皮书|研究|评估体系|标准$|指数")
_RULE_END = re.compile(r"(条例|规定|办法|细则|规则|实施办法)$")
_LAW_END = re.compile(r"(?<!办)法$")
_NORMATIVE = re.compile(r"通知|意见|方案|规划|决定|措施|计划|要点|指引|指南|纲要|公告|通告|批复|函|清单|目录")
_VERSION_NOTE = re.compile(r"[（(][^（）()]*(?:试行|暂行|修订|修正|征求意见稿|草案|\d{4}年?)[^（）()]*[）)]$")


def cn_int(text: str) -> int | None:
    """A Chinese or Arabic numeral as an int: 五 -> 5, 十 -> 10, 二十三 -> 23, 一百零五 -> 105, 12 -> 12; None if
    ``text`` is not one."""
    text = unicodedata.normalize("NFKC", text.strip())
    if not text:
        return None
    if text.isdigit():
        return int(text)
    total, digit = 0, None
    for ch in text:
        if ch in _CN_DIGITS:
            digit = _CN_DIGITS[ch]
        elif ch in _CN_UNITS:
            total += (1 if digit is None else digit) * _CN_UNITS[ch]
            digit = None
        else:
            return None
    return total + (digit or 0)


def to_date(y: str, m: str, d: str) -> date | None:
    """``date(y, m, d)`` from strings, None when not a calendar day."""
    try:
        return date(int(y), int(m), int(d))
    except ValueError:
        return None


def effective_rule(text: str) -> tuple[date | str | None, str]:
    """The 施行日期 a text states: a date (``自2020年1月1日起施行``), or the word of a relative start
    (``公布`` for ``自公布之日起施行``: the caller maps it to the published or written date), with the matched
    words; ``(None, "")`` when the text states none. The last statement wins (施行 clauses close a text)."""
    found = list(_EFFECTIVE.finditer(text)) + list(_EFFECTIVE_ON.finditer(text))
    if not found:
        return None, ""
    m = max(found, key=lambda x: x.start())
    if m.re is _EFFECTIVE:
        return to_date(*m.groups()), m.group(0)
    return m.group(1), m.group(0)


def _about_itself(text: str, start: int) -> bool:
    """Whether the sentence around ``start`` speaks of the document itself (本办法…, …起施行): 评估结果有效期2年 is
    the period of something the document governs, not its own."""
    lo = max(text.rfind(p, 0, start) for p in "。；\n") + 1
    hi = min((i for i in (text.find(p, start) for p in "。；\n") if i >= 0), default=len(text))
    return bool(_SELF.search(text[lo:hi]))


def expiry_rule(text: str) -> tuple[date | int | None, str]:
    """The 有效期 a text states of itself: an end date (``本通知有效期至2025年12月31日``) or a number of years
    (``自印发之日起施行，有效期5年``), with the matched words; ``(None, "")`` when none."""
    for m in _EXPIRY_UNTIL.finditer(text):
        if _about_itself(text, m.start()):
            return to_date(*m.groups()), m.group(0)
    for m in _EXPIRY_YEARS.finditer(text):
        if _about_itself(text, m.start()) and (n := cn_int(m.group(1))) and 0 < n < 100:
            return n, m.group(0)
    return None, ""


def add_years(d: date, n: int) -> date:
    """``d`` plus ``n`` years, the end of the period: 2020-01-01 + 5 -> 2024-12-31 (a day before the anniversary;
    29 February moves to the 28th)."""
    from datetime import timedelta

    try:
        anniversary = d.replace(year=d.year + n)
    except ValueError:
        anniversary = d.replace(year=d.year + n, day=28)
    return anniversary - timedelta(days=1)


def _titles(chain: str) -> list[str]:
    return [m.group(1).strip() for m in _ANY_TITLE.finditer(chain)]


def link_mentions(text: str) -> list[tuple[str, str, int]]:
    """``(type, title, offset)`` of every document a text repeals, implements or cites by its 《title》:
    ``《…》同时废止`` / ``废止《…》`` -> repeals, ``实施《…》`` -> implements, ``根据《…》`` -> cites (lists of titles
    joined by 、/和 count each). A title is reported once per type, at its first offset."""
    out, seen = [], set()
    for kind, rx in (("repeals", _REPEAL_AFTER), ("repeals", _REPEAL_BEFORE), ("implements", _IMPLEMENT),
                     ("cites", _CITE)):
        for m in rx.finditer(text):
            for t in _titles(m.group(1)):
                if (kind, t) not in seen:
                    seen.add((kind, t))
                    out.append((kind, t, m.start()))
    return sorted(out, key=lambda x: x[2])


def title_issuer(title: str) -> str | None:
    """The issuing body a title opens with (``工业和信息化部关于…`` -> 工业和信息化部; ``中共中央 国务院印发…`` ->
    ``中共中央 国务院``), None when it opens with none."""
    m = _TITLE_ISSUER.match(title or "")
    return " ".join(m.group(1).split()) if m else None


def strip_version(title: str) -> str:
    """A title without a closing version note (（试行）, （2019年修订）, （征求意见稿）)."""
    t = title.strip()
    while True:
        s = _VERSION_NOTE.sub("", t).strip()
        if s == t:
            return t
        t = s


def title_kind(title: str) -> str:
    """What a title says the document is: ``interpretation`` (解读, 答记者问), ``news`` (``《…》发布``, ``江苏印发
    《…》``), ``report``, ``law`` (…法), ``rule`` (条例, 规定, 办法, 细则), ``normative`` (通知, 意见, 方案 …) or
    ``other``."""
    t = " ".join((title or "").split())
    core = strip_version(t)
    if _INTERPRET.search(t):
        return "interpretation"
    if re.search(r"(?:的通知|的意见|的决定)$", core) or (title_issuer(t) and _NORMATIVE.search(t)):
        return "normative"
    if _NEWS.search(t) and not title_issuer(t):
        return "news"
    if core.endswith("》") or (_REPORT.search(t) and not _NORMATIVE.search(t)):
        return "report" if _REPORT.search(t) else "news"
    if _LAW_END.search(core) and not _NORMATIVE.search(core[-4:]):
        return "law"
    if _RULE_END.search(core) and not re.search(r"(?:的通知|的决定|的意见)$", core):
        return "rule"
    if _NORMATIVE.search(t):
        return "normative"
    return "other"
