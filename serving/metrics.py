"""Prometheus metrics of the server, in a registry of its own (several servers can live in one
process, as in tests). Served over HTTP by ``prometheus_client`` on the metrics port.

Names follow Prometheus conventions (base units: seconds; counters end in ``_total``):

- ``lite_inference_requests_total{model,version,outcome}``: requests by outcome
  (``success`` or the error class, e.g. ``invalid_argument``)
- ``lite_inference_request_duration_seconds{model,version}``: end to end, inside the server
- ``lite_inference_queue_duration_seconds{model,version}``: waiting for an instance / a batch
- ``lite_inference_compute_duration_seconds{model,version}``: one model execution
- ``lite_inference_batch_size{model,version}``: items per execution
- ``lite_inference_pending_requests{model,version}``: queued or running now
- ``lite_models_loaded``: model versions ready to serve
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


@dataclass
class ModelMetrics:
    """The children of every metric for one model version, resolved once (labels are slow)."""

    success: Counter
    request_duration: Histogram
    queue_duration: Histogram
    compute_duration: Histogram
    batch_size: Histogram
    pending: Gauge
    _parent: Metrics
    _labels: tuple[str, str]

    def failure(self, outcome: str) -> None:
        self._parent.requests.labels(*self._labels, outcome).inc()


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "lite_inference_requests", "Inference requests by outcome.",
            ["model", "version", "outcome"], registry=self.registry,
        )
        self.request_duration = Histogram(
            "lite_inference_request_duration_seconds", "Request time inside the server.",
            ["model", "version"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.queue_duration = Histogram(
            "lite_inference_queue_duration_seconds", "Time a request waited before its execution.",
            ["model", "version"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.compute_duration = Histogram(
            "lite_inference_compute_duration_seconds", "Time of one model execution (a batch).",
            ["model", "version"], buckets=_LATENCY_BUCKETS, registry=self.registry,
        )
        self.batch_size = Histogram(
            "lite_inference_batch_size", "Items per model execution.",
            ["model", "version"], buckets=_BATCH_BUCKETS, registry=self.registry,
        )
        self.pending = Gauge(
            "lite_inference_pending_requests", "Requests queued or running.",
            ["model", "version"], registry=self.registry,
        )
        self.models_loaded = Gauge(
            "lite_models_loaded", "Model versions ready to serve.", registry=self.registry,
        )

    def for_model(self, name: str, version: str) -> ModelMetrics:
        labels = (name, version)
        return ModelMetrics(
            success=self.requests.labels(name, version, "success"),
            request_duration=self.request_duration.labels(*labels),
            queue_duration=self.queue_duration.labels(*labels),
            compute_duration=self.compute_duration.labels(*labels),
            batch_size=self.batch_size.labels(*labels),
            pending=self.pending.labels(*labels),
            _parent=self,
            _labels=labels,
        )
