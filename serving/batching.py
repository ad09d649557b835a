"""Scheduling requests onto model instances: directly, or merged by a dynamic batcher.

Both schedulers run on the asyncio event loop and hand the work to a thread pool whose size is
the model's instance count, so the loop never blocks on inference.

Dynamic batching (Triton ``dynamic_batching``): requests wait in a bounded FIFO queue. When an
instance is free, the batcher takes the oldest request and keeps adding compatible ones (same
inputs with the same non-batch dimensions) until the batch holds ``max_batch_size`` items or the
oldest request has waited ``max_queue_delay_us``; if preferred batch sizes are set and the
queue cannot fill ``max_batch_size`` in time, it takes the largest preferred size it can.
While every instance is busy the queue simply grows, so batches grow with load. The batch's
outputs are split back along the first dimension, exactly per request.

Given a ``merge_executor`` (the server gives one to GPU models), merging a batch runs there, so
that the next batch is merged while the engine runs the current one (at least two batches are
then in flight, whatever the instance count). Merge buffers come from a shared pool, in pinned
host memory for a GPU, so that the engine's copy to the device is a DMA at full bus speed
rather than a staged copy.

A request past its deadline is answered DEADLINE_EXCEEDED instead of being executed; a
cancelled request (the client went away) is skipped and frees its queue slot.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np

from .batch_merge import Allocate, MergeBuffers, Merged, merge
from .config import DynamicBatching
from .errors import DeadlineExceededError, InferenceFailedError, ResourceExhaustedError
from .limits import wire_bytes
from .statistics import ExecutionTimes

log = logging.getLogger("serving.batching")

Tensors = dict[str, np.ndarray]
Execute = Callable[[Tensors], Tensors]
Record = Callable[[ExecutionTimes, int], None]  # once per execution: times, requests in it


class Scheduled(NamedTuple):
    outputs: Tensors
    queue_ns: int
    times: ExecutionTimes
    requests: int  # requests that shared the execution
    cpu_ns: int = 0  # CPU time of the executing thread (excludes waits for the GIL or the CPU); -1: not read


# Where DirectScheduler._inline sends an execution: a thread, or the loop (known cheap, or to learn).
_THREAD, _SETTLED, _PROBE = 0, 1, 2


class DirectScheduler:
    """One request per execution; at most ``instances`` run at once, the rest wait in line.

    A model whose executions are shorter than ``inline_ns`` runs on the event loop itself:
    handing a 10 µs execution to a thread and back costs several times the execution (two thread
    switches and a loop wake-up), and the loop is then held no longer than it is by parsing one
    request. The decision rests on what executions cost *on the loop*: measured on a worker
    thread the same execution reads longer and varies more on a small, busy machine (the thread
    wakes on a cold core), so a model that would run inline may never qualify. Executions that look
    cheap enough on threads (under ``_PROBE_FACTOR`` × ``inline_ns``) are tried on the loop now and
    then (every ``_PROBE_EVERY``-th request, small inputs only), and a moving average of those
    inline times decides. A request larger than any that ran inline that fast still goes to a
    thread, so one huge input cannot stall the loop. ``inline_ns=0`` turns this off. Once inline,
    an execution reads its CPU time (two system calls) every ``_SAMPLE_EVERY``-th run, which keeps
    the average current at a fraction of the cost.
    """

    _PROBE_EVERY = 32
    _PROBE_FACTOR = 10
    _PROBE_MAX_BYTES = 64 * 1024
    _SAMPLE_EVERY = 8

    def __init__(self, execute: Execute, record: Record, executor: ThreadPoolExecutor, instances: int,
                 max_queue_size: int, name: str, inline_ns: int = 0) -> None:
        self._execute = execute
        self._record = record
        self._executor = executor
        self._limit = instances + max_queue_size
        self._pending = 0
        self._name = name
        self._inline_ns = inline_ns
        self._thread_average_ns = float("inf")  # CPU per execution on a worker thread
        self._inline_average_ns = float("inf")  # CPU per execution on the loop (probes and inline runs)
        self._inline_bytes = -1  # the largest input that executed on the loop within inline_ns
        self._count = 0
        self._inline_runs = 0

    def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def submit(self, inputs: Tensors, rows: int, deadline: float | None) -> Scheduled:
        if self._pending >= self._limit:
            raise ResourceExhaustedError(
                f"model {self._name}: queue full ({self._limit} requests waiting or running); retry later"
            )
        self._pending += 1
        try:
            enqueued = time.perf_counter_ns()
            # BYTES inputs by their payload: an object array's nbytes is 8 per element whatever the
            # element holds, so a request of large images would pass for one of small ones and have its
            # decoding run on the loop.
            size = sum(wire_bytes(array) for array in inputs.values())
            inline = self._inline(size)
            if inline != _THREAD:
                # Settled inline runs read their CPU time (two system calls) every _SAMPLE_EVERY-th
                # time only; probes always do.
                self._inline_runs += 1
                measure = inline == _PROBE or self._inline_runs % self._SAMPLE_EVERY == 0
                scheduled = self._run(inputs, rows, enqueued, deadline, measure)
            else:
                loop = asyncio.get_running_loop()
                scheduled = await loop.run_in_executor(self._executor, self._run, inputs, rows, enqueued, deadline)
            if scheduled.cpu_ns >= 0:
                self._learn(scheduled.cpu_ns, size, inline != _THREAD)
            self._record(scheduled.times, 1)
            return scheduled
        finally:
            self._pending -= 1

    def _inline(self, size: int) -> int:
        """_THREAD, _SETTLED (inline, known to be cheap) or _PROBE (inline, to learn its cost)."""
        if not self._inline_ns:
            return _THREAD
        if self._inline_average_ns < self._inline_ns and size <= self._inline_bytes:
            return _SETTLED
        self._count += 1
        if (self._count % self._PROBE_EVERY == 0 and size <= max(self._inline_bytes, self._PROBE_MAX_BYTES)
                and self._thread_average_ns < self._PROBE_FACTOR * self._inline_ns):
            return _PROBE
        return _THREAD

    def _learn(self, cpu_ns: int, size: int, inline: bool) -> None:
        if inline:
            average = self._inline_average_ns
            self._inline_average_ns = cpu_ns if average == float("inf") else 0.8 * average + 0.2 * cpu_ns
            if cpu_ns < self._inline_ns:
                self._inline_bytes = max(self._inline_bytes, size)
        else:
            average = self._thread_average_ns
            self._thread_average_ns = cpu_ns if average == float("inf") else 0.9 * average + 0.1 * cpu_ns

    def _run(self, inputs: Tensors, rows: int, enqueued: int, deadline: float | None,
             measure_cpu: bool = True) -> Scheduled:
        start = time.perf_counter_ns()
        if deadline is not None and time.monotonic() > deadline:
            raise DeadlineExceededError(f"model {self._name}: deadline passed while the request was queued")
        if measure_cpu:
            cpu_start = time.thread_time_ns()
            outputs = self._execute(inputs)
            cpu = time.thread_time_ns() - cpu_start
        else:
            outputs = self._execute(inputs)
            cpu = -1
        end = time.perf_counter_ns()
        return Scheduled(outputs, start - enqueued, ExecutionTimes(rows, 0, end - start, 0), 1, cpu)


class _Pending:
    __slots__ = ("deadline", "enqueued", "future", "inputs", "rows", "signature")

    def __init__(self, inputs: Tensors, rows: int, future: asyncio.Future, deadline: float | None) -> None:
        self.inputs = inputs
        self.rows = rows
        self.signature = tuple((name, array.dtype, array.shape[1:]) for name, array in inputs.items())
        self.future = future
        self.enqueued = time.perf_counter_ns()
        self.deadline = deadline


class DynamicBatcher:
    def __init__(self, execute: Execute, record: Record, executor: ThreadPoolExecutor, instances: int,
                 max_batch_size: int, batching: DynamicBatching, max_queue_size: int, name: str,
                 pad_to: tuple[int, ...] = (), merge_executor: ThreadPoolExecutor | None = None,
                 allocate: Allocate | None = None) -> None:
        """``pad_to``: sizes (ascending, the largest ``max_batch_size``) each merged batch is padded
        up to. ``merge_executor``: where batches are merged (default: on the executing thread,
        before the execution). ``allocate(shape, dtype)``: makes merge buffers (default np.empty)."""
        self._execute = execute
        self._record = record
        self._executor = executor
        # Batches in flight: one per instance; with a merge executor at least two, so that a
        # single-instance GPU model still merges its next batch while one runs.
        self._in_flight = max(instances, 2) if merge_executor is not None else instances
        self._max_batch_size = max_batch_size
        self._delay_ns = batching.max_queue_delay_us * 1000
        self._preferred = batching.preferred_batch_sizes
        self._pad_to = pad_to
        self._merge_executor = merge_executor
        self._buffers = MergeBuffers(allocate)
        self._max_queue_size = max_queue_size
        self._name = name
        self._queue: deque[_Pending] = deque()
        self._wakeup: asyncio.Event | None = None
        self._slots: asyncio.Semaphore | None = None
        self._task: asyncio.Task | None = None
        self._running: set[asyncio.Task] = set()

    def start(self) -> None:
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(self._in_flight)
        self._task = asyncio.get_running_loop().create_task(self._loop(), name=f"batcher {self._name}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await asyncio.gather(*self._running, return_exceptions=True)

    def preallocate(self, sample: Tensors) -> None:
        """Make the merge buffers now, of the largest padded size (a smaller batch is merged into
        a leading part of one), as many as batches can be in flight (blocking: pinned memory
        takes a while to allocate, and the allocator's first use imports PyTorch or CuPy; better
        at load than in the first requests)."""
        if self._pad_to:
            buffers = [self._buffers.get(sample, self._pad_to[-1]) for _ in range(self._in_flight)]
            for each in buffers:
                self._buffers.release(each, {})

    async def submit(self, inputs: Tensors, rows: int, deadline: float | None) -> Scheduled:
        if len(self._queue) >= self._max_queue_size:
            self._queue = deque(p for p in self._queue if not p.future.done())
            if len(self._queue) >= self._max_queue_size:
                raise ResourceExhaustedError(
                    f"model {self._name}: queue full ({self._max_queue_size} requests waiting); retry later"
                )
        pending = _Pending(inputs, rows, asyncio.get_running_loop().create_future(), deadline)
        self._queue.append(pending)
        self._wakeup.set()
        return await pending.future

    async def _loop(self) -> None:
        while True:
            await self._slots.acquire()
            batch = await self._collect()
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def _collect(self) -> list[_Pending]:
        """Wait for work, then for a full batch or the oldest request's delay, then take a batch."""
        while True:
            while not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
            dispatch_at = self._queue[0].enqueued + self._delay_ns
            while self._live_rows() < self._max_batch_size:
                remaining = (dispatch_at - time.perf_counter_ns()) / 1e9
                if remaining <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except asyncio.TimeoutError:
                    break
            batch = self._take()
            if batch:
                return batch

    def _live_rows(self) -> int:
        return sum(p.rows for p in self._queue if not p.future.done())

    def _take(self) -> list[_Pending]:
        limit = self._max_batch_size
        queued = self._live_rows()
        if self._preferred and queued < limit:
            fitting = [size for size in self._preferred if size <= queued]
            if fitting:
                limit = fitting[-1]
        batch: list[_Pending] = []
        passed: list[_Pending] = []  # requests of other shapes, left queued in their order
        rows = 0
        now = time.monotonic()
        while self._queue:
            pending = self._queue.popleft()
            if pending.future.done():  # cancelled by the client
                continue
            if pending.deadline is not None and now > pending.deadline:
                pending.future.set_exception(
                    DeadlineExceededError(f"model {self._name}: deadline passed while the request was queued")
                )
                continue
            if batch and pending.signature != batch[0].signature:
                passed.append(pending)  # merged with the oldest request's shape: a later batch takes it
                continue
            if batch and rows + pending.rows > limit:
                self._queue.appendleft(pending)
                break
            batch.append(pending)
            rows += pending.rows
        self._queue.extendleft(reversed(passed))
        return batch

    async def _run(self, batch: list[_Pending]) -> None:
        try:
            await self._settle(batch)
        except Exception as err:
            if len(batch) > 1:
                await self._split(batch)
            elif not batch[0].future.done():
                batch[0].future.set_exception(err)
        finally:
            self._slots.release()

    async def _settle(self, batch: list[_Pending]) -> None:
        """Run ``batch`` merged and give each request its rows; raise the execution's error."""
        start = time.perf_counter_ns()
        loop = asyncio.get_running_loop()
        parts = [p.inputs for p in batch]
        rows = [p.rows for p in batch]
        if self._merge_executor is None:
            outputs, times = await loop.run_in_executor(self._executor, self._execute_batch, parts, rows)
        else:
            merged = await loop.run_in_executor(self._merge_executor, self._merge_batch, parts, rows)
            outputs, times = await loop.run_in_executor(self._executor, self._execute_merged, merged)
        self._record(times, len(batch))
        for pending, result in zip(batch, outputs):
            if not pending.future.done():
                pending.future.set_result(Scheduled(result, start - pending.enqueued, times, len(batch)))

    async def _split(self, batch: list[_Pending]) -> None:
        """Run the halves of a batch that failed apart, and so on down to single requests.

        One request the model rejects (a token id past its embedding table) would otherwise fail
        every request merged with it, and show them its error. Halving finds one bad request of
        n in about 2 log2(n) runs, so a client sending bad requests costs the others little.
        """
        middle = len(batch) // 2
        for part in (batch[:middle], batch[middle:]):
            live = [pending for pending in part if not pending.future.done()]
            if not live:
                continue
            try:
                await self._settle(live)
            except Exception as err:
                if len(live) == 1:
                    live[0].future.set_exception(err)
                else:
                    await self._split(live)

    def _execute_batch(self, parts: list[Tensors], rows: list[int]) -> tuple[list[Tensors], ExecutionTimes]:
        return self._execute_merged(self._merge_batch(parts, rows))

    def _merge_batch(self, parts: list[Tensors], rows: list[int]) -> Merged:
        t0 = time.perf_counter_ns()
        total = sum(rows)
        size = next((s for s in self._pad_to if s >= total), total)
        buffers = None
        if len(parts) == 1 and size == total:
            merged = parts[0]
        else:
            buffers = self._buffers.get(parts[0], size)
            merged = {name: merge([p[name] for p in parts], total, buffers[name][:size]) for name in parts[0]}
        return Merged(merged, buffers, rows, size, time.perf_counter_ns() - t0)

    def _execute_merged(self, batch: Merged) -> tuple[list[Tensors], ExecutionTimes]:
        t1 = time.perf_counter_ns()
        try:
            outputs = self._execute(batch.inputs)
        except BaseException:
            if batch.buffers is not None:
                self._buffers.release(batch.buffers, {})
            raise
        t2 = time.perf_counter_ns()
        size, rows = batch.size, batch.rows
        total = sum(rows)
        if batch.buffers is not None:
            self._buffers.release(batch.buffers, outputs)
        for name, array in outputs.items():
            if array.ndim == 0 or array.shape[0] != size:
                raise InferenceFailedError(
                    f"model {self._name}: output {name!r} has shape {list(array.shape)}, expected the "
                    f"batch of {size} first; the model cannot be batched (set max_batch_size 0)"
                )
        if size > total:
            outputs = {name: array[:total] for name, array in outputs.items()}
        if len(rows) == 1:
            split = [outputs]
        else:
            offsets = np.cumsum(rows)[:-1]
            per_output = {name: np.split(array, offsets) for name, array in outputs.items()}
            split = [{name: pieces[i] for name, pieces in per_output.items()} for i in range(len(rows))]
        t3 = time.perf_counter_ns()
        return split, ExecutionTimes(total, batch.merge_ns, t2 - t1, t3 - t2)
