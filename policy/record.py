"""The policy record of one document (SPEC §2 metadata): jurisdiction (行政区划), level, issuer, 文号, dates,
validity (有效性) and links to other documents, each field with the evidence it came from.

Evidence, strongest first, for the jurisdiction: an import column (``column:region``), the page's header table
(``header:发文机关``), an issuer the title opens with (``title:issuer``), the registry's owner of the source
(``registry:owner``), a place the title names (``title``), a place the text names after 本省/本市
(``text:本省→浙江省``). A central issuer (国务院, 全国人民代表大会, a ministry …) makes the record national
(``000000``, 全国). The title's own issuer outranks the registry owner: a site reposts documents of other bodies
(the 个人信息保护法 on a provincial site), the title names who issued it.
"""
from __future__ import annotations

import re
import unicodedata
from dataclasses import asdict, dataclass, field
from datetime import date

from corpus.divisions import NATIONAL, contains, find_places, load_divisions
from policy.docnumber import find_doc_numbers, normalize_doc_number
from policy import textrules as T

DOC_LEVELS = ("法律", "行政法规", "部门规章", "地方性法规", "地方政府规章", "规范性文件", "政策解读", "新闻", "其他")
VALIDITY = ("有效", "失效", "废止", "已修订", "未知")
LINK_TYPES = ("repeals", "implements", "cites")
# import column mapping field -> document column it fills (crawler.records_import.ColumnMapping)
COLUMN_FIELDS = {"region_column": "region", "level_column": "level", "issuer_column": "issuer",
                 "doc_number_column": "doc_number", "published_column": "pubtime", "pubtime_column": "pubtime",
                 "effective_column": "effective_date", "validity_column": "validity"}
# 信息公开 header labels (crawler.html_header.HEADER_FIELDS) -> record input
HEADER_LABELS = {"发文机关": "issuer", "发布机构": "issuer", "发布机关": "issuer", "发文单位": "issuer",
                 "发文字号": "doc_number", "文号": "doc_number", "成文日期": "written_date", "发布日期": "pubtime",
                 "发布时间": "pubtime", "有效性": "validity", "时效性": "validity", "效力状态": "validity",
                 "实施日期": "effective_date", "生效日期": "effective_date", "施行日期": "effective_date"}
_CENTRAL = re.compile(r"国务院|全国人民代表大会|全国人大|中共中央|党中央|中央(?!广播)[\u4e00-\u9fff]{0,8}(?:委|办|部)|"
                      r"最高人民法院|最高人民检察院|中国人民银行|^国家[\u4e00-\u9fff]{1,12}(?:局|委|委员会|署|办公室|部)|"
                      r"总局|总署|证监会|银保监会|金融监管总局|^[\u4e00-\u9fff]{0,12}部(?:等|$|\s)|^[一二三四五六七八九十]+部门")
_LOCAL_BODY = re.compile(r"^(?:省|市|县|区|自治区|自治州)")
_BEN = re.compile(r"本(省|市|自治区)")
_NATIONAL_FORM = re.compile(r"(?<!办)法$|条例$|法典$")
_BEN_LEVELS = {"本省": ("province",), "本自治区": ("province",), "本市": ("city", "province")}
_VALIDITY_WORDS = (("废止", "废止"), ("已修订", "已修订"), ("修订", "已修订"), ("修正", "已修订"), ("修改", "已修订"),
                   ("失效", "失效"), ("过期", "失效"), ("有效", "有效"), ("现行", "有效"), ("尚未生效", "有效"))
_LEVEL_WORDS = {"宪法": "法律", "法律": "法律", "行政法规": "行政法规", "部门规章": "部门规章", "地方性法规": "地方性法规",
                "自治条例": "地方性法规", "单行条例": "地方性法规", "地方政府规章": "地方政府规章", "规范性文件": "规范性文件",
                "政策解读": "政策解读", "解读": "政策解读", "新闻": "新闻"}
_WRITTEN = re.compile(rf"[（(]\s*{T.DATE}\s*[）)]")


@dataclass
class PolicyRecord:
    """One document's policy record. Dates are ``datetime.date`` or None; ``jurisdiction_level`` is national /
    province / city / county; ``level`` one of :data:`DOC_LEVELS`; ``validity`` one of :data:`VALIDITY`;
    ``links``: ``{"type", "title", "doc_id"}`` dicts (doc_id None when the title is not in the corpus);
    ``evidence``: field -> where its value came from (``column:region``, ``header:发文机关``, ``title``, …)."""

    doc_id: str
    jurisdiction_code: str | None = None
    jurisdiction_name: str | None = None
    jurisdiction_level: str | None = None
    level: str = "其他"
    issuer: str | None = None
    doc_number: str | None = None
    written_date: date | None = None
    published_date: date | None = None
    effective_date: date | None = None
    expiry_date: date | None = None
    validity: str = "未知"
    links: list = field(default_factory=list)
    evidence: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """A plain dict of the fields (dates stay dates)."""
        return asdict(self)


def _blank(v) -> bool:
    return v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and not v.strip())


def _as_date(v) -> date | None:
    """A date from a date, a timestamp or a string like ``2021-06-10`` / ``2021年6月10日`` (None otherwise)."""
    if _blank(v):
        return None
    if isinstance(v, date):
        return v if type(v) is date else v.date() if hasattr(v, "date") else v
    if hasattr(v, "date") and callable(v.date):
        return v.date()
    m = re.search(r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})", str(v))
    return T.to_date(*m.groups()) if m else None


def normalize_validity(value) -> str | None:
    """A validity word or flag as one of :data:`VALIDITY`: 现行有效 -> 有效, 已废止 -> 废止, 已被修订 -> 已修订,
    ``True`` (an ``expired`` flag) -> 失效, ``False`` -> 有效; None for anything else."""
    if isinstance(value, bool):
        return "失效" if value else "有效"
    if _blank(value):
        return None
    v = str(value).strip()
    if v.lower() in ("true", "false", "1", "0"):
        return "失效" if v.lower() in ("true", "1") else "有效"
    return next((out for word, out in _VALIDITY_WORDS if word in v), None)


def normalize_level(value) -> str | None:
    """A level column's value as one of :data:`DOC_LEVELS` (宪法 -> 法律, 司法解释 -> 其他), None when blank."""
    if _blank(value):
        return None
    v = str(value).strip()
    return v if v in DOC_LEVELS else _LEVEL_WORDS.get(v, "其他")


def is_central(issuer: str | None) -> bool:
    """Whether an issuer is a central body (国务院, 全国人民代表大会, 中共中央, a ministry, 国家…局 …) and names no
    province or city."""
    if _blank(issuer):
        return False
    first = issuer.split()[0]
    if _LOCAL_BODY.match(first) or any(load_divisions()[p.code].level != "national" for p in find_places(issuer)):
        return False
    return bool(_CENTRAL.search(first))


def _place_of(text: str | None) -> str | None:
    """The jurisdiction a short string (a region value, an issuer, a title) names: central -> 全国, else its
    first place."""
    if _blank(text):
        return None
    if is_central(text):
        return NATIONAL
    places = find_places(text)
    return places[0].code if places else None


def _inputs(doc: dict, header: dict | None, columns: dict | None) -> tuple[dict, dict]:
    """Record inputs (``issuer``, ``doc_number``, ``pubtime``, ``written_date``, ``effective_date``, ``validity``,
    ``region``, ``level``) and their evidence: mapped import columns first, then header labels, then the
    document's own fields (crawled header fields)."""
    vals, ev = {}, {}
    for mapping_key, target in (columns or {}).items():
        name = COLUMN_FIELDS.get(mapping_key)
        if name and target and not _blank(doc.get(name)):
            vals.setdefault(name, doc[name])
            ev.setdefault(name, f"column:{target}")
    for label, value in (header or {}).items():
        name = HEADER_LABELS.get(str(label).strip().rstrip("：:"), label if label in HEADER_LABELS.values() else None)
        if name and not _blank(value) and name not in vals:
            vals[name], ev[name] = value, f"header:{label}"
    for name, source in (("issuer", "issuer"), ("doc_number", "doc_number"), ("pubtime", "pubtime"),
                         ("written_date", "written_date"), ("effective_date", "effective_date"),
                         ("validity", "validity"), ("region", "region"), ("level", "level")):
        if name not in vals and not _blank(doc.get(source)):
            vals[name], ev[name] = doc[source], f"column:{source}"
    return vals, ev


def _jurisdiction(vals: dict, ev: dict, title: str, text: str, owner: str | None, issuer: str | None,
                  issuer_ev: str | None, number: str | None = None) -> tuple[str | None, str | None]:
    """The jurisdiction code and its evidence, in the order of the module docstring."""
    candidates = [(vals.get("region"), ev.get("region"))]
    if issuer_ev and not issuer_ev.startswith("title"):
        candidates.append((issuer, issuer_ev))
    elif issuer_ev:
        candidates.append((issuer, "title:issuer"))
    for value, where in candidates:
        code = _place_of(value)
        if code:
            return _narrowed(code, where, title) if where.startswith("column:") else (code, where)
    if re.match(r"^\s*中华人民共和国", title or ""):  # a national law's title outranks the site that reposts it
        return NATIONAL, "title"
    if (code := _place_of(owner)):
        return code, "registry:owner"
    if "令第" in (number or "") and is_central(number.split("令第")[0]):
        return NATIONAL, "doc_number"
    places = [p for p in find_places(title)]
    if places:
        return places[0].code, "title"
    m = _BEN.search(text[:2000])
    if m:  # 本省 / 本市: the first place of that level the text names (never a county: 沿海城市 holds 海城市)
        divs = load_divisions()
        places = [p for p in find_places(text[:m.start() + 2000])
                  if divs[p.code].level in _BEN_LEVELS[m.group(0)] and p.surface == divs[p.code].name]
        if places:
            return places[0].code, f"text:{m.group(0)}→{places[0].surface}"
    if _NATIONAL_FORM.search(T.strip_version(title)) and not m:  # 法 and 条例 naming no place: 全国人大's or
        return NATIONAL, "title:法/条例"                           # 国务院's (a local 条例 names its place)
    return None, None


def _narrowed(code: str, where: str, title: str) -> tuple[str, str]:
    """A jurisdiction from an import column narrowed to the place the title names inside it (region 山东 +
    青岛市…条例 -> 青岛市, evidence ``column:region+title``: collections give the province only); else unchanged.
    An issuer's place is never narrowed (浙江省人民政府关于同意杭州市…的批复 is the province's)."""
    if code == NATIONAL:
        return code, where
    inside = [p.code for p in find_places(title) if p.code != code and contains(code, p.code)]
    return (inside[0], f"{where}+title") if inside else (code, where)


def _level(vals: dict, ev: dict, title: str, issuer: str | None, code: str | None, has_order: bool) -> tuple[str, str]:
    """The document's level and its evidence (a level column, else the title's kind with the issuer's kind)."""
    if (v := normalize_level(vals.get("level"))) is not None:
        return v, ev["level"]
    kind = T.title_kind(title)
    local = code is not None and code != NATIONAL
    iss = issuer or ""
    simple = {"interpretation": "政策解读", "news": "新闻", "report": "其他", "normative": "规范性文件",
              "other": "其他"}
    if kind == "law":
        return ("法律", "title:法") if not local else ("地方性法规", "title:法+local")
    if kind != "rule":
        return simple[kind], f"title:{kind}"
    core = T.strip_version(title)
    if local:
        if core.endswith("条例") or "人民代表大会" in iss or "人大" in iss:
            return "地方性法规", "title:条例+local"
        if has_order or re.search(r"人民政府$", iss.split()[0] if iss else ""):
            return "地方政府规章", "title:rule+人民政府"
        return "规范性文件", "title:rule+department"
    if core.endswith("条例") and (not iss or "国务院" in iss):
        return "行政法规", "title:条例+central"
    return "部门规章", "title:rule+central"


def _dates(vals: dict, ev: dict, text: str, out: PolicyRecord) -> None:
    """written, published, effective and expiry dates of ``out`` with their evidence."""
    out.published_date = _as_date(vals.get("pubtime"))
    if out.published_date:
        out.evidence["published_date"] = ev["pubtime"]
    out.written_date = _as_date(vals.get("written_date"))
    if out.written_date:
        out.evidence["written_date"] = ev["written_date"]
    elif (m := _WRITTEN.search(text[:300])):
        out.written_date, out.evidence["written_date"] = T.to_date(*m.groups()), "text:（成文日期）"
    out.effective_date = _as_date(vals.get("effective_date"))
    if out.effective_date:
        out.evidence["effective_date"] = ev["effective_date"]
    else:
        rule, words = T.effective_rule(text)
        if isinstance(rule, date):
            out.effective_date, out.evidence["effective_date"] = rule, f"text:{words}"
        elif rule is not None:
            base = out.published_date if rule in ("公布", "发布", "颁布") else out.written_date or out.published_date
            if base:
                out.effective_date, out.evidence["effective_date"] = base, f"text:{words}"
    if out.level in ("新闻", "政策解读", "其他"):  # a report's 有效期 is about something else
        return
    span, words = T.expiry_rule(text)
    start = out.effective_date or out.published_date or out.written_date
    if isinstance(span, date):
        out.expiry_date, out.evidence["expiry_date"] = span, f"text:{words}"
    elif span and start:
        out.expiry_date, out.evidence["expiry_date"] = T.add_years(start, span), f"text:{words}"


def _doc_number(vals: dict, ev: dict, title: str, text: str) -> tuple[str | None, str | None]:
    if (n := normalize_doc_number(vals.get("doc_number"))):
        return n, ev["doc_number"]
    for where, s in (("title", title), ("text", text[:200])):
        found = find_doc_numbers(s)
        if found:
            return found[0][0], where
    return None, None


def _issuer(vals: dict, ev: dict, title: str) -> tuple[str | None, str | None]:
    if not _blank(vals.get("issuer")):
        return " ".join(str(vals["issuer"]).split()), ev["issuer"]
    t = T.title_issuer(title)
    return (t, "title") if t else (None, None)


def extract_record(doc: dict, source_owner: str | None = None, header: dict | None = None,
                   columns: dict | None = None, as_of: date | None = None) -> PolicyRecord:
    """The policy record of one document.

    Args:
        doc: a ``documents_clean`` row as a dict: ``doc_id``, ``title``, ``text`` and, when known, ``pubtime``,
            ``issuer``, ``doc_number``, ``written_date`` and the metadata columns ``region``, ``level``,
            ``effective_date``, ``validity``.
        source_owner: the registry's owner (name) of the document's source, None when unknown.
        header: the page's 信息公开 header as ``{label: value}`` (发文机关, 发文字号, 成文日期, 发布日期, 有效性 …),
            or a :class:`crawler.html_header.Header` (its label hits are read).
        columns: the import's column mapping (``{"region_column": "region", …}``): a mapped column's value
            is evidence ``column:<its name>`` and outranks every other source of that field.
        as_of: the day an expiry is compared with (default today): a stated 有效期 that ended before it
            makes the record 失效.

    Returns:
        :class:`PolicyRecord`; links are unresolved (``doc_id`` None): :func:`policy.links.resolve_links`
        resolves them over a corpus and marks repealed records 废止.
    """
    title = " ".join(str(doc.get("title") or "").split())
    text = str(doc.get("text") or "")
    if hasattr(header, "hits"):  # a crawler.html_header.Header: its labels and values, in page order
        header = {h.key: h.value for h in reversed(header.hits) if h.value}
    vals, ev = _inputs(doc, header, columns)
    out = PolicyRecord(doc_id=str(doc.get("doc_id")))
    out.issuer, issuer_ev = _issuer(vals, ev, title)
    if out.issuer:
        out.evidence["issuer"] = issuer_ev
    out.doc_number, where = _doc_number(vals, ev, title, text)
    if out.doc_number:
        out.evidence["doc_number"] = where
    code, where = _jurisdiction(vals, ev, title, text, source_owner, out.issuer, issuer_ev, out.doc_number)
    if code:
        d = load_divisions()[code]
        out.jurisdiction_code, out.jurisdiction_name, out.jurisdiction_level = d.code, d.name, d.level
        out.evidence["jurisdiction"] = where
    out.level, out.evidence["level"] = _level(vals, ev, title, out.issuer, code, "令" in (out.doc_number or ""))
    _dates(vals, ev, text, out)  # after the level: only rules and normative documents state their own 有效期
    _validity(vals, ev, out, as_of or date.today())
    out.links = [{"type": k, "title": t, "doc_id": None} for k, t, _ in T.link_mentions(text)]
    return out


def _validity(vals: dict, ev: dict, out: PolicyRecord, as_of: date) -> None:
    if (v := normalize_validity(vals.get("validity"))) is not None:
        out.validity, out.evidence["validity"] = v, ev["validity"]
    elif out.expiry_date is not None:
        out.validity = "失效" if out.expiry_date < as_of else "有效"
        out.evidence["validity"] = f"expiry:{out.expiry_date.isoformat()}"


_REVISION_NOTE = re.compile(r"（[^（）]*\d{4}[^（）]*(?:修订|修正|修改)[^（）]*）$")


def title_key(title: str | None) -> str:
    """A title normalised for matching: NFKC, no spaces, quotes or 《》, without a leading 中华人民共和国 and a
    closing revision note (（2019年修订）); （试行） and （暂行） stay: the trial version is another document."""
    t = unicodedata.normalize("NFKC", str(title or ""))
    t = re.sub(r"[\s《》“”\"'‘’]", "", t).replace("(", "（").replace(")", "）")
    t = t.removeprefix("中华人民共和国")
    while (s := _REVISION_NOTE.sub("", t)) != t:
        t = s
    return t
