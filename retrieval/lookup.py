"""Policy lookups over one index version (SPEC §2 metadata: 发文字号 and titles; SPEC §7: served from the
version's own parts): a 文号 finds its document, ``《X》第十条`` or ``国发〔2019〕5号第三条`` that article's text.

A query is parsed by :func:`policy.lookup.parse_reference` (a 文号 in any spelling, a ``《title》``, a 第…条);
without 文号 or 《》 the query less its 第…条 is read as a title. Documents are found

1. by 文号: the version's policy records (its ``policy_records`` part, :func:`policy.lookup.find_by_doc_number`);
2. by title, the first tier that matches: the title itself (``match: "title"``, compared after
   :func:`title_norm`: NFKC, blanks, quotes and 《》 dropped, every bracket pair as （）, a leading 中华人民共和国
   and a closing revision note dropped); the title without its leading places (``"name"``: 《公共数据条例》
   finds 浙江省公共数据条例 and 江苏省公共数据条例; the narrowest place the query names must be the
   document's); a notice
   that issues the title (``"issued"``: 关于印发《X》的通知).

Every document found is returned (same-named regulations of two provinces: both, each with its jurisdiction);
when an article is named, each document's article (:func:`policy.lookup.find_article`) over the version's
``texts`` part (a version without one: its text reassembled from its chunks, :func:`chunk_texts`).

Results are JSON-ready dicts (:meth:`Catalog.lookup`); an unknown 文号, title or article is a result with
``found: false`` and its ``reason``; a query that cannot be looked up (empty, too long, control characters, no
document named) raises :class:`LookupInputError` before anything loads. Never imports prefect.
"""
from __future__ import annotations

import re
import threading
import unicodedata
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import pandas as pd

from policy.lookup import find_article, find_by_doc_number, parse_reference
from policy.record import title_key
from retrieval.bundle import PartsView
from retrieval.policy_records import POLICY_PART, POLICY_RECORDS, hit_fields

MAX_QUERY_CHARS = 300  # a reference is a title and an article; a longer query is refused
MAX_DOCUMENTS = 20  # documents returned at most (``total`` says how many matched)
MAX_ARTICLE_CHARS = 20_000  # an article's text is cut there (``truncated``)
_BRACKETS = str.maketrans({"[": "（", "〔": "（", "【": "（", "［": "（", "]": "）", "〕": "）", "】": "）", "］": "）"})
_ARTICLE_REF = re.compile(r"第\s*[零〇一二两三四五六七八九十百千\d]+\s*条(?:之[一二三四五六七八九十]+)?")
_ISSUED = re.compile(r"(?:印发|发布|公布|颁布|转发|施行)[^《》]{0,20}《([^《》]+)》")
_DIGITS = "零一二三四五六七八九"


class LookupInputError(ValueError):
    """A query that cannot be looked up as given (the message says why): empty, over
    :data:`MAX_QUERY_CHARS` chars, holding control characters, naming no document, or a 第0条."""


def check_query(query, max_chars: int = MAX_QUERY_CHARS) -> str:
    """``query`` stripped, after checking it.

    Raises:
        LookupInputError: not a non-empty string, over ``max_chars`` chars, or holding control, format or
            surrogate characters (line breaks and tabs included: a reference is one line).
    """
    if not isinstance(query, str) or not query.strip():
        raise LookupInputError("empty query: give a 文号 (国发〔2019〕5号) or a title (《…》), optionally with 第…条")
    if len(query) > max_chars:
        raise LookupInputError(f"query is {len(query)} chars, over the limit of {max_chars}")
    query = query.strip()
    if any(unicodedata.category(c) in ("Cc", "Cf", "Cs") for c in query):
        raise LookupInputError("query holds control characters")
    return query


def parse_query(query, max_chars: int = MAX_QUERY_CHARS) -> dict:
    """``{"query", "title", "doc_number", "article"}`` of a checked query (:func:`check_query`): the
    :func:`policy.lookup.parse_reference` parts; with neither 文号 nor 《》 the query less its 第…条 is the title.

    Raises:
        LookupInputError: a bad query (:func:`check_query`), one naming no document (only 第三条), or 第0条.
    """
    query = check_query(query, max_chars)
    ref = parse_reference(query)
    if not ref["title"] and not ref["doc_number"]:
        bare = _ARTICLE_REF.sub(" ", query).strip(" 　,，:：、的")
        ref["title"] = bare or None
    if ref["title"] is not None and not title_norm(ref["title"]):
        ref["title"] = None
    if not ref["title"] and not ref["doc_number"]:
        raise LookupInputError("the query names no document: give a 文号 (国发〔2019〕5号) or a title (《…》)")
    if ref["article"] is not None and ref["article"] < 1:
        raise LookupInputError("an article number starts at 第一条")
    return {"query": query, **ref}


def title_norm(title) -> str:
    """A title as titles are compared: :func:`policy.record.title_key` (NFKC, no blanks, quotes or 《》, no leading
    中华人民共和国 or closing revision note) with every bracket (〔〕【】［］[]) as （）."""
    return title_key(title).translate(_BRACKETS)


def article_label(n: int) -> str:
    """``第十条`` for 10 (Chinese numerals up to 9999, Arabic digits above)."""
    if n >= 10_000:
        return f"第{n}条"
    out, zero = "", False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d, n = divmod(n, value)
        if d:
            out += ("零" if zero and out else "") + ("" if (unit == "十" and d == 1 and not out) else _DIGITS[d]) + unit
            zero = False
        elif out:
            zero = True
    return f"第{out}条"


def chunk_texts(chunks: pd.DataFrame) -> dict[str, str]:
    """``{doc_id: text}`` reassembled from a version's chunks (``doc_id, start, end, text``), for a version
    published without a ``texts`` part: each chunk's text written at its offset, overlaps once. A chunk's text is
    its span stripped of blanks, so it is placed at the first shift within its span that agrees with the text
    already written; gaps (the blanks stripped) become spaces. Offsets may differ from the original text's by
    the blanks stripped where two chunks do not overlap."""
    out: dict[str, str] = {}
    for doc, group in chunks.sort_values(["doc_id", "start"]).groupby("doc_id", sort=False):
        cur = ""
        for start, end, text in zip(group["start"], group["end"], group["text"]):
            start, text = int(start), str(text)
            slack = max(0, int(end) - start - len(text))
            pos = next((start + k for k in range(slack + 1)
                        if cur[start + k:start + k + len(text)] == text[:max(0, len(cur) - start - k)]), start)
            if pos > len(cur):
                cur += " " * (pos - len(cur))
            cur += text[len(cur) - pos:]
        out[str(doc)] = cur
    return out


def _plain(v):
    """A frame value as JSON: NaN / None as None, numpy scalars as Python ones."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    return v.item() if hasattr(v, "item") else v


def _leading_places(norm: str) -> tuple[tuple[str, ...], str]:
    """``(codes, rest)``: the division codes of the places leading ``norm`` and the title after them."""
    from corpus.divisions import find_places

    codes, end = [], 0
    for p in find_places(norm):
        if p.start != end:
            break
        codes.append(p.code)
        end = p.end
    return tuple(codes), norm[end:]


@dataclass
class VersionParts(PartsView):
    """One index version seen only through its manifest and serving parts, without its encoder or search
    (what a lookup reads): ``index_root``, ``version``, ``manifest``; parts as on
    :class:`retrieval.bundle.ServingBundle` (:class:`retrieval.bundle.PartsView`)."""

    index_root: Path
    version: str
    manifest: dict
    _parts: dict = field(default_factory=dict, repr=False)

    @cached_property
    def chunks(self) -> pd.DataFrame:
        """The version's ``chunks.parquet``."""
        return pd.read_parquet(self.folder / "chunks.parquet")


def open_version(index_root, version: str | None = None) -> VersionParts:
    """The :class:`VersionParts` of ``version`` (default: the one ``index/CURRENT`` names, read once).

    Raises:
        retrieval.bundle.IndexMissingError: no index published, or ``version`` is not on disk.
        retrieval.versions.IndexLoadError: its manifest is corrupt.
    """
    from retrieval.bundle import resolve_version
    from retrieval.versions import read_manifest

    root = Path(index_root)
    version, _ = resolve_version(root, version)
    return VersionParts(root, version, read_manifest(root, version))


class Catalog:
    """The documents of one loaded version as lookups see them: ``bundle`` is a
    :class:`retrieval.bundle.ServingBundle` or a :class:`VersionParts` (anything with ``version``, ``has_part``,
    ``load`` and ``texts``, or without a ``texts`` part ``chunks`` / ``retriever.chunks``).

    Raises (at construction):
        PartError: the texts or policy records part changed since publication.
    """

    def __init__(self, bundle):
        from retrieval.parts import TEXTS

        self.version = str(bundle.version)
        if bundle.has_part(TEXTS):
            frame, self.text_source = bundle.texts, "texts"
            texts = dict(zip(frame["doc_id"].astype(str), frame["text"].astype(str)))
        else:
            frame = getattr(bundle, "chunks", None)
            frame = bundle.retriever.chunks if frame is None else frame
            texts, self.text_source = chunk_texts(frame), "chunks"
            frame = frame.drop_duplicates("doc_id")
        self.text = texts
        cols = [c for c in ("title", "url", "external_id") if c in frame.columns]
        self.meta = {str(d): {c: _plain(v) for c, v in zip(cols, vals)}
                     for d, *vals in zip(frame["doc_id"], *(frame[c] for c in cols))}
        self.records = bundle.load(POLICY_PART) if bundle.has_part(POLICY_RECORDS) else None
        self.by_title: dict[str, list[str]] = {}
        for doc, m in self.meta.items():
            if isinstance(m.get("title"), str) and (key := title_norm(m["title"])):
                self.by_title.setdefault(key, []).append(doc)

    @cached_property
    def by_name(self) -> dict[str, list[tuple[tuple[str, ...], str]]]:
        """name (title without its leading places) -> ``[(place codes, doc_id)]``."""
        out: dict[str, list] = {}
        for key, docs in self.by_title.items():
            codes, name = _leading_places(key)
            if codes and name:
                out.setdefault(name, []).extend((codes, d) for d in docs)
        return out

    @cached_property
    def by_issued(self) -> dict[str, list[str]]:
        """The title a notice issues (关于印发《X》的通知 -> X, :func:`title_norm`) -> doc ids."""
        out: dict[str, list] = {}
        for doc, m in self.meta.items():
            for t in _ISSUED.findall(m.get("title") or ""):
                if key := title_norm(t):
                    out.setdefault(key, []).append(doc)
        return out

    def find_title(self, title: str) -> tuple[str, list[str]]:
        """``(match, doc ids)`` of the first tier that finds ``title`` (``title``, ``name``, ``issued``; see the
        module's docstring); ``("title", [])`` when none does."""
        key = title_norm(title)
        if self.by_title.get(key):
            return "title", sorted(self.by_title[key])
        codes, name = _leading_places(key)
        named = [d for c, d in self.by_name.get(name, []) if not codes or c[-1] == codes[-1]]
        if name and named:
            return "name", sorted(set(named))
        if self.by_issued.get(key):
            return "issued", sorted(set(self.by_issued[key]))
        return "title", []

    def find_number(self, number: str) -> list[str]:
        """Doc ids of the version's documents whose 文号 is ``number`` (any spelling)."""
        recs = find_by_doc_number((self.records or {}).values(), number)
        return sorted({str(r["doc_id"]) for r in recs if str(r["doc_id"]) in self.text})

    def document(self, doc: str, match: str, article: int | None) -> dict:
        """One document found: ``doc_id, external_id, title, url, match``, its policy fields
        (:func:`retrieval.policy_records.hit_fields`) and, when ``article`` is asked, ``article``: ``{number,
        label, start, end, text, truncated}`` (char offsets into the document's text) or None."""
        m = self.meta.get(doc, {})
        out = {"doc_id": doc, "external_id": m.get("external_id"), "title": m.get("title"), "url": m.get("url"),
               "match": match, **hit_fields((self.records or {}).get(doc))}
        if article is not None:
            a = find_article(self.text.get(doc, ""), article)
            out["article"] = None if a is None else {
                "number": a.number, "label": article_label(a.number), "start": a.start, "end": a.end,
                "text": a.text[:MAX_ARTICLE_CHARS], "truncated": len(a.text) > MAX_ARTICLE_CHARS}
        return out

    def lookup(self, query) -> dict:
        """The documents (and article) ``query`` names, as JSON: ``{query, reference: {title, doc_number,
        article}, version, found, reason, total, documents: [...]}`` (:meth:`document` each, at most
        :data:`MAX_DOCUMENTS`). ``found``: some document matched and, when an article is asked, holds it;
        otherwise ``reason`` says what was not found (the documents found are still listed).

        Raises:
            LookupInputError: a query that cannot be looked up (:func:`parse_query`).
        """
        ref = parse_query(query)
        docs, match, reasons = [], "doc_number", []
        if ref["doc_number"]:
            docs = self.find_number(ref["doc_number"])
            if not docs:
                why = "" if self.records is not None else f" (index {self.version} has no {POLICY_RECORDS} part)"
                reasons.append(f"no document with 文号 {ref['doc_number']} in index {self.version}{why}")
        if not docs and ref["title"]:
            match, docs = self.find_title(ref["title"])
            if not docs:
                reasons.append(f"no document titled 《{ref['title']}》 in index {self.version}")
        rows = [self.document(d, match, ref["article"]) for d in docs[:MAX_DOCUMENTS]]
        if docs and ref["article"] is not None and not any(r["article"] for r in rows):
            reasons = [f"{article_label(ref['article'])} not found in " + "、".join(
                f"《{r['title'] or r['doc_id']}》" for r in rows[:5])]
        found = bool(docs) and (ref["article"] is None or any(r["article"] for r in rows))
        return {"query": ref["query"], "reference": {k: ref[k] for k in ("title", "doc_number", "article")},
                "version": self.version, "found": found, "reason": None if found else "; ".join(reasons),
                "total": len(docs), "documents": rows}


def lookup(bundle, query) -> dict:
    """:meth:`Catalog.lookup` of ``query`` over ``bundle`` (a :class:`retrieval.bundle.ServingBundle` or a
    :class:`VersionParts`), the query checked first.

    Raises:
        LookupInputError: a query that cannot be looked up. PartError: a part changed since publication.
    """
    parse_query(query)
    return Catalog(bundle).lookup(query)


class Lookups:
    """Lookups over a data dir's serving version for a long-running process: the :class:`Catalog` of each
    version loaded once per version identity (:func:`retrieval.bundle.resolve_version`: ``index/CURRENT`` read
    once per lookup, a rollback or refresh served at once), the ``keep`` latest kept; thread-safe."""

    def __init__(self, index_root, keep: int = 2):
        self.root, self.keep = Path(index_root), keep
        self._catalogs: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def catalog(self, version: str | None = None) -> Catalog:
        """The :class:`Catalog` of ``version`` (default: the serving one).

        Raises:
            retrieval.bundle.IndexMissingError: no index published. PartError: a part changed since publication.
        """
        from retrieval.bundle import resolve_version

        version, key = resolve_version(self.root, version)
        with self._lock:
            if key not in self._catalogs:
                self._catalogs[key] = Catalog(open_version(self.root, version))
                while len(self._catalogs) > self.keep:
                    self._catalogs.popitem(last=False)
            return self._catalogs[key]

    def lookup(self, query, version: str | None = None) -> dict:
        """:meth:`Catalog.lookup` over the serving version; the query is checked before anything loads.

        Raises:
            LookupInputError: a query that cannot be looked up. IndexMissingError, PartError: as :meth:`catalog`.
        """
        parse_query(query)
        return self.catalog(version).lookup(query)
