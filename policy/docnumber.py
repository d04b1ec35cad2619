"""文号 (document numbers, SPEC §2 header 发文字号) in one normal form, and found in a header or a text.

GB/T 9704-2012 §7.2.4 writes a 发文字号 as 机关代字 + 年份 in 六角括号〔〕 + 序号 + 号 (``国发〔2019〕5号``); pages and
texts spell it ``国发[2019]5号``, ``国发(2019)5号``, ``国发〔2019〕第5号``, ``国发【2019】05号`` or with full-width
digits. :func:`normalize_doc_number` maps every spelling to ``国发〔2019〕5号``; orders (令) become
``国务院令第588号``.
"""
from __future__ import annotations

import re
import unicodedata

_OPEN = "〔[［【(（﹝〈<《{｛"
_CLOSE = "〕]］】)）﹞〉>》}｝"
_PREFIX = r"[\u4e00-\u9fffA-Za-z]{1,14}"
_NUMBER = re.compile(
    rf"(?P<prefix>{_PREFIX})\s*[{re.escape(_OPEN)}]\s*(?P<year>(?:19|20)\d\d)\s*[{re.escape(_CLOSE)}]\s*"
    r"第?\s*(?P<n>\d{1,5})\s*号")
_ORDER = re.compile(rf"(?P<prefix>{_PREFIX}?)令\s*(?:\(|（)?\s*第\s*(?P<n>\d{{1,5}})\s*号")
# words glued before an order's issuer in running text, never part of it (根据国务院令第588号 …)
_LEAD = re.compile(r"^.*(?:废止|并|印发|根据|按照|依据|依照|贯彻|落实|执行|关于|文件|通知|意见|决定|方案|规划|办法|公告|函|《[^》]*》|的)")
# A 机关代字 (GB/T 9704-2012 §7.2.4) is an agency's short code of a few characters (国发, 粤办函, 发改高技,
# 国卫办医函, 国卫基层家医便函), never longer than _MAX_CODE; in a flattened text the words before it (the
# title it closes, 关于印发…的通知, a verb citing it, 根据/按照…, the issuer's name, a date) are glued on. The code
# is what follows the last such word. 函 closes codes as well as titles (粤办函): kept when it ends the prefix;
# 规划 is part of codes such as 国卫规划发.
_MAX_CODE = 8
_CODE_LEAD = re.compile(
    r"废止|印发|转发|关于|根据|按照|依据|依照|参照|对照|贯彻|落实|执行|确保|出台|发布|文件|"
    r"通知|意见|决定|方案|规划(?![发函字])|办法|公告|通告|通报|批复|报告|规定|细则|纲要|计划|措施|指引|指南|条例|要点|"
    r"国务院|人民政府|政府|办公厅|办公室|委员会|卫健委|总局|[我本][院省市]|部门|函|号|年|月|日|并|按|见|从|以|为|了|的")


def _ascii_digits(text: str) -> str:
    """Full-width and other Unicode decimal digits as ASCII (０５ -> 05); other characters unchanged."""
    return "".join(str(unicodedata.digit(ch)) if ch.isdigit() and not ch.isascii() else ch for ch in text)


def _clean_prefix(prefix: str) -> str:
    """The issuer before 令 without words of the sentence before it (根据国务院 -> 国务院)."""
    prefix = _LEAD.sub("", prefix) or prefix
    return prefix.removeprefix("中华人民共和国") or prefix


def _agency_code(prefix: str) -> str | None:
    """The 机关代字 at the end of ``prefix`` (the letters before a 文号's bracketed year), the words glued before it
    left out (建设三年行动方案的通知粤办函 -> 粤办函, 根据国发 -> 国发); None when no code of at most
    ``_MAX_CODE`` characters is left (…还出台了〔2020〕4号 cites no agency)."""
    prefix = prefix.removeprefix("中华人民共和国")
    cut = 0
    for m in _CODE_LEAD.finditer(prefix):
        if m.end() < len(prefix) or m.group() not in ("函",):
            cut = m.end()
    code = prefix[cut:]
    return code if 0 < len(code) <= _MAX_CODE else None


def normalize_doc_number(value: str | None) -> str | None:
    """The normal form of a 文号 (``国发〔2019〕5号``, ``国务院令第588号``), or None when ``value`` holds none.

    Any bracket pair around the year, an optional 第, leading zeros, spaces and full-width digits are accepted.
    """
    if not value:
        return None
    found = find_doc_numbers(value)
    return found[0][0] if found else None


def find_doc_numbers(text: str | None) -> list[tuple[str, int, int]]:
    """Every 文号 in ``text``: ``(normal form, start, end)`` with char offsets of ``text``, in text order.

    A text's own 文号 is usually the first one in its header or opening lines; later ones are cited documents.
    """
    if not text:
        return []
    t = _ascii_digits(text)  # same length: offsets stay those of ``text``
    out = []
    for m in _NUMBER.finditer(t):
        prefix = _agency_code(m.group("prefix"))
        if prefix is None:
            continue
        out.append((f"{prefix}〔{m.group('year')}〕{int(m.group('n'))}号", m.end("prefix") - len(prefix), m.end()))
    for m in _ORDER.finditer(t):
        prefix = _clean_prefix(m.group("prefix"))
        if not any(s <= m.start("n") < e for _, s, e in out):
            out.append((f"{prefix}令第{int(m.group('n'))}号", m.end("prefix") - len(prefix), m.end()))
    return sorted(out, key=lambda x: x[1])
