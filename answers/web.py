"""The answer page (SPEC §9): FastAPI with server-rendered HTML, no build step.

``GET /`` shows the question box (``?q=…&k=…`` answers too), ``POST /ask`` takes the form body
(``application/x-www-form-urlencoded``, decoded strictly as UTF-8), ``GET /api/answer?q=…&k=…`` returns the
JSON of :meth:`answers.answer.Answerer.answer`. The answer is shown highlighted in its passage with its source
link, then the other documents' answers; the footer names the index version and the encoder. A bad question,
``k`` or body is an HTTP 400 page saying what is wrong; the server keeps serving. Every request reads
``index/CURRENT`` once (through the answerer), and nothing is written to the data dir.
"""
from __future__ import annotations

import html
from urllib.parse import parse_qs

from fastapi import Request

from answers.answer import AnswerInputError

PAGE = """<!doctype html><html lang="zh"><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:"WenQuanYi Zen Hei",sans-serif;max-width:60rem;margin:1.5rem auto;padding:0 1rem;color:#222}}
form{{display:flex;gap:.5rem}} input[name=q]{{flex:1;font-size:1.1rem;padding:.4rem}} mark{{background:#ffe066}}
.answer{{border:1px solid #ccc;border-radius:6px;padding:.8rem 1rem;margin:1rem 0}} .score{{color:#555}}
.error{{color:#a00;font-weight:bold}} .none{{color:#a60}} footer{{margin-top:2rem;color:#777;font-size:.85rem}}
li{{margin:.4rem 0}}</style></head><body>
<h1>政策问答</h1>
<form method="post" action="/ask"><input name="q" value="{q}" placeholder="输入问题，例如：什么是数据基础制度体系？" autofocus>
<input name="k" type="number" min="1" max="{max_k}" value="{k}" style="width:4rem"><button type="submit">提问</button></form>
{body}
<footer>{footer}</footer></body></html>"""


def _source(a: dict) -> str:
    title = html.escape(a.get("title") or a["doc_id"])
    link = f'<a class="source" href="{html.escape(a["url"])}">{title}</a>' if a.get("url") else f'<span class="source">{title}</span>'
    meta = " · ".join(html.escape(str(x)) for x in (a.get("source"), a.get("pubtime")) if x)
    return f"{link} <span class=\"meta\">{meta} · 第 {a['start']}–{a['end']} 字</span>"


def _highlight(a: dict) -> str:
    p, s = a["passage"], a["start"] - a["passage_start"]
    e = s + (a["end"] - a["start"])
    return html.escape(p[:s]) + "<mark>" + html.escape(p[s:e]) + "</mark>" + html.escape(p[e:])


def render_result(r: dict) -> str:
    """HTML of an answer result: the answer (or "no answer found"), its passage and source, other hits."""
    ans = r["answers"]
    if not ans:
        return '<p class="none">未找到答案（没有检索到相关文档）。</p>'
    a = ans[0]
    head = (f'<p>答案 <span class="score">(置信度 {a["score"]:.2f})</span></p>' if r["found"] else
            f'<p class="none">未找到可靠答案（最高置信度 {a["score"]:.2f} &lt; {r["threshold"]:.2f}），最接近的段落：</p>')
    out = [f'<div class="answer" id="answer">{head}<p class="passage">{_highlight(a)}</p><p>来源：{_source(a)}</p></div>']
    if len(ans) > 1:
        out.append('<h2>其他文档</h2><ol id="others">')
        for b in ans[1:]:
            out.append(f'<li><span class="score">({b["score"]:.2f})</span> {html.escape(b["text"][:200])}<br>{_source(b)}</li>')
        out.append("</ol>")
    return "\n".join(out)


def page(body: str, q: str = "", k: int = 3, footer: str = "", max_k: int = 20) -> str:
    """The whole page around ``body`` (question box filled with ``q``)."""
    return PAGE.format(title="政策问答", q=html.escape(q), k=k, max_k=max_k, body=body, footer=footer)


def parse_form(body: bytes) -> tuple[str, str]:
    """(q, k text) from an urlencoded form body.

    Raises:
        AnswerInputError: the body (or a percent-escape in it) is not valid UTF-8.
    """
    try:
        fields = parse_qs(body.decode("utf-8"), keep_blank_values=True, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise AnswerInputError("the form body is not valid UTF-8") from None
    return (fields.get("q") or [""])[0], (fields.get("k") or ["3"])[0]


def parse_k(text) -> int:
    """``k`` from a form or query value.

    Raises:
        AnswerInputError: not an integer.
    """
    try:
        return int(str(text).strip())
    except ValueError:
        raise AnswerInputError(f"k must be an integer, got {str(text)[:20]!r}") from None


def create_app(answerer):
    """The FastAPI app over an :class:`~answers.answer.Answerer`."""
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse, JSONResponse
    from starlette.concurrency import run_in_threadpool

    app = FastAPI(title="policy answers", docs_url=None, redoc_url=None)
    max_k = answerer.cfg.max_k

    def footer(r: dict | None = None) -> str:
        if r is None:
            try:
                be = answerer.backend()
                r = {"version": be.version, "encoder": be.encoder_name}
            except Exception as exc:  # the page still shows; the footer says why there is no index
                return html.escape(f"no index: {exc}")
        return f'索引版本 <span id="version">{html.escape(r["version"])}</span> · 编码器 {html.escape(r["encoder"])}'

    def respond(q: str, k_text) -> HTMLResponse:
        try:
            k = parse_k(k_text)
            r = answerer.answer(q, k)
        except AnswerInputError as exc:
            body = f'<p class="error" id="error">输入有误：{html.escape(str(exc))}</p>'
            return HTMLResponse(page(body, q[:1000] if isinstance(q, str) else "", 3, footer(), max_k), status_code=400)
        return HTMLResponse(page(render_result(r), r["question"], k, footer(r), max_k))

    @app.get("/", response_class=HTMLResponse)
    def home(q: str | None = None, k: str = "3"):
        if q is None:
            return HTMLResponse(page("", "", 3, footer(), max_k))
        return respond(q, k)

    @app.post("/ask", response_class=HTMLResponse)
    async def ask(request: Request):
        try:
            q, k = parse_form(await request.body())
        except AnswerInputError as exc:
            body = f'<p class="error" id="error">输入有误：{html.escape(str(exc))}</p>'
            return HTMLResponse(await run_in_threadpool(lambda: page(body, "", 3, footer(), max_k)), status_code=400)
        return await run_in_threadpool(respond, q, k)

    @app.get("/api/answer")
    def api(q: str = "", k: str = "3"):
        try:
            return JSONResponse(answerer.answer(q, parse_k(k)))
        except AnswerInputError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return app
