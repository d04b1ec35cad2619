"""The answer service as exposed (SPEC §9): :func:`answers.web.create_app` behind API keys, rate limits,
request ids and JSON access logs, with ``/healthz``, ``/readyz`` and ``/metrics``.

Order of the layers, outermost first: :class:`~answers.service.requestid.RequestIdMiddleware` (id, timing,
access log, request metrics), :class:`Gate` (API key, then rate limits), the FastAPI app (its security
headers, its bounds, the routes). ``/healthz`` and ``/readyz`` pass the gate without a key and uncounted by
the rate limits (probes); ``/metrics`` needs a key when keys are in force, as ``/api/*`` and ``/related`` do;
the page (``/``, ``/ask``) needs one only with ``page_needs_key``. A client that leaves while its body is
read ends in one access-log line (status 499), no traceback.

:func:`app_from_env` is the factory ``uvicorn`` imports in each ``--workers`` process: it reads the
:class:`ServiceConfig` from the ``ANSWER_SERVICE_CONFIG`` environment variable (JSON).
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field

from prometheus_client import CONTENT_TYPE_LATEST

from answers.service.keys import KeyStore
from answers.service.metrics import CountingAnswerer, ServiceMetrics
from answers.service.ratelimit import RateLimits
from answers.service.requestid import RequestIdMiddleware, access_logger, configure_json_logging

log = logging.getLogger(__name__)
CONFIG_ENV = "ANSWER_SERVICE_CONFIG"
PROBES = ("/healthz", "/readyz")
ROUTES = ("/", "/ask", "/api/answer", "/api/related", "/api/lookup", "/related", "/healthz", "/readyz", "/metrics")


@dataclass(frozen=True)
class ServiceConfig:
    """What ``flows.serve`` exposes: the ``data_dir``; ``require_keys`` (else keys are asked for once one
    exists); ``page_needs_key`` (the HTML page too); ``rate_per_key`` / ``rate_per_address`` (``limits``
    strings, "" for none); ``web_limits``: keyword arguments of :class:`answers.web.Limits`."""

    data_dir: str
    require_keys: bool = False
    page_needs_key: bool = False
    rate_per_key: str = "60/minute"
    rate_per_address: str = "300/minute"
    web_limits: dict = field(default_factory=dict)


def _json(send, status: int, body: dict, headers: dict | None = None):
    from answers.web import SECURITY_HEADERS

    raw = json.dumps(body).encode()
    hdrs = [(b"content-type", b"application/json"), (b"content-length", str(len(raw)).encode())]
    hdrs += [(k.lower().encode(), str(v).encode()) for k, v in {**SECURITY_HEADERS, **(headers or {})}.items()]

    async def go():
        await send({"type": "http.response.start", "status": status, "headers": hdrs})
        await send({"type": "http.response.body", "body": raw})

    return go()


def presented_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key of ``Authorization: Bearer KEY`` or ``X-API-Key: KEY`` (None when neither is given)."""
    for k, v in headers:
        if k == b"authorization":
            scheme, _, token = v.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
        elif k == b"x-api-key" and v.strip():
            return v.decode("latin-1").strip()
    return None


class Gate:
    """ASGI middleware: 401 without a live key where one is needed, 429 (``Retry-After``) over a rate limit;
    writes the key's name into ``scope["service"]["key"]`` for the access log."""

    def __init__(self, app, keys: KeyStore, rates: RateLimits, require_keys: bool = False,
                 page_needs_key: bool = False):
        self.app, self.keys, self.rates = app, keys, rates
        self.require_keys, self.page_needs_key = require_keys, page_needs_key

    def needs_key(self, path: str) -> bool:
        if path in PROBES:
            return False
        if not (path.startswith("/api/") or path in ("/related", "/metrics") or self.page_needs_key):
            return False
        return self.require_keys or self.keys.active()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] in PROBES:
            return await self.app(scope, receive, send)
        info = scope.setdefault("service", {})
        given = presented_key(scope.get("headers") or [])
        name = self.keys.lookup(given) if given else None
        info["key"] = name
        if name is None and self.needs_key(scope["path"]):
            why = "an API key is required" if given is None else "the API key is not valid"
            return await _json(send, 401, {"error": f"{why} (Authorization: Bearer KEY or X-API-Key: KEY)"},
                               {"WWW-Authenticate": "Bearer"})
        if scope["path"] != "/metrics":
            client = scope.get("client")
            over = self.rates.hit(name, client[0] if client else None)
            if over is not None:
                limit, retry = over
                return await _json(send, 429, {"error": f"rate limit {limit} exceeded; retry in {retry} s"},
                                   {"Retry-After": retry})
        return await self.app(scope, receive, send)


class Readiness:
    """``/readyz``: 200 with the serving version once :meth:`answers.answer.Answerer.check` passes for it,
    else 503 with the reason (the data dir's path shown as ``DATA``)."""

    def __init__(self, answerer, metrics: ServiceMetrics):
        self.answerer, self.metrics = answerer, metrics

    def __call__(self):
        from fastapi.responses import JSONResponse

        try:
            info = self.answerer.check()
        except Exception as exc:  # noqa: BLE001 - every failure is a reason not to be ready
            reason = f"{type(exc).__name__}: {exc}".replace(str(self.answerer.data_dir), "DATA")
            return JSONResponse({"ready": False, "reason": reason}, status_code=503)
        self.metrics.serving(info["version"], info["encoder"])
        return JSONResponse({"ready": True, **info})


def service_app(answerer, cfg: ServiceConfig, related=None):
    """The ASGI app of the exposed service over ``answerer`` (see the module's docstring).

    Raises:
        ValueError: a rate in ``cfg`` that ``limits`` cannot parse.
    """
    from fastapi.responses import JSONResponse, Response
    from starlette.requests import ClientDisconnect

    from answers.web import Limits, create_app

    rates = RateLimits(cfg.rate_per_key, cfg.rate_per_address)
    metrics = ServiceMetrics(ROUTES)
    app = create_app(CountingAnswerer(answerer, metrics), Limits(**cfg.web_limits), related)

    async def client_left(request, exc):
        return Response(status_code=499)  # nobody reads it; the access log records 499

    app.add_exception_handler(ClientDisconnect, client_left)
    app.add_api_route("/healthz", lambda: JSONResponse({"ok": True}), methods=["GET"])
    app.add_api_route("/readyz", Readiness(answerer, metrics), methods=["GET"])
    app.add_api_route("/metrics", lambda: Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST),
                      methods=["GET"])
    gated = Gate(app, KeyStore(cfg.data_dir), rates, cfg.require_keys, cfg.page_needs_key)
    return RequestIdMiddleware(gated, on_done=[access_logger, metrics.observe_request])


def start_answerer(data_dir: str):
    """An :class:`~answers.answer.Answerer` over ``data_dir``, checked (its serving version loads), with its
    documents and the related-policies model warming in background threads; returns (answerer, related).

    Raises:
        what :meth:`answers.answer.Answerer.check` raises: the part that cannot be served.
    """
    import threading

    from answers.answer import Answerer
    from answers.related_view import RelatedViews

    answerer = Answerer(data_dir)
    answerer.check()
    threading.Thread(target=answerer.warm, name="warm-documents", daemon=True).start()
    related = RelatedViews(data_dir)
    threading.Thread(target=related.warm, name="warm-related", daemon=True).start()
    return answerer, related


def config_to_env(cfg: ServiceConfig) -> str:
    """``cfg`` as the JSON :func:`app_from_env` reads."""
    return json.dumps(asdict(cfg))


def app_from_env():
    """The service app of one ``--workers`` process: :class:`ServiceConfig` from ``ANSWER_SERVICE_CONFIG``.

    Raises:
        KeyError: the variable is not set; what :func:`start_answerer` raises.
    """
    cfg = ServiceConfig(**json.loads(os.environ[CONFIG_ENV]))
    configure_json_logging()
    answerer, related = start_answerer(cfg.data_dir)
    return service_app(answerer, cfg, related)
