"""Answers as records and their renderings, in one place (SPEC §9): the typed :class:`Answer` a reader returns,
its JSON (what ``/api/answer``, ``flows.ask --json`` and the Python API give: the keys they always gave, plus
``version`` and, when a version holds document metadata, ``policy``), its text (``flows.ask``) and its HTML
pieces (the answer page, :mod:`answers.web`).
"""
from __future__ import annotations

import html
from dataclasses import dataclass, fields

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
    a link), its source, date and char offsets."""
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
    return f"{link} <span class=\"meta\">{meta} · 第 {a['start']}–{a['end']} 字</span>"
