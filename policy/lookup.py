"""Lookups over policy records and texts: a document by any spelling of its 文号, an article (第十条) by its
number (SPEC §2 metadata; GB/T 9704-2012 §7.2.4 for 文号, 《立法技术规范（试行）》 for 条 numbering)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from policy.docnumber import find_doc_numbers
from policy.textrules import cn_int

_ARTICLE = re.compile(r"第\s*([零〇一二两三四五六七八九十百千\d]+)\s*条(?:之[一二三四五六七八九十]+)?")


@dataclass(frozen=True)
class Article:
    """An article's span in a text: ``number`` (int), ``start``/``end`` char offsets (end exclusive) and the
    ``text`` (``text[start:end]``, from its 第…条 to the next article's, trailing blanks left out)."""

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


def _article_starts(text: str) -> list[tuple[int, int]]:
    """``(number, offset)`` of each article heading: a 第…条 at the text's start or after a line break, a
    sentence end or a space (a cross-reference 依照本法第十条 inside a sentence is no heading); numbers must
    rise."""
    out: list[tuple[int, int]] = []
    for m in _ARTICLE.finditer(text):
        before = text[max(0, m.start() - 1):m.start()]
        n = cn_int(m.group(1))
        if n is None or (before and before not in "\n\r 　\t。；;：:”"):
            continue
        if not out or n > out[-1][0]:
            out.append((n, m.start()))
    return out


def find_article(text: str, article: str | int) -> Article | None:
    """The span of article ``article`` (``"第十条"``, ``"十"``, ``10``) in a law or policy text, None when the
    text has no such article heading. The span runs to the next article heading (or the text's end).

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
    for i, (num, start) in enumerate(starts):
        if num == n:
            end = starts[i + 1][1] if i + 1 < len(starts) else len(text)
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
