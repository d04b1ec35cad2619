"""The answer service (SPEC §9): ``python -m flows.serve --data-dir data [--host 127.0.0.1 --port 8000]``.

Serves :func:`answers.service.app.service_app` (the page and API of :mod:`answers.web` behind API keys, rate
limits, request ids, JSON access logs, ``/healthz``, ``/readyz``, ``/metrics``) with uvicorn over the data
dir's serving index (``index/CURRENT`` read per request; verified whole before serving,
:func:`retrieval.verify.verify_version`; nothing written to the data dir but
``service/keys.json`` by ``flows.keys``). A missing scorer or index, or a bad flag, is one ``error:`` line and
exit 2 before serving. ``--workers N`` runs N uvicorn processes serving the same version (metrics summed over
them through prometheus-client's multiprocess mode in a temporary folder). uvicorn is bounded by
:func:`uvicorn_settings` (:class:`answers.service.conn_guard.ConnectionBounds`: a deadline on each request's
head, connections bounded apart from requests in flight; keep-alive seconds, header bytes) and the app by
:class:`answers.web.Limits`; errors while serving are logged (JSON lines on stderr), never shown on the page.
"""
from __future__ import annotations

import argparse
import ipaddress
import os
import sys

from answers.service.conn_guard import ConnectionBounds, guarded_protocol

# uvicorn's own bounds in front of answers.web.Limits: the guarded protocol (request-head deadline, open
# connections, requests in flight; uvicorn's limit_concurrency, which counts idle sockets as requests, off),
# seconds an idle keep-alive connection is held, bytes of a request line and headers not yet complete
UVICORN_LIMITS = {"http": guarded_protocol(ConnectionBounds()), "limit_concurrency": None, "timeout_keep_alive": 5,
                  "h11_max_incomplete_event_size": 16 * 1024}


def uvicorn_settings(bounds: ConnectionBounds = ConnectionBounds()) -> dict:
    """Keyword arguments of ``uvicorn.Config`` for the service under ``bounds`` (see :data:`UVICORN_LIMITS`)."""
    return {**UVICORN_LIMITS, "http": guarded_protocol(bounds)}


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _args(argv):
    ap = argparse.ArgumentParser(prog="python -m flows.serve")
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (default 1)")
    ap.add_argument("--require-keys", action="store_true",
                    help="ask /api/*, /related and /metrics for an API key even before one is created")
    ap.add_argument("--page", choices=("open", "keys"), default=None,
                    help="the HTML page open or behind the keys (default: open on a loopback host, else keys)")
    ap.add_argument("--rate", default="60/minute", help="per API key, a limits string ('' for none)")
    ap.add_argument("--rate-address", default="300/minute", help="per client address ('' for none)")
    ap.add_argument("--header-timeout", type=float, default=ConnectionBounds.header_timeout_s,
                    help="seconds a connection has to send its request line and headers")
    ap.add_argument("--max-connections", type=int, default=ConnectionBounds.max_connections)
    ap.add_argument("--max-requests", type=int, default=ConnectionBounds.max_requests,
                    help="requests in flight at once per worker (more: 503)")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    from answers.service.app import ServiceConfig, config_to_env, service_app, start_answerer
    from answers.service.ratelimit import RateLimits
    from answers.service.requestid import configure_json_logging

    try:
        if args.workers < 1:
            raise ValueError(f"--workers must be at least 1, got {args.workers}")
        bounds = ConnectionBounds(args.header_timeout, args.max_connections, args.max_requests)
        RateLimits(args.rate, args.rate_address)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    cfg = ServiceConfig(str(args.data_dir), args.require_keys,
                        (args.page or ("open" if _loopback(args.host) else "keys")) == "keys",
                        args.rate, args.rate_address)
    import uvicorn
    from transformers.utils import logging as hf_logging

    from answers.scorer import ScorerMissingError
    from retrieval.bundle import IndexMissingError
    from retrieval.parts import PartError

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    if args.workers > 1:
        _multiprocess_metrics()
    from retrieval.verify import serving_problem

    problem = serving_problem(os.path.join(args.data_dir, "index"))  # every file, as it would be loaded
    if problem is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        # the serving version, its encoder, texts and scorer, before the first request (each worker again)
        answerer, related = start_answerer(args.data_dir)
    except (ScorerMissingError, IndexMissingError, PartError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    configure_json_logging()  # only once the service will run: a refused start leaves logging as it was
    common = dict(host=args.host, port=args.port, log_level="warning", log_config=None, access_log=False,
                  server_header=False, **uvicorn_settings(bounds))
    if args.workers == 1:
        uvicorn.run(service_app(answerer, cfg, related), **common)
    else:
        del answerer, related  # each worker loads its own
        from answers.service.app import CONFIG_ENV

        os.environ[CONFIG_ENV] = config_to_env(cfg)
        uvicorn.run("answers.service.app:app_from_env", factory=True, workers=args.workers, **common)
    return 0


def _multiprocess_metrics() -> None:
    """prometheus-client multiprocess mode for the workers: a fresh temporary folder, removed at exit."""
    import atexit
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="answer-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = folder
    atexit.register(shutil.rmtree, folder, True)


if __name__ == "__main__":
    sys.exit(main())
