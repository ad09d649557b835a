"""Prometheus metrics of the server, in a registry of its own (several servers can live in one
process, as in tests). Served over HTTP by ``prometheus_client`` on the metrics port.

Names follow Prometheus conventions (base units: seconds; counters end in ``_total``):

- ``lite_inference_requests_total{model,version,outcome}``: requests by outcome
  (``success`` or the error class, e.g. ``invalid_request``)
- ``lite_inference_request_duration_seconds{model,version}``: end to end, inside the server
- ``lite_inference_queue_duration_seconds{model,version}``: waiting for an instance / a batch
- ``lite_inference_compute_duration_seconds{model,version}``: one model execution
- ``lite_inference_batch_size{model,version}``: items per execution
- ``lite_inference_pending_requests{model,version}``: queued or running now
- ``lite_models_loaded``: model versions ready to serve

The per-model numbers are plain counters that the request path bumps (a bisect and a few
integer additions under one lock) and that a collector turns into metric families when
Prometheus scrapes. ``prometheus_client``'s own Histogram takes a lock per bucket and per sum on
every observation, which cost more than the rest of the server's work for a small model.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


class _Histogram:
    """Bucket counts (not cumulative) and a sum; the owner holds the lock."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    def cumulative(self) -> tuple[list[tuple[str, int]], float]:
        buckets, running = [], 0
        for bound, count in zip((*map(str, self.bounds), "+Inf"), self.counts):
            running += count
            buckets.append((bound, running))
        return buckets, self.total


def no_pending() -> int:
    return 0


class ModelMetrics:
    """The counters of one model version."""

    def __init__(self, name: str, version: str) -> None:
        self.labels = (name, version)
        self._lock = threading.Lock()
        self._outcomes: dict[str, int] = {"success": 0}
        self._request = _Histogram(_LATENCY_BUCKETS)
        self._queue = _Histogram(_LATENCY_BUCKETS)
        self._compute = _Histogram(_LATENCY_BUCKETS)
        self._batch = _Histogram(_BATCH_BUCKETS)
        self.pending: Callable[[], int] = no_pending  # set by the served model: its requests in flight

    def success(self, total_s: float, queue_s: float) -> None:
        with self._lock:
            self._outcomes["success"] += 1
            self._request.observe(total_s)
            self._queue.observe(queue_s)

    def failure(self, outcome: str) -> None:
        with self._lock:
            self._outcomes[outcome] = self._outcomes.get(outcome, 0) + 1

    def execution(self, compute_s: float, batch_size: int) -> None:
        with self._lock:
            self._compute.observe(compute_s)
            self._batch.observe(batch_size)

    def snapshot(self) -> tuple[dict[str, int], dict[str, tuple[list[tuple[str, int]], float]]]:
        with self._lock:
            histograms = {"request": self._request.cumulative(), "queue": self._queue.cumulative(),
                          "compute": self._compute.cumulative(), "batch": self._batch.cumulative()}
            return dict(self._outcomes), histograms


class _ModelCollector(Collector):
    _HISTOGRAMS = (
        ("request", "lite_inference_request_duration_seconds", "Request time inside the server."),
        ("queue", "lite_inference_queue_duration_seconds", "Time a request waited before its execution."),
        ("compute", "lite_inference_compute_duration_seconds", "Time of one model execution (a batch)."),
        ("batch", "lite_inference_batch_size", "Items per model execution."),
    )

    def __init__(self, models: dict[tuple[str, str], ModelMetrics]) -> None:
        self._models = models

    def collect(self) -> Iterator:
        requests = CounterMetricFamily("lite_inference_requests", "Inference requests by outcome.",
                                       labels=["model", "version", "outcome"])
        pending = GaugeMetricFamily("lite_inference_pending_requests", "Requests queued or running.",
                                    labels=["model", "version"])
        families = {key: HistogramMetricFamily(name, doc, labels=["model", "version"])
                    for key, name, doc in self._HISTOGRAMS}
        for model in list(self._models.values()):
            outcomes, histograms = model.snapshot()
            for outcome, count in outcomes.items():
                requests.add_metric([*model.labels, outcome], count)
            pending.add_metric(list(model.labels), model.pending())
            for key, (buckets, total) in histograms.items():
                families[key].add_metric(list(model.labels), buckets, total)
        yield requests
        yield from families.values()
        yield pending


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._models: dict[tuple[str, str], ModelMetrics] = {}
        self.registry.register(_ModelCollector(self._models))
        self.models_loaded = Gauge(
            "lite_models_loaded", "Model versions ready to serve.", registry=self.registry,
        )

    def for_model(self, name: str, version: str) -> ModelMetrics:
        """The counters of a model version; a reloaded version keeps counting where it was."""
        return self._models.setdefault((name, version), ModelMetrics(name, version))
