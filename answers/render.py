"""Answers as records and their renderings, in one place (SPEC §9): the typed :class:`Answer` a reader returns,
its JSON (what ``/api/answer``, ``flows.ask --json`` and the Python API give: the keys they always gave, plus
``version`` and, when a version holds document metadata, ``policy``), its text (``flows.ask``) and its HTML
pieces (the answer page, :mod:`answers.web`: the source line with its document's policy fields, the facet
counts of the sources shown).
"""
from __future__ import annotations

import html
from dataclasses import dataclass, fields

from corpus.divisions import NATIONAL

JSON_KEYS = ("text", "score", "raw_score", "doc_score", "doc_id", "external_id", "title", "url", "source", "pubtime",
             "start", "end", "passage", "passage_start", "passage_end", "kind", "doc_rank", "version")


@dataclass(frozen=True)
class Answer:
    """One answer: the span ``text`` = ``document[start:end]`` (char offsets into the version's cleaned text of
    ``doc_id``), ``score`` (calibrated, 0..1: P(the span overlaps the answer)), its document's ``title``,
    ``url``, ``source``, ``passage`` (the text around the span: ``document[passage_start:passage_end]``), the
    index ``version`` it came from; the reader's ``raw_score`` and ``doc_score``, the span's ``kind``, the
    document's rank ``doc_rank`` (1-based) and ids; ``policy``: document metadata (issuer, level, validity...)
    when the version holds it, else None."""

    text: str
    score: float
    start: int
    end: int
    doc_id: str
    title: str | None = None
    url: str | None = None
    source: str | None = None
    passage: str = ""
    version: str | None = None
    raw_score: float | None = None
    doc_score: float | None = None
    external_id: str | None = None
    pubtime: str | None = None
    passage_start: int = 0
    passage_end: int = 0
    kind: str | None = None
    doc_rank: int = 0
    policy: dict | None = None

    def to_json(self) -> dict:
        """The answer's JSON object: :data:`JSON_KEYS`, then ``policy`` when set."""
        out = {k: getattr(self, k) for k in JSON_KEYS}
        return {**out, "policy": self.policy} if self.policy is not None else out

    @classmethod
    def from_json(cls, d: dict) -> "Answer":
        """The record of a JSON answer object (unknown keys ignored).

        Raises:
            TypeError: a required field (text, score, start, end, doc_id) is missing."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def result_json(question: str, answers: list[Answer], found: bool, threshold: float, version: str, encoder: str,
                seconds: float) -> dict:
    """The JSON object of one question's answers (``/api/answer``, :meth:`answers.answer.Answerer.answer`):
    ``{question, answers (best first), found, threshold, version, encoder, seconds}``."""
    return {"question": question, "answers": [a.to_json() for a in answers], "found": found,
            "threshold": threshold, "version": version, "encoder": encoder, "seconds": seconds}


def refusal(score: float, threshold: float) -> str:
    """How an answer below the version's threshold is announced (text, and the main job's summary)."""
    return f"no answer found (best score {score:.2f} < {threshold:.2f})"


def result_text(r: dict) -> str:
    """A readable rendering of a result's JSON (:func:`result_json`; the answer span in 【】)."""
    lines = [f"Q: {r['question']}"]
    ans = r["answers"]
    if not ans:
        lines.append("no answer found (nothing retrieved)")
    else:
        a = ans[0]
        head = (f"A ({a['score']:.2f}): {a['text']}" if r["found"] else
                f"{refusal(a['score'], r['threshold'])}; closest: {a['text']}")
        p = a["passage"]
        i = p.find(a["text"])
        shown = p[:i] + "【" + a["text"] + "】" + p[i + len(a["text"]):] if i >= 0 else p
        lines += [head, f"   source: {a['title'] or a['doc_id']} | {a['source'] or ''} {a['pubtime'] or ''} | "
                  f"{a['url'] or '(no url)'} | chars {a['start']}-{a['end']} of {a['doc_id']}",
                  f"   passage: {shown}"]
        for n, b in enumerate(ans[1:], 2):
            lines.append(f"{n}. ({b['score']:.2f}) {b['text'][:120]} | {b['title'] or b['doc_id']} {b['url'] or ''}")
    lines.append(f"[index {r['version']}, encoder {r['encoder']}]")
    return "\n".join(lines)


def highlight_html(a: dict) -> str:
    """The answer's passage as HTML, the span in ``<mark>`` (offsets from the JSON answer ``a``; escaped)."""
    p, s = a["passage"], a["start"] - a["passage_start"]
    e = s + (a["end"] - a["start"])
    return html.escape(p[:s]) + "<mark>" + html.escape(p[s:e]) + "</mark>" + html.escape(p[e:])


def source_html(a: dict) -> str:
    """The source line of a JSON answer ``a`` as HTML: its title linked to its URL when that is an absolute
    http(s) address (anything else, ``javascript:`` first, is shown as escaped text beside the title, never as
    a link), its source, date and char offsets; then, when the answer carries them, its document's policy fields
    (:func:`policy_html`)."""
    from crawler.csv_import import http_url
    from crawler.textsafe import strip_controls

    title = html.escape(a.get("title") or a["doc_id"])
    url = http_url(a.get("url"))
    if url:
        link = f'<a class="source" href="{html.escape(url, quote=True)}" rel="noopener noreferrer">{title}</a>'
    elif a.get("url"):
        shown = strip_controls(str(a["url"]), one_line=True)
        link = f'<span class="source">{title}</span> <span class="url">{html.escape(shown)}</span>'
    else:
        link = f'<span class="source">{title}</span>'
    meta = " · ".join(html.escape(str(x)) for x in (a.get("source"), a.get("pubtime")) if x)
    pol = policy_html(a.get("policy"))
    line = f"{link} <span class=\"meta\">{meta} · 第 {a['start']}–{a['end']} 字</span>"
    return line + (f"<br>{pol}" if pol else "")


UNKNOWN = {"level": "其他", "validity": "未知"}  # record values that say a field is not known: not shown
FACETS = (("place", "地区"), ("level", "层级"), ("year", "年份"), ("validity", "有效性"))


def policy_date(p: dict) -> tuple[str, str] | None:
    """``(label, ISO date)`` shown for a document: its published date (发布), else its effective date (施行)."""
    if p.get("published_date"):
        return "发布", str(p["published_date"])[:10]
    if p.get("effective_date"):
        return "施行", str(p["effective_date"])[:10]
    return None


def policy_html(p: dict | None) -> str:
    """The policy fields of a source (SPEC §2 metadata) as escaped HTML: jurisdiction name, level, 文号, date
    (published, else effective) and validity, each only when known (a missing field, level 其他 and validity 未知
    are left out); "" when none is."""
    if not p:
        return ""
    jur = (p.get("jurisdiction") or {}).get("name") if isinstance(p.get("jurisdiction"), dict) else None
    day = policy_date(p)
    fields = (("jurisdiction", jur), ("level", p.get("level")), ("doc-number", p.get("doc_number")),
              ("date", f"{day[0]} {day[1]}" if day else None), ("validity", p.get("validity")))
    parts = [(cls, v) for cls, v in fields if v and v != UNKNOWN.get(cls)]
    if not parts:
        return ""
    inner = " · ".join(f'<span class="{cls}">{html.escape(str(v))}</span>' for cls, v in parts)
    return f'<span class="policy">{inner}</span>'


def facet_counts(answers: list[dict]) -> dict[str, list[dict]]:
    """Counts of the documents of ``answers`` (JSON answers; each document once) by place, level, year and
    validity, from their ``policy`` fields: ``{facet: [{"value", "count", "filter"}]}`` (most first; ``filter``:
    the request fields that narrow to that value, None where no filter does: an unknown value, 全国 (a place
    filter keeps a place's parents and children: 全国 would keep every place), a validity other than 有效). {}
    when no answer carries policy fields."""
    seen, rows = set(), []
    for a in answers:
        if a.get("doc_id") in seen or not isinstance(a.get("policy"), dict):
            continue
        seen.add(a.get("doc_id"))
        rows.append(a["policy"])
    if not rows:
        return {}
    counts: dict[str, dict] = {f: {} for f, _ in FACETS}
    for p in rows:
        jur = p.get("jurisdiction") if isinstance(p.get("jurisdiction"), dict) else {}
        day = next((str(p[k])[:10] for k in ("published_date", "effective_date", "written_date") if p.get(k)), None)
        year = day[:4] if day else None
        level = p.get("level") if p.get("level") not in (None, UNKNOWN["level"]) else None
        validity = p.get("validity") if p.get("validity") not in (None, UNKNOWN["validity"]) else None
        for facet, value, flt in (
                ("place", jur.get("name"),
                 {"region": jur["code"]} if jur.get("code") not in (None, NATIONAL) else None),
                ("level", level, {"level": level}), ("year", year, {"from": year, "to": year}),
                ("validity", validity, {"in_force": "1"} if validity == "有效" else None)):
            key = value or "未知"
            got = counts[facet].setdefault(key, {"value": key, "count": 0, "filter": flt if value else None})
            got["count"] += 1
    return {f: sorted(c.values(), key=lambda x: (-x["count"], x["value"])) for f, c in counts.items()}


def facets_html(counts: dict[str, list[dict]], base: dict) -> str:
    """HTML of :func:`facet_counts` under an answer: one line per facet, each value with its count, a link to the
    same question narrowed to it (``/?`` + ``base``, the request's fields, with the value's filter) where a
    filter can; escaped. "" without counts."""
    from urllib.parse import urlencode

    if not counts:
        return ""
    lines = []
    for facet, name in FACETS:
        items = []
        for it in counts.get(facet) or []:
            text = f'{html.escape(it["value"])} ({it["count"]})'
            if it["filter"]:
                href = "/?" + urlencode({**{k: v for k, v in base.items() if v not in (None, "")}, **it["filter"]})
                text = f'<a class="facet" href="{html.escape(href, quote=True)}">{text}</a>'
            items.append(text)
        if items:
            lines.append(f'<li class="facet-{facet}">{name}：{" · ".join(items)}</li>')
    return f'<div class="facets" id="facets"><p>来源分布</p><ul>{"".join(lines)}</ul></div>'


def scope_html(scope: dict | None, base: dict) -> str:
    """The scope an answer was searched in (``scope`` of the result: its ``label``, ``inferred``), escaped, with
    a link that widens it to the whole corpus (``/?`` + ``base``, the request's fields, without its filters and
    with ``infer_scope=0``) when it restricts anything; "" for an unscoped result."""
    from urllib.parse import urlencode

    if not isinstance(scope, dict) or not scope.get("label"):
        return ""
    label = html.escape(str(scope["label"])) + ("（由问题推断）" if scope.get("inferred") else "")
    restricts = any(scope.get(f) for f in ("region", "level", "issuer", "from", "to", "in_force"))
    widen = ""
    if restricts:
        keep = {k: v for k, v in base.items() if k in ("q", "k") and v not in (None, "")}
        href = "/?" + urlencode({**keep, "infer_scope": "0"})
        widen = f' <a class="widen" href="{html.escape(href, quote=True)}">不限范围</a>'
    return f'<p class="scope" id="scope">{label}{widen}</p>'
