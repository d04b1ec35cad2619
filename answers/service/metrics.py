"""Prometheus metrics of the answer service (SPEC §9), with ``prometheus-client``.

- ``answer_service_request_seconds`` (histogram, ``route``): seconds from request to response end;
- ``answer_service_requests_total`` (counter, ``route``, ``status``);
- ``answer_service_answers_total`` (counter, ``outcome``: ``found``, ``refused`` (best score under the
  threshold), ``no_hits``);
- ``answer_service_version_info`` (gauge, ``version``, ``encoder``): 1 for the version answered last.

``route`` is the path when it is one of the app's routes, else ``other`` (no label per unknown path). With
``PROMETHEUS_MULTIPROC_DIR`` set before ``prometheus_client`` is imported (``flows.serve --workers N`` does),
every worker writes its values there and ``/metrics`` sums them over the workers (client multiprocess mode).
"""
from __future__ import annotations

import os
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServiceMetrics:
    """The service's metrics in their own registry; ``routes``: the paths that are labels of their own."""

    def __init__(self, routes):
        self.routes = frozenset(routes)
        self.registry = CollectorRegistry()
        r = self.registry
        self.seconds = Histogram("answer_service_request_seconds", "Seconds to answer a request", ["route"],
                                 buckets=BUCKETS, registry=r)
        self.requests = Counter("answer_service_requests", "Requests answered", ["route", "status"], registry=r)
        self.answers = Counter("answer_service_answers", "Questions answered, by outcome", ["outcome"], registry=r)
        self.version = Gauge("answer_service_version_info", "The index version answered last (1)",
                             ["version", "encoder"], registry=r, multiprocess_mode="mostrecent")
        self._lock = threading.Lock()
        self._last: tuple[str, str] | None = None

    def route(self, path: str) -> str:
        return path if path in self.routes else "other"

    def observe_request(self, record: dict) -> None:
        """An ``on_done`` callback of :class:`~answers.service.requestid.RequestIdMiddleware`."""
        route = self.route(record.get("path") or "")
        self.seconds.labels(route).observe(record["seconds"])
        self.requests.labels(route, str(record["status"])).inc()

    def observe_answer(self, result: dict) -> None:
        """Count one result of :meth:`answers.answer.Answerer.answer` and mark its version served."""
        outcome = "found" if result.get("found") else ("refused" if result.get("answers") else "no_hits")
        self.answers.labels(outcome).inc()
        self.serving(str(result.get("version")), str(result.get("encoder")))

    def serving(self, version: str, encoder: str) -> None:
        """Set the version gauge: 1 for (version, encoder), 0 for the one before."""
        with self._lock:
            if self._last != (version, encoder):
                if self._last is not None:
                    self.version.labels(*self._last).set(0)
                self.version.labels(version, encoder).set(1)
                self._last = (version, encoder)

    def exposition(self) -> bytes:
        """The text format of every metric (summed over the workers in multiprocess mode)."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            from prometheus_client import multiprocess

            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)
            return generate_latest(reg)
        return generate_latest(self.registry)


class CountingAnswerer:
    """An answerer whose :meth:`answer` results are counted by ``metrics``; everything else is the inner
    answerer's (``cfg``, ``data_dir``, ``backend``, ``check``)."""

    def __init__(self, inner, metrics: ServiceMetrics):
        self.inner, self.metrics = inner, metrics

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def answer(self, question, k: int = 3, **scope) -> dict:
        """The inner answerer's answer (``scope``: its ``filters`` / ``infer_scope``), counted."""
        r = self.inner.answer(question, k, **scope)
        self.metrics.observe_answer(r)
        return r
