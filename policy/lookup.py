"""Lookups over policy records and texts: a document by any spelling of its 文号, an article (第十条) by its
number (SPEC §2 metadata; GB/T 9704-2012 §7.2.4 for 文号, 《立法技术规范（试行）》 for 条 numbering)."""
from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from typing import Iterable

from policy.docnumber import find_doc_numbers
from policy.textrules import cn_int

_NUM = r"零〇一二两三四五六七八九十百千\d"
_ARTICLE = re.compile(rf"第\s*([{_NUM}]+)\s*条(?:之[一二三四五六七八九十]+)?")
# what follows a 第…条 that cites it rather than starts it: 第十条第二款, 第十条规定的, 第十条的规定, 第十条、第十一条,
# 第十条和第十一条, 第十条至第十五条 (an article may open with 规定… or 与…: 第六条 规定本市…, 第九条 与食品有关的…)
_CITED_AFTER = re.compile(rf"\s*(?:第\s*[{_NUM}]+\s*[款项目]|(?:的|之)规定|规定[的，,。；;外之]|的|[、，,]"
                          rf"|(?:和|及|以及|与|或|或者|至|到)\s*第)")
# a heading of a part, chapter or section (第一编 总则, 第三章 数据安全制度, 第一节 一般规定) ending where the text
# goes on: its title a short phrase without sentence punctuation; matched against the last _HEADING_SPAN chars
# (第四节 合伙企业与第三人关系: a 第 not starting a 第…条/章/节 may be part of it)
_HEADING = re.compile(rf"第\s*[{_NUM}]+\s*(?:分编|编|章|节)\s*"
                      rf"(?P<title>(?:(?!第\s*[{_NUM}]+\s*(?:条|分编|编|章|节|款|项))[^。；;！？!?：:\n\r]){{0,40}}?)\s*$")
_HEADING_SPAN = 60
# words of a sentence citing a chapter (依照本法第二章…), never of a heading's title
_NOT_A_TITLE = re.compile(r"(?:依照|依据|按照|根据|参照)[本第《]|规定的|所列")
# an unnumbered heading, or none, between a sentence end or a closing bracket and an article (…建立工程档案。养护
# 管理第二十二条…, …（一）担保合同的效力第三十七条…, …（删去）第二百条…), not a
# sentence's opening words that cite one (。有第十条情形的…, 。除第十条外…, 。本法第十条所称…)
_GLUED_HEADING = re.compile(
    r"[。；;！？!?）)]\s*(?P<title>(?![有除依按违适参根见如同在由将自从与和或及以即本])"
    r"[^。；;！？!?，,：:“”《》()（）\d第\s]{0,20})\s*$")
# a bare heading of the general or closing provisions right before an article (总则第一条, 附则第五十条)
_BARE_HEADING = re.compile(r"(?:总则|附则|分则|通则)\s*$")
_BOUNDARY = "\n\r 　\t。；;：:！!？?”"


@dataclass(frozen=True)
class Article:
    """An article's span in a text: ``number`` (int), ``start``/``end`` char offsets (end exclusive) and the
    ``text`` (``text[start:end]``, from its 第…条 to the next article's, or to the 第…章/节 heading before that,
    trailing blanks left out)."""

    number: int
    start: int
    end: int
    text: str


def find_by_doc_number(records: Iterable, text: str) -> list:
    """The records whose ``doc_number`` is a 文号 named in ``text`` (any spelling: 国发[2019]5号, 国发（2019）
    第5号, full-width digits …), in the order the text names them. ``records``: :class:`PolicyRecord` or dicts."""
    wanted = [n for n, _, _ in find_doc_numbers(text)]
    index: dict[str, list] = {}
    for r in records:
        num = r.get("doc_number") if isinstance(r, dict) else r.doc_number
        if num:
            index.setdefault(num, []).append(r)
    return [r for n in dict.fromkeys(wanted) for r in index.get(n, [])]


def _heading_start(text: str, pos: int) -> int | None:
    """Where the chain of part/chapter/section headings ending at ``pos`` begins (``第二章数据安全与发展第一节一般
    规定`` before an article, the line breaks of the text lost), None when no heading ends at ``pos``."""
    first = None
    for _ in range(4):  # 编, 分编, 章, 节
        window = text[max(0, pos - _HEADING_SPAN):pos]
        m = _HEADING.search(window)
        if not m or not m.group("title").strip() or _NOT_A_TITLE.search(m.group("title")):
            break
        pos = pos - len(window) + m.start()
        first = pos
    return first


def _article_starts(text: str) -> list[tuple[int, int, int]]:
    """``(number, offset, lead)`` of each article heading, ``lead`` the offset of the headings right before it
    (its chapter's, section's; ``offset`` when none).

    A heading is a 第…条 at the text's start, after a line break, a sentence end or a space, or right after a
    第…编/章/节 heading or 总则/附则 (the cleaned texts have lost their line breaks: ``…第三章数据安全制度第二十一
    条…``). One followed by what cites it (第十条第二款, 第十条规定的, 第十条、第十一条) is a cross reference, as is one
    inside a sentence (依照本法第十条). Numbers must rise, and a number that skips past one still ahead in the
    text (a cross reference after a sentence end, 。第五十条…, in article 12 while 13 follows) is passed over.
    Weaker: a 第…条 glued to an unnumbered heading after a sentence end (…。养护管理第二十二条) or the 第一条 glued to
    the text's title (…7月7日数据出境安全评估办法第一条) is taken only as the next number, and only when no other
    第…条 of that number follows before the next one (a glued 第一条 only when a 第二条 follows).
    """
    cands: list[tuple[int, int, int, bool]] = []  # number, offset, lead, weak
    for m in _ARTICLE.finditer(text):
        n = cn_int(m.group(1))
        if n is None or _CITED_AFTER.match(text, m.end()):
            continue
        start = m.start()
        lead = _heading_start(text, start)
        if lead is None and (bare := _BARE_HEADING.search(text, max(0, start - 8), start)):
            lead = bare.start()
        before = text[start - 1] if start else ""
        if not before or before in _BOUNDARY or lead is not None:
            cands.append((n, start, start if lead is None else lead, False))
        elif n == 1:
            cands.append((n, start, start, True))
        elif (g := _GLUED_HEADING.search(text, max(0, start - 30), start)) and not _NOT_A_TITLE.search(g["title"]):
            cands.append((n, start, g.start("title"), True))
    last_at: dict[int, int] = {}  # number -> index of its last candidate
    for i, c in enumerate(cands):
        last_at[c[0]] = i
    numbers = sorted(last_at)
    out: list[tuple[int, int, int]] = []
    for i, (n, start, lead, weak) in enumerate(cands):
        prev = out[-1][0] if out else 0
        if n <= prev:
            continue
        if weak:
            if n != prev + 1:
                continue
            after = next((cands[j][0] for j in range(i + 1, len(cands)) if cands[j][0] in (n, n + 1)), None)
            if after == n or (n == 1 and after is None):  # a later one of the number; a 第一条 with no 第二条
                continue
        else:
            lo, hi = bisect_right(numbers, prev), bisect_left(numbers, n)
            if n != prev + 1 and any(last_at[v] > i for v in numbers[lo:hi]):
                continue
        out.append((n, start, lead))
    return out


def find_article(text: str, article: str | int) -> Article | None:
    """The span of article ``article`` (``"第十条"``, ``"十"``, ``10``) in a law or policy text, None when the
    text has no such article heading. The span runs to the next article heading, or to the chapter or section
    heading before it (or the text's end).

    Raises:
        ValueError: ``article`` is not an article number.
    """
    if isinstance(article, int):
        n = article
    else:
        m = _ARTICLE.search(article) or re.fullmatch(r"\s*([零〇一二两三四五六七八九十百千\d]+)\s*", article)
        n = cn_int(m.group(1)) if m else None
    if not n:
        raise ValueError(f"{article!r}: not an article number (like 第十条)")
    starts = _article_starts(text)
    for i, (num, start, _) in enumerate(starts):
        if num == n:
            end = starts[i + 1][2] if i + 1 < len(starts) else len(text)
            body = text[start:end].rstrip()
            return Article(n, start, start + len(body), body)
    return None


def parse_reference(query: str) -> dict:
    """The parts of a reference like ``《X》第十条`` or ``国发〔2019〕5号第三条``: ``{"title", "doc_number",
    "article"}`` (each None when absent; ``article`` an int)."""
    title = re.search(r"《([^《》]+)》", query or "")
    nums = find_doc_numbers(query or "")
    art = _ARTICLE.search(query or "")
    return {"title": title.group(1) if title else None, "doc_number": nums[0][0] if nums else None,
            "article": cn_int(art.group(1)) if art else None}
