"""Dynamic batching in-process, without a server: requests merged into batches and split back
exactly, padding to declared sizes, queue limits and deadlines, the merge buffers, and cheap
executions moved onto the event loop (serving/batching.py, serving/batch_merge.py)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from serving.batching import DirectScheduler, DynamicBatcher
from serving.config import DynamicBatching
from serving.errors import DeadlineExceededError, ResourceExhaustedError


class Recorder:
    def __init__(self, delay: float = 0.0) -> None:
        self.batches: list[int] = []
        self.delay = delay

    def execute(self, inputs):
        x = inputs["x"]
        self.batches.append(len(x))
        time.sleep(self.delay)
        return {"y": x * 2}

    def record(self, times, requests) -> None:
        pass


def batcher(recorder: Recorder, max_batch: int = 8, delay_us: int = 20000, preferred=(), queue: int = 64,
            pad_to=()):
    executor = ThreadPoolExecutor(1)
    b = DynamicBatcher(recorder.execute, recorder.record, executor, 1, max_batch,
                       DynamicBatching(delay_us, tuple(preferred)), queue, "test", pad_to=tuple(pad_to))
    b.start()
    return b


def test_dynamic_batching_merges_and_splits_back_exactly():
    async def run():
        recorder = Recorder()
        b = batcher(recorder)
        arrays = [np.full((rows, 2), i, np.float32) for i, rows in enumerate([1, 2, 3, 1])]
        results = await asyncio.gather(*(b.submit({"x": a}, len(a), None) for a in arrays))
        await b.close()
        return recorder, arrays, results

    recorder, arrays, results = asyncio.run(run())
    assert recorder.batches == [7]
    for array, result in zip(arrays, results):
        np.testing.assert_array_equal(result.outputs["y"], array * 2)
        assert result.requests == 4


def test_dynamic_batching_respects_max_batch_size_and_preferred_sizes():
    async def run():
        recorder = Recorder()
        b = batcher(recorder, max_batch=4, delay_us=5000, preferred=[2])
        await asyncio.gather(*(b.submit({"x": np.zeros((1, 2))}, 1, None) for _ in range(7)))
        await b.close()
        return recorder.batches

    batches = asyncio.run(run())
    assert sum(batches) == 7 and max(batches) <= 4


def test_padded_batches_reach_the_engine_at_declared_sizes_and_split_back_exactly():
    async def run():
        recorder = Recorder()
        b = batcher(recorder, max_batch=8, delay_us=20000, pad_to=(1, 4, 8))
        arrays = [np.full((rows, 2), i + 1, np.float32) for i, rows in enumerate([1, 2, 2])]
        merged = await asyncio.gather(*(b.submit({"x": a}, len(a), None) for a in arrays))
        alone = await b.submit({"x": np.full((3, 2), 9, np.float32)}, 3, None)
        await b.close()
        return recorder, arrays, merged, alone

    recorder, arrays, merged, alone = asyncio.run(run())
    assert recorder.batches == [8, 4]  # 5 rows padded to 8, then 3 rows to 4
    for array, result in zip(arrays, merged):
        np.testing.assert_array_equal(result.outputs["y"], array * 2)
        assert result.times.batch_size == 5
    np.testing.assert_array_equal(alone.outputs["y"], np.full((3, 2), 18, np.float32))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int64, np.bool_, object])
@pytest.mark.parametrize("feature_shape", [(), (3,), (2, 0), (2, 3)])
def test_merge_stacks_pieces_and_pads_with_the_last_row(dtype, feature_shape):
    from serving.batch_merge import merge

    rng = np.random.default_rng(0)
    pieces = [(rng.standard_normal((rows, *feature_shape)) * 9).astype(dtype) for rows in (1, 3, 2)]
    pieces[1] = np.asfortranarray(pieces[1]) if pieces[1].ndim > 1 else pieces[1][::-1]  # not C-ordered
    expected = np.concatenate(pieces)
    out = merge(pieces, 6, np.empty((8, *feature_shape), dtype))
    np.testing.assert_array_equal(out[:6], expected)
    np.testing.assert_array_equal(out[6:], np.broadcast_to(expected[5], (2, *feature_shape)))


def test_a_merge_executor_merges_the_next_batch_while_one_executes_and_results_stay_exact():
    """Batches merged on their own thread (as for GPU models) into pooled buffers from the given
    allocator: even with one instance, the next batch is merged while the engine runs the current
    one, each request gets exactly its rows back, and buffers are reused across batches."""
    import threading

    started, release = threading.Event(), threading.Event()
    events = []

    def allocate(shape, dtype):  # called while merging a batch that finds no free buffer
        events.append(("merge", threading.current_thread().name.startswith("merge")))
        if len(events) > 2:
            release.set()  # the second batch is being merged while the first executes
        return np.empty(shape, dtype)

    class Slow(Recorder):
        def execute(self, inputs):
            events.append(("execute", len(self.batches)))
            if not self.batches:  # hold the first batch until the second has been merged
                started.set()
                assert release.wait(10)
            return super().execute(inputs)

    async def run():
        recorder = Slow()
        b = DynamicBatcher(recorder.execute, recorder.record, ThreadPoolExecutor(1), 1, 4,  # one instance
                           DynamicBatching(1000, ()), 64, "test", pad_to=(4,),
                           merge_executor=ThreadPoolExecutor(1, thread_name_prefix="merge"), allocate=allocate)
        b.start()
        first = [asyncio.ensure_future(b.submit({"x": np.full((1, 3), i, np.float32)}, 1, None)) for i in range(3)]
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        second = [asyncio.ensure_future(b.submit({"x": np.full((2, 3), 10 + i, np.float32)}, 2, None))
                  for i in range(2)]
        results = await asyncio.gather(*first, *second)
        third = await asyncio.gather(*(b.submit({"x": np.full((1, 3), 20 + i, np.float32)}, 1, None)
                                       for i in range(2)))
        await b.close()
        return recorder, results + third

    recorder, results = asyncio.run(run())
    assert recorder.batches == [4, 4, 4]
    # two buffers allocated, both on the merge thread, the second while the first batch executed;
    # the third batch reused one
    assert events == [("merge", True), ("execute", 0), ("merge", True), ("execute", 1), ("execute", 2)]
    assert [len(r.outputs["y"]) for r in results] == [1, 1, 1, 2, 2, 1, 1]
    for result, value in zip(results, [0, 1, 2, 10, 11, 20, 21]):
        np.testing.assert_array_equal(result.outputs["y"], np.full((len(result.outputs["y"]), 3), value * 2.0))


def test_a_batch_buffer_an_output_aliases_is_not_reused():
    class Echo(Recorder):
        def execute(self, inputs):
            self.batches.append(len(inputs["x"]))
            return {"y": inputs["x"]}  # the input itself, as an identity model may return it

    async def run():
        recorder = Echo()
        b = batcher(recorder, max_batch=4, delay_us=20000, pad_to=(4,))
        first = await asyncio.gather(*(b.submit({"x": np.full((1, 2), i, np.float32)}, 1, None) for i in range(2)))
        second = await asyncio.gather(*(b.submit({"x": np.full((1, 2), 7, np.float32)}, 1, None) for _ in range(3)))
        await b.close()
        return first, second

    first, second = asyncio.run(run())
    assert [float(r.outputs["y"][0, 0]) for r in first] == [0.0, 1.0]  # not overwritten by the second batch
    assert all(float(r.outputs["y"][0, 0]) == 7.0 for r in second)


def test_full_queue_refuses_and_cancelled_requests_free_their_slot():
    async def run():
        recorder = Recorder(delay=0.05)
        b = batcher(recorder, max_batch=1, delay_us=0, queue=2)
        first = asyncio.ensure_future(b.submit({"x": np.zeros((1, 2))}, 1, None))
        await asyncio.sleep(0.01)  # running now
        queued = [asyncio.ensure_future(b.submit({"x": np.zeros((1, 2))}, 1, None)) for _ in range(2)]
        await asyncio.sleep(0)
        with pytest.raises(ResourceExhaustedError, match="queue full"):
            await b.submit({"x": np.zeros((1, 2))}, 1, None)
        queued[0].cancel()
        await asyncio.sleep(0)
        again = asyncio.ensure_future(b.submit({"x": np.zeros((1, 2))}, 1, None))  # fits now
        await asyncio.gather(first, queued[1], again)
        await b.close()
        return recorder.batches

    assert asyncio.run(run()) == [1, 1, 1]  # the cancelled request never ran


def test_expired_requests_are_not_executed():
    async def run():
        recorder = Recorder(delay=0.05)
        b = batcher(recorder, max_batch=1, delay_us=0)
        first = asyncio.ensure_future(b.submit({"x": np.zeros((1, 2))}, 1, None))
        await asyncio.sleep(0.01)
        with pytest.raises(DeadlineExceededError):
            await b.submit({"x": np.zeros((1, 2))}, 1, time.monotonic() + 0.01)
        await first
        await b.close()
        return recorder.batches

    assert asyncio.run(run()) == [1]


def test_cheap_executions_move_onto_the_event_loop_and_slow_ones_never_do():
    """DirectScheduler tries cheap-looking executions on the loop now and then and keeps them
    there when they are cheap on the loop; a slow model stays on the worker threads."""
    import threading

    def run(busy_s: float) -> list[bool]:
        on_loop = []

        def execute(inputs):
            on_loop.append(threading.current_thread() is threading.main_thread())
            end = time.thread_time() + busy_s
            while time.thread_time() < end:
                pass
            return inputs

        async def main():
            with ThreadPoolExecutor(1) as executor:
                scheduler = DirectScheduler(execute, lambda times, n: None, executor, 1, 16, "m", inline_ns=200_000)
                x = {"x": np.zeros(4, np.float32)}
                for _ in range(200):
                    await scheduler.submit(x, 1, None)

        asyncio.run(main())
        return on_loop

    cheap = run(0.0)
    assert not cheap[0] and all(cheap[-50:]), "a 0 µs execution should end up on the loop"
    slow = run(0.003)  # 3 ms: 15x the limit, never even tried on the loop
    assert not any(slow)


def test_a_request_of_large_bytes_elements_runs_on_a_thread_after_small_ones_settled_inline():
    """BYTES inputs were sized at 8 bytes an element (an object array's nbytes), so a request of
    large images passed for one of the small ones that had settled on the loop, and decoding them
    stalled every client of the server."""
    import threading

    on_loop = []

    def execute(inputs):
        on_loop.append(threading.current_thread() is threading.main_thread())
        return inputs

    def images(size: int) -> dict:
        return {"image": np.array([b"\x89PNG" + bytes(size)] * 8, dtype=object)}

    async def main():
        with ThreadPoolExecutor(1) as executor:
            scheduler = DirectScheduler(execute, lambda times, n: None, executor, 1, 16, "m", inline_ns=200_000)
            for _ in range(200):
                await scheduler.submit(images(100), 8, None)
            assert on_loop[-1], "the small requests should have settled on the loop"
            await scheduler.submit(images(1_000_000), 8, None)

    asyncio.run(main())
    assert not on_loop[-1]


def test_pinned_merge_buffers_fall_back_to_ordinary_memory_without_a_gpu(caplog):
    pytest.importorskip("torch", reason="the pinned allocation goes through PyTorch or CuPy")
    import torch

    from serving.batch_merge import pinned_allocator

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the buffers are pinned")
    allocate = pinned_allocator("m:1")
    with caplog.at_level("WARNING", logger="serving.batching"):
        buffers = [allocate((4, 3), np.dtype(np.float16)) for _ in range(2)]
    assert all(b.shape == (4, 3) and b.dtype == np.float16 for b in buffers)
    warnings = [r.getMessage() for r in caplog.records if "ordinary host memory" in r.getMessage()]
    assert len(warnings) == 1 and "m:1" in warnings[0]  # said once, naming the model


def test_merge_buffers_serve_smaller_batches_from_larger_buffers_and_replace_small_ones():
    from serving.batch_merge import MergeBuffers

    made = []

    def allocate(shape, dtype):
        made.append(shape[0])
        return np.empty(shape, dtype)

    pool = MergeBuffers(allocate)
    sample = {"x": np.zeros((1, 3), np.float32)}
    first = pool.get(sample, 8)
    pool.release(first, {})
    again = pool.get(sample, 4)  # a batch of 4 goes into the leading rows of the 8-row buffer
    assert again["x"] is first["x"] and made == [8]
    pool.release(again, {})
    larger = pool.get(sample, 16)  # too small: a new buffer, and the 8-row one is let go
    pool.release(larger, {})
    assert made == [8, 16] and pool.get(sample, 2)["x"] is larger["x"]
    assert len(pool.get(sample, 2)["x"]) == 2 and made == [8, 16, 2]  # the pool held only one


def test_merge_buffers_keep_a_few_row_shapes_per_input():
    """A client that sends a new non-batch size each time must not leave a buffer behind each time."""
    from serving.batch_merge import MergeBuffers

    pool = MergeBuffers()
    for width in range(1, 101):
        pool.release(pool.get({"x": np.zeros((1, width), np.float32)}, 8), {})
    kept = MergeBuffers.SHAPES_PER_INPUT
    assert pool.held_bytes() == sum(8 * width * 4 for width in range(101 - kept, 101))
    recent = {"x": np.zeros((1, 100), np.float32)}
    buffer = pool.get(recent, 8)["x"]
    pool.release({"x": buffer}, {})
    assert pool.get(recent, 8)["x"] is buffer  # the shapes in use are still reused
