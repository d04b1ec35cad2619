"""The answer page (SPEC §9): FastAPI with server-rendered HTML, no build step.

``GET /`` shows the question box (``?q=…&k=…`` answers too, with the same scope fields as ``/api/answer``),
``POST /ask`` takes the form body
(``application/x-www-form-urlencoded``, decoded strictly as UTF-8), ``GET /api/answer?q=…&k=…`` returns the
JSON of :meth:`answers.answer.Answerer.answer` (scoped by ``region``, ``level``, ``issuer``, ``from``, ``to``,
``in_force`` and, unless ``infer_scope=0``, the places the question names: its ``scope`` field holds the
scope and its ``label``, :func:`scope_params`; a bad filter is a 400); ``GET /related?doc_id=…&k=10`` (or ``?external_id=…``) the
related policies of a document of the serving version (SPEC §12, :mod:`answers.related_view`: 400 for a bad
``k`` or id, 404 with the reason when the version has no ``related`` part). The answer is shown highlighted in
its passage with its source link and its document's policy fields (jurisdiction, level, 文号, date,
validity), beside each source its typed links (implements / repeals / repealed by / cites, from its policy
record) and its top 5 related policies (server-rendered, so the page still runs no script), then the other
documents' answers, and under them the facet counts of the sources shown (place / level / year / validity, each
a link narrowing the question to it). The form's facets (place, level, year range, in force, inference of the
place from the question) are the scope fields of ``/api/answer`` (:data:`FORM_FIELDS`); the scope applied is
shown with the answer (``范围：浙江省 + 国家``) with a link that widens it. The footer names the index version and
the encoder. A bad question, ``k`` or body is an HTTP 400 page saying what is wrong; the server keeps serving.
Every request reads ``index/CURRENT`` once (through the answerer), and nothing is written to the data dir.

Hostile input (:class:`Limits`): a source link is an ``<a href>`` only for an absolute http(s) URL
(:func:`crawler.csv_import.http_url`; a ``javascript:`` or ``data:`` address is shown as plain text); every
response carries a Content-Security-Policy that allows the page's inline styles and its form and nothing else
(no script runs even if markup got through), ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy:
no-referrer``. A form body is read incrementally up to ``max_body_bytes`` (more, announced or sent: 413),
within ``body_timeout_s`` (a body that trickles in: 408), and only as ``identity`` (any ``Content-Encoding``
else: 415); at most ``max_answering`` questions are answered at once (a request waits up to ``queue_wait_s``
for a slot, then 503). An internal error is a generic 500 page (503 while no index is published): the detail,
which names files of the data dir, goes to the server's log only.
"""
from __future__ import annotations

import asyncio
import html
import logging
import secrets
import threading
from dataclasses import dataclass
from urllib.parse import parse_qs

from fastapi import Request

from answers.answer import AnswerInputError
from answers.render import facet_counts, facets_html, highlight_html, scope_html, source_html

log = logging.getLogger(__name__)

# what the page needs: its <style> element and style attributes, and its form posting to /ask; nothing else
CONTENT_SECURITY_POLICY = ("default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; "
                           "frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer"}


@dataclass(frozen=True)
class Limits:
    """Bounds of the serving surface: ``max_body_bytes`` of a form body, ``body_timeout_s`` to receive it,
    ``max_answering`` questions answered at once, ``queue_wait_s`` a request waits for a free slot."""

    max_body_bytes: int = 64 * 1024
    body_timeout_s: float = 10.0
    max_answering: int = 4
    queue_wait_s: float = 10.0


RELATED_ON_PAGE = 5  # related policies shown beside a source
RELATED_ANSWERS = 5  # answers (from the top) whose sources get a related list


class BodyError(Exception):
    """A request body refused before it is parsed: ``status`` (408, 413, 415, 400) and what is wrong."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


PAGE = """<!doctype html><html lang="zh"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:"WenQuanYi Zen Hei",sans-serif;max-width:60rem;margin:1.5rem auto;padding:0 1rem;color:#222}}
form .row{{display:flex;gap:.5rem;flex-wrap:wrap;align-items:center;margin:.3rem 0}} .facet-form{{font-size:.9rem}}
input[name=q]{{flex:1;font-size:1.1rem;padding:.4rem}} mark{{background:#ffe066}} .scope{{color:#345}}
.policy{{color:#444;font-size:.9rem}} .facets{{font-size:.9rem;color:#444}} .facets ul{{margin:.2rem 0}}
.answer{{border:1px solid #ccc;border-radius:6px;padding:.8rem 1rem;margin:1rem 0}} .score{{color:#555}}
.error{{color:#a00;font-weight:bold}} .none{{color:#a60}} footer{{margin-top:2rem;color:#777;font-size:.85rem}}
li{{margin:.4rem 0}} .related,.links{{font-size:.9rem;margin:.3rem 0 0 1rem}} .related ol,.links ul{{margin:.2rem 0}}
.related li,.links li{{margin:.1rem 0}} .link-type{{color:#555}}</style></head><body>
<h1>政策问答</h1>
<form method="post" action="/ask"><div class="row"><input name="q" value="{q}" placeholder="输入问题，例如：什么是数据基础制度体系？" autofocus>
<input name="k" type="number" min="1" max="{max_k}" value="{k}" style="width:4rem"><button type="submit">提问</button></div>
{facets}</form>
{body}
<footer>{footer}</footer></body></html>"""


_source, _highlight = source_html, highlight_html  # one rendering of an answer: answers.render


def render_result(r: dict, related: dict | None = None, base: dict | None = None) -> str:
    """HTML of an answer result: the scope it was searched in (:func:`answers.render.scope_html`), the answer (or
    "no answer found"), its passage and source (with its policy fields, :func:`answers.render.source_html`),
    other hits, then the facet counts of the sources shown (:func:`answers.render.facets_html`); beside each
    source, its typed links (:func:`answers.related_view.render_links`) and its related policies when ``related``
    (doc_id -> items of :meth:`answers.related_view.RelatedViews.lookup`) has them
    (:func:`answers.related_view.render_related`). ``base``: the request's fields, kept by the page's links
    (default: the question alone)."""
    from answers.related_view import render_links, render_related

    rel = related or {}
    base = base if base is not None else {"q": r.get("question")}
    ans = r["answers"]
    scope = scope_html(r.get("scope"), base)
    if not ans:
        return scope + '<p class="none">未找到答案（没有检索到相关文档）。</p>'

    def beside(x: dict) -> str:
        return render_links((x.get("policy") or {}).get("links") or []) + render_related(rel.get(x["doc_id"]) or [])

    a = ans[0]
    head = (f'<p>答案 <span class="score">(置信度 {a["score"]:.2f})</span></p>' if r["found"] else
            f'<p class="none">未找到可靠答案（最高置信度 {a["score"]:.2f} &lt; {r["threshold"]:.2f}），最接近的段落：</p>')
    out = [scope, f'<div class="answer" id="answer">{head}<p class="passage">{_highlight(a)}</p><p>来源：{_source(a)}</p>'
           f'{beside(a)}</div>']
    if len(ans) > 1:
        out.append('<h2>其他文档</h2><ol id="others">')
        for b in ans[1:]:
            out.append(f'<li><span class="score">({b["score"]:.2f})</span> {html.escape(b["text"][:200])}<br>'
                       f'{_source(b)}{beside(b)}</li>')
        out.append("</ol>")
    out.append(facets_html(facet_counts(ans), base))
    return "\n".join(x for x in out if x)


# the form's scope fields: those of /api/answer (retrieval.scope.FILTER_FIELDS but issuer, plus infer_scope)
FORM_FIELDS = ("region", "level", "from", "to", "in_force", "infer_scope")


def form_state(params) -> dict:
    """The form's scope fields of a request (``params``: its query or form fields, last value wins), as shown
    back in the form: ``region``, ``level``, ``from``, ``to`` (strings), ``in_force`` and ``infer_scope``
    (booleans; inference is on unless ``infer_scope`` is 0/false/no/off)."""
    params = params or {}
    out = {f: str(params.get(f) or "")[:1000] for f in ("region", "level", "from", "to")}
    flag = str(params.get("in_force") or "").strip().lower()
    out["in_force"] = flag in ("1", "true", "yes", "on")
    out["infer_scope"] = str(params.get("infer_scope", "1")).strip().lower() not in ("0", "false", "no", "off")
    return out


def facet_form(form: dict | None = None, levels=()) -> str:
    """The form's facet controls, filled from ``form`` (:func:`form_state`), escaped: place (text), level (a
    select of ``levels``, the levels present in the served records, plus the one asked), year range (from/to),
    in force (checkbox) and whether the question's places scope it (checkbox over a hidden ``infer_scope=0``,
    so an unchecked box turns inference off)."""
    f = form or form_state({})
    esc = lambda v: html.escape(str(v), quote=True)  # noqa: E731
    opts = [""] + list(dict.fromkeys([*levels, *([f["level"]] if f["level"] else [])]))
    options = "".join(f'<option value="{esc(v)}"{" selected" if v == f["level"] else ""}>{esc(v) or "不限"}</option>'
                      for v in opts)
    on = lambda b: " checked" if b else ""  # noqa: E731
    return ('<div class="row facet-form" id="facet-form">'
            f'<label>地区 <input name="region" value="{esc(f["region"])}" placeholder="如：浙江省" size="10"></label>'
            f'<label>层级 <select name="level">{options}</select></label>'
            f'<label>年份 <input name="from" value="{esc(f["from"])}" placeholder="起" size="6"></label>'
            f'<label>至 <input name="to" value="{esc(f["to"])}" placeholder="止" size="6"></label>'
            f'<label><input type="checkbox" name="in_force" value="1"{on(f["in_force"])}> 现行有效</label>'
            '<input type="hidden" name="infer_scope" value="0">'
            f'<label><input type="checkbox" name="infer_scope" value="1"{on(f["infer_scope"])}> 按问题推断地区</label>'
            '</div>')


def page(body: str, q: str = "", k: int = 3, footer: str = "", max_k: int = 20, form: dict | None = None,
         levels=()) -> str:
    """The whole page around ``body`` (question box filled with ``q``, facets with ``form``: :func:`facet_form`)."""
    return PAGE.format(title="政策问答", q=html.escape(q), k=k, max_k=max_k, body=body, footer=footer,
                       facets=facet_form(form, levels))


def parse_form(body: bytes) -> tuple[str, str]:
    """(q, k text) from an urlencoded form body.

    Raises:
        AnswerInputError: the body (or a percent-escape in it) is not valid UTF-8.
    """
    fields = parse_form_fields(body)
    return fields.get("q", ""), fields.get("k", "3")


def parse_form_fields(body: bytes) -> dict:
    """Every field of an urlencoded form body, ``{name: value}`` (``q`` and ``k`` the first value given, the
    others the last: a checkbox after its hidden default).

    Raises:
        AnswerInputError: the body (or a percent-escape in it) is not valid UTF-8.
    """
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise AnswerInputError("the form body is not valid UTF-8") from None
    return {name: values[0] if name in ("q", "k") else values[-1] for name, values in fields.items() if values}


def parse_k(text) -> int:
    """``k`` from a form or query value.

    Raises:
        AnswerInputError: not an integer.
    """
    try:
        return int(str(text).strip())
    except ValueError:
        raise AnswerInputError(f"k must be an integer, got {str(text)[:20]!r}") from None


async def read_form_body(request: Request, limits: Limits = Limits()) -> bytes:
    """The request body, read as it arrives and refused as soon as it is known to be unacceptable.

    Raises:
        BodyError: 415 a ``Content-Encoding`` other than ``identity``; 413 a ``Content-Length`` or the bytes
            received over ``limits.max_body_bytes`` (reading stops there); 408 the body not complete within
            ``limits.body_timeout_s``; 400 a ``Content-Length`` that is not a number.
    """
    codings = [c.strip().lower() for v in request.headers.getlist("content-encoding") for c in v.split(",")]
    if any(c not in ("", "identity") for c in codings):
        raise BodyError(415, f"Content-Encoding {', '.join(c for c in codings if c)[:40]!r} is not accepted "
                             "(send the form uncompressed)")
    declared = (request.headers.get("content-length") or "").strip()
    if declared:
        if not (declared.isascii() and declared.isdigit()):
            raise BodyError(400, "Content-Length is not a number")
        if len(declared) > 15 or int(declared) > limits.max_body_bytes:
            raise BodyError(413, f"the request body is over {limits.max_body_bytes} bytes")

    async def gather() -> bytes:
        buf = bytearray()
        async for chunk in request.stream():
            buf += chunk
            if len(buf) > limits.max_body_bytes:
                raise BodyError(413, f"the request body is over {limits.max_body_bytes} bytes")
        return bytes(buf)

    try:
        return await asyncio.wait_for(gather(), limits.body_timeout_s)
    except asyncio.TimeoutError:
        raise BodyError(408, f"the request body did not arrive within {limits.body_timeout_s:g} s") from None


class _SecurityHeaders:
    """ASGI middleware: :data:`SECURITY_HEADERS` on every HTTP response (pages, JSON, 404s)."""

    def __init__(self, app):
        self.app = app
        self.raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in SECURITY_HEADERS.items()]

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                names = {k for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *[(k, v) for k, v in self.raw if k not in names]]}
            await send(message)

        return await self.app(scope, receive, send_with_headers)


class _Pages:
    """What the routes share: the answerer, its answering slots (``limits.max_answering``) and the pages."""

    busy = "服务繁忙，请稍后再试。"

    def __init__(self, answerer, limits: Limits, related=None):
        self.answerer, self.limits, self.max_k = answerer, limits, answerer.cfg.max_k
        self.slots = threading.BoundedSemaphore(limits.max_answering)
        self.related = related

    def related_of(self, r: dict) -> dict:
        """doc_id -> the top :data:`RELATED_ON_PAGE` related policies of each of the first
        :data:`RELATED_ANSWERS` answers' documents, from the answer's own index version; {} when that version
        has no related part or no slot came free (the page shows the answer alone; the reason is logged)."""
        from answers.related_view import RelatedInputError, RelatedMissingError

        out: dict = {}
        docs = list(dict.fromkeys(a["doc_id"] for a in r.get("answers", [])[:RELATED_ANSWERS]))
        if self.related is None or not docs or not self.slots.acquire(timeout=self.limits.queue_wait_s):
            return out
        try:
            for d in docs:
                out[d] = self.related.lookup(d, "doc_id", RELATED_ON_PAGE, r.get("version"))["related"]
        except RelatedMissingError as exc:
            log.info("answer page without related policies: %s", exc)
        except Exception as exc:  # noqa: BLE001 - the answer is shown whatever befalls its related lists
            log.warning("related policies not shown: %s", exc, exc_info=not isinstance(exc, RelatedInputError))
        finally:
            self.slots.release()
        return out

    def respond_related(self, key, column: str, k_text):
        """JSON of :meth:`answers.related_view.RelatedViews.lookup` (400: bad input or unknown id; 404: the
        serving version has no related part, and why; 503 when every slot stayed busy)."""
        from fastapi.responses import JSONResponse

        from answers.related_view import RelatedInputError, RelatedMissingError

        if self.related is None:
            return JSONResponse({"error": "related policies are not served here"}, status_code=404)
        if not self.slots.acquire(timeout=self.limits.queue_wait_s):
            return JSONResponse({"error": "busy: try again later"}, status_code=503, headers={"Retry-After": "5"})
        try:
            return JSONResponse(self.related.lookup(key, column, k_text))
        except RelatedInputError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        except RelatedMissingError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404)
        finally:
            self.slots.release()

    def footer(self, r: dict | None = None) -> str:
        if r is None:
            try:
                be = self.answerer.backend()
                r = {"version": be.version, "encoder": be.encoder_name}
            except Exception as exc:  # the page still shows; the detail (paths of the data dir) only in the log
                log.warning("answer page without an index: %s", exc)
                return "索引暂不可用"
        return f'索引版本 <span id="version">{html.escape(r["version"])}</span> · 编码器 {html.escape(r["encoder"])}'

    def levels(self) -> tuple[str, ...]:
        """The document levels of the serving version's policy records (the form's level select); () without
        an index or the part (the reason is logged)."""
        from retrieval.policy_records import POLICY_PART, POLICY_RECORDS

        try:
            bundle = self.answerer.backend().bundle
            return tuple(bundle.load(POLICY_PART).levels) if bundle.has_part(POLICY_RECORDS) else ()
        except Exception as exc:  # noqa: BLE001 - the page still shows, with a level select of its own
            log.info("answer page without levels: %s", exc)
            return ()

    def html(self, body: str, status: int = 200, q: str = "", k: int = 3, footer: str | None = None,
             headers: dict | None = None, form: dict | None = None):
        from fastapi.responses import HTMLResponse

        text = page(body, q[:1000] if isinstance(q, str) else "", k, self.footer() if footer is None else footer,
                    self.max_k, form, self.levels() if status < 500 else ())
        return HTMLResponse(text, status_code=status, headers={**SECURITY_HEADERS, **(headers or {})})

    def error(self, status: int, message: str, q: str = "", headers: dict | None = None, form: dict | None = None):
        """An error page (400s name the problem and keep the form's fields; 500s are generic and carry no footer)."""
        body = f'<p class="error" id="error">{html.escape(message)}</p>'
        return self.html(body, status, q, footer=None if status < 500 else "", headers=headers, form=form)

    def answer(self, q, k: int, filters: dict | None = None, infer_scope: bool = False) -> dict | None:
        """``answerer.answer(q, k)`` in one of the answering slots, scoped by ``filters`` / ``infer_scope``
        (:meth:`answers.answer.Answerer.answer`) when given; None when no slot came free in time."""
        if not self.slots.acquire(timeout=self.limits.queue_wait_s):
            return None
        try:
            if not filters and not infer_scope:
                return self.answerer.answer(q, k)
            return self.answerer.answer(q, k, filters=filters, infer_scope=infer_scope)
        finally:
            self.slots.release()

    def respond(self, q: str, k_text, params=None):
        """The answer page of ``q`` scoped by the request's facet fields ``params`` (:data:`FORM_FIELDS`, as
        :func:`scope_params` reads them for ``/api/answer``: inference on unless ``infer_scope`` is off); 400 for a
        bad question, ``k`` or facet value (the message names it), 503 when every slot stayed busy."""
        form = form_state(params)
        try:
            k = parse_k(k_text)
            filters, infer = scope_params({f: v for f, v in (params or {}).items() if f in FORM_FIELDS})
            r = self.answer(q, k, filters, infer)
        except AnswerInputError as exc:
            return self.error(400, f"输入有误：{exc}", q, form=form)
        if r is None:
            return self.error(503, self.busy, q, {"Retry-After": "5"})
        base = {"q": r["question"], "k": k, **{f: form[f] for f in ("region", "level", "from", "to")},
                "in_force": "1" if form["in_force"] else "", "infer_scope": "" if form["infer_scope"] else "0"}
        return self.html(render_result(r, self.related_of(r), base), q=r["question"], k=k, footer=self.footer(r),
                         form=form)

    def respond_json(self, q: str, k_text, params=None):
        from fastapi.responses import JSONResponse

        try:
            k = parse_k(k_text)
            filters, infer = scope_params(params)
            r = self.answer(q, k, filters, infer)
        except AnswerInputError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        if r is None:
            return JSONResponse({"error": "busy: try again later"}, status_code=503, headers={"Retry-After": "5"})
        return JSONResponse(r)

    async def internal_error(self, request: Request, exc: Exception):
        """A generic page (or JSON for the API); the detail, which names the data dir's files, is logged."""
        from fastapi.responses import JSONResponse

        from retrieval.bundle import IndexMissingError

        ref = secrets.token_hex(4)
        status = 503 if isinstance(exc, IndexMissingError) else 500
        log.error("request %s %s failed (ref %s)", request.method, request.url.path, ref, exc_info=exc)
        if request.url.path.startswith("/api/") or request.url.path == "/related":
            return JSONResponse({"error": "index not available" if status == 503 else "internal error",
                                 "ref": ref}, status_code=status, headers=SECURITY_HEADERS)
        message = "索引暂不可用" if status == 503 else "服务器内部错误"
        return self.html(f'<p class="error" id="error">{message}（编号 {ref}）。</p>', status, footer="")


def scope_params(params) -> tuple[dict, bool]:
    """``(filters, infer_scope)`` of an answer request's query parameters: the filter fields (``region``,
    ``level``, ``issuer``, ``from``, ``to``, ``in_force``; :mod:`retrieval.scoped`) and ``infer_scope`` (default on:
    the places the question names scope it when no ``region`` is given; ``0`` / ``false`` / ``no`` turns it off).

    Raises:
        AnswerInputError: a bad filter (the message names the field).
    """
    from retrieval.scoped import filters_of
    from retrieval.scope import parse_filters

    params = dict(params or {})
    filters = filters_of(params)
    try:
        parse_filters(filters)
    except ValueError as exc:
        raise AnswerInputError(str(exc)) from None
    infer = str(params.get("infer_scope", "1")).strip().lower() not in ("0", "false", "no", "off")
    return filters, infer


def add_lookup_route(app, answerer) -> None:
    """``GET /api/lookup?q=…`` on ``app``: the JSON of :meth:`retrieval.lookup.Catalog.lookup` over the serving
    version of ``answerer``'s data dir (a 文号 or 《title》, optionally with 第…条; SPEC §2 metadata, §7): 200 found,
    404 not found (the same JSON, its ``reason``), 400 a bad ``q`` (empty, over 300 chars, control characters, no
    document named); 404 when the answerer has no data dir. Behind the service's key and rate-limit gate as every
    ``/api/`` route (:class:`answers.service.app.Gate`)."""
    from pathlib import Path

    from fastapi.responses import JSONResponse

    from retrieval.lookup import LookupInputError, Lookups

    data_dir = getattr(answerer, "data_dir", None)
    lookups = Lookups(Path(data_dir) / "index") if data_dir is not None else None

    @app.get("/api/lookup")
    def api_lookup(q: str = ""):
        if lookups is None:
            return JSONResponse({"error": "lookups are not served here"}, status_code=404)
        try:
            r = lookups.lookup(q)
        except LookupInputError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        return JSONResponse(r, status_code=200 if r["found"] else 404)


def create_app(answerer, limits: Limits = Limits(), related=None):
    """The FastAPI app over an :class:`~answers.answer.Answerer`, bounded by ``limits``; ``related``: the
    :class:`~answers.related_view.RelatedViews` behind ``GET /related`` and the page's related lists (default:
    one over the answerer's data dir)."""
    from answers.related_view import RelatedViews

    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title="policy answers", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(_SecurityHeaders)
    if related is None and getattr(answerer, "data_dir", None) is not None:
        related = RelatedViews(answerer.data_dir)
    pages = _Pages(answerer, limits, related)
    app.add_exception_handler(Exception, pages.internal_error)

    @app.get("/", response_class=HTMLResponse)
    def home(request: Request, q: str | None = None, k: str = "3"):
        params = request.query_params
        return pages.html("", form=form_state(params)) if q is None else pages.respond(q, k, params)

    @app.post("/ask", response_class=HTMLResponse)
    async def ask(request: Request):
        try:
            fields = parse_form_fields(await read_form_body(request, limits))
        except BodyError as exc:
            return await run_in_threadpool(pages.error, exc.status, f"请求有误：{exc}", "", {"Connection": "close"})
        except AnswerInputError as exc:
            return await run_in_threadpool(pages.error, 400, f"输入有误：{exc}")
        return await run_in_threadpool(pages.respond, fields.get("q", ""), fields.get("k", "3"), fields)

    @app.get("/api/answer")
    def api(request: Request, q: str = "", k: str = "3"):
        return pages.respond_json(q, k, request.query_params)

    @app.get("/related")
    @app.get("/api/related")
    def related_api(doc_id: str | None = None, external_id: str | None = None, k: str = "10"):
        if (doc_id is None) == (external_id is None):
            from fastapi.responses import JSONResponse

            return JSONResponse({"error": "give exactly one of doc_id and external_id"}, status_code=400)
        column = "doc_id" if doc_id is not None else "external_id"
        return pages.respond_related(doc_id if doc_id is not None else external_id, column, k)

    add_lookup_route(app, answerer)
    return app
