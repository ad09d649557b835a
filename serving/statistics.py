"""Per model-version statistics in Triton's shape (``ModelStatistics`` in the protocol).

Durations are nanoseconds. ``success``/``fail``/``queue``/``compute_*`` count requests (every
request of a batch is charged the batch's compute time, as Triton does); ``batch_stats`` count
executions per batch size; ``inference_count`` counts batch items, ``execution_count`` model runs.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass
class Duration:
    count: int = 0
    ns: int = 0

    def add(self, ns: int, count: int = 1) -> None:
        self.count += count
        self.ns += ns


@dataclass
class BatchDurations:
    compute_input: Duration = field(default_factory=Duration)
    compute_infer: Duration = field(default_factory=Duration)
    compute_output: Duration = field(default_factory=Duration)


@dataclass
class StatisticsSnapshot:
    name: str
    version: str
    last_inference_ms: int
    inference_count: int
    execution_count: int
    success: Duration
    fail: Duration
    queue: Duration
    compute_input: Duration
    compute_infer: Duration
    compute_output: Duration
    batches: dict[int, BatchDurations]


class ExecutionTimes(NamedTuple):
    """One model execution (a batch): where its time went. (A named tuple: one is made per
    execution, on the request path, where a frozen dataclass costs several times as much.)"""

    batch_size: int
    input_ns: int
    infer_ns: int
    output_ns: int


class ModelStatistics:
    def __init__(self, name: str, version: str) -> None:
        self.name = name
        self.version = version
        self._lock = threading.Lock()
        self._last_inference_ms = 0
        self._inference_count = 0
        self._execution_count = 0
        self._success = Duration()
        self._fail = Duration()
        self._queue = Duration()
        self._compute_input = Duration()
        self._compute_infer = Duration()
        self._compute_output = Duration()
        self._batches: dict[int, BatchDurations] = {}

    def record_execution(self, times: ExecutionTimes, requests: int) -> None:
        with self._lock:
            self._execution_count += 1
            self._inference_count += times.batch_size
            self._last_inference_ms = int(time.time() * 1000)
            self._compute_input.add(times.input_ns * requests, requests)
            self._compute_infer.add(times.infer_ns * requests, requests)
            self._compute_output.add(times.output_ns * requests, requests)
            batch = self._batches.get(times.batch_size)
            if batch is None:  # (not setdefault: it would build a BatchDurations every call)
                batch = self._batches[times.batch_size] = BatchDurations()
            batch.compute_input.add(times.input_ns)
            batch.compute_infer.add(times.infer_ns)
            batch.compute_output.add(times.output_ns)

    def record_request(self, ok: bool, total_ns: int, queue_ns: int = 0) -> None:
        with self._lock:
            if ok:
                self._success.add(total_ns)
                self._queue.add(queue_ns)
            else:
                self._fail.add(total_ns)

    def snapshot(self) -> StatisticsSnapshot:
        with self._lock:
            return StatisticsSnapshot(
                name=self.name,
                version=self.version,
                last_inference_ms=self._last_inference_ms,
                inference_count=self._inference_count,
                execution_count=self._execution_count,
                success=Duration(self._success.count, self._success.ns),
                fail=Duration(self._fail.count, self._fail.ns),
                queue=Duration(self._queue.count, self._queue.ns),
                compute_input=Duration(self._compute_input.count, self._compute_input.ns),
                compute_infer=Duration(self._compute_infer.count, self._compute_infer.ns),
                compute_output=Duration(self._compute_output.count, self._compute_output.ns),
                batches={
                    size: BatchDurations(
                        Duration(b.compute_input.count, b.compute_input.ns),
                        Duration(b.compute_infer.count, b.compute_infer.ns),
                        Duration(b.compute_output.count, b.compute_output.ns),
                    )
                    for size, b in sorted(self._batches.items())
                },
            )
