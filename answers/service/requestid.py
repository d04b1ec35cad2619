"""Request ids and JSON logs of the answer service (SPEC §9).

:class:`RequestIdMiddleware` (outermost ASGI middleware) gives every HTTP request an id: the client's
``X-Request-ID`` when it is 1-64 chars of ``[A-Za-z0-9-_]``, else 16 random hex digits; it is set on the
response's ``X-Request-ID`` header and in a context variable that :class:`JsonLogFormatter` puts in every log
line written while the request runs (threads of the pool too: they copy the context). When the response is
done (or the client went away) it calls each ``on_done(record)``: the access-log line (:func:`access_logger`),
the metrics. A record: ``{id, method, path, query_keys, status, seconds, client, key}``; the query's values
(questions, ids) are never logged, only its parameter names.
"""
from __future__ import annotations

import contextvars
import json
import logging
import re
import secrets
import sys
import time
from urllib.parse import parse_qsl

REQUEST_ID = contextvars.ContextVar("request_id", default="-")
SANE_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ACCESS_LOGGER = "answers.access"


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The client's ``x-request-id`` header when sane (see module doc), else a new 16-hex-digit id."""
    for k, v in headers:
        if k == b"x-request-id":
            text = v.decode("latin-1")
            if SANE_ID.match(text):
                return text
            break
    return secrets.token_hex(8)


class RequestIdMiddleware:
    """ASGI middleware: request id, timing and the ``on_done`` callbacks (see the module's docstring).
    ``scope["service"]`` is a dict the inner middlewares fill (``key``: the API key's name)."""

    def __init__(self, app, on_done=()):
        self.app, self.on_done = app, list(on_done)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        rid = request_id_of(scope.get("headers") or [])
        token = REQUEST_ID.set(rid)
        scope["service"] = info = {"key": None}
        status = {"code": 0}
        t = time.perf_counter()

        async def send_with_id(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", rid.encode("ascii"))]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except Exception:
            if not status["code"]:
                raise
            # the app answered (a 500 page) and logged the error with its reference; not a second traceback
        finally:
            client = scope.get("client")
            record = {"id": rid, "method": scope.get("method"), "path": scope.get("path"),
                      "query_keys": sorted({k for k, _ in parse_qsl(scope.get("query_string", b"").decode(
                          "latin-1"), keep_blank_values=True)})[:20],
                      "status": status["code"] or 499, "seconds": round(time.perf_counter() - t, 6),
                      "client": client[0] if client else None, "key": info.get("key")}
            for fn in self.on_done:
                try:
                    fn(record)
                except Exception:  # noqa: BLE001 - a broken observer must not break the response
                    logging.getLogger(__name__).exception("request observer failed")
            REQUEST_ID.reset(token)


def access_logger(record: dict) -> None:
    """One JSON access-log line per request on the ``answers.access`` logger (status 499: the client left)."""
    logging.getLogger(ACCESS_LOGGER).info("access", extra={"access": record})


class JsonLogFormatter(logging.Formatter):
    """A log record as one JSON line: ``ts`` (UTC ISO), ``level``, ``logger``, ``request_id``, ``msg``, and
    for access lines the request's fields; a traceback, if any, as ``exc`` (one string)."""

    def format(self, record: logging.LogRecord) -> str:
        out = {"ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name, "request_id": REQUEST_ID.get()}
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            out.update(access)
            out["request_id"] = access["id"]
        else:
            out["msg"] = record.getMessage()
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


class _CurrentStderrHandler(logging.StreamHandler):
    """A stream handler writing to whatever ``sys.stderr`` is at emit time (as :data:`logging.lastResort`
    does), so a handler set up under a replaced stderr (a test's capture, a closed pipe) never keeps writing
    to the old stream."""

    def __init__(self):
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr


def configure_json_logging(level: int = logging.WARNING, stream=None) -> None:
    """Root logging as JSON lines on ``stream`` (default: the current ``sys.stderr``) at ``level``; access
    lines always (INFO). Replaces the root logger's handlers."""
    handler = logging.StreamHandler(stream) if stream is not None else _CurrentStderrHandler()
    handler.setFormatter(JsonLogFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO)
