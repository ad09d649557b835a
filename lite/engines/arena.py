"""The numpy engine's activation memory: one arena per thread, planned from a run's lifetimes.

See :class:`BufferPool`. Kernels that take ``allocate`` (lite/ops/registry.py) get their outputs and
temporaries here.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

from lite.ops.registry import SMALL_ARRAY_BYTES
from lite.plan_cache import PlanCache


class BufferPool:
    """Activation memory planned from the lifetimes of a previous run, one plan per thread.

    Kernels that take ``allocate`` (see :mod:`lite.ops.registry`) ask for their outputs and
    temporaries in order, and a run of a model asks for the same sizes in the same order every
    time. The pool records each request of a run: its size, when it was made and when its
    memory was dead again (counted in requests). From that trace it plans one arena: each
    request gets an offset, and requests whose lifetimes overlap never share bytes (the
    classic greedy: largest first, lowest offset that fits). The next runs then serve request
    ``i`` from its planned bytes, so a run touches no fresh pages and holds about the lifetime
    bound of memory instead of whatever the allocator kept.

    Every hand-out is checked, not assumed: a buffer is dead when nothing refers to its owner
    array any more (each view keeps a reference to it, so CPython's reference count tells),
    and planned bytes are handed out only when every request sharing them is dead. Anything
    else (a different input shape, a kernel keeping a buffer, a caller holding an output)
    falls back to ``np.empty`` and the run's trace replaces the plan. Buffers under an output
    of the run leave the pool with the caller.
    """

    # Below this numpy's and the C allocator's own caches are as good.
    MIN_BYTES = SMALL_ARRAY_BYTES
    ALIGNMENT = 64

    def __init__(self) -> None:
        self._local = threading.local()
        # What the reference count of an owner nothing else refers to reads through the very
        # call that checks it (the number differs between Python versions).
        self._idle_references = _references({0: np.empty(1)}, 0)

    def _state(self) -> _PoolState:
        state = getattr(self._local, "state", None)
        if state is None:
            state = self._local.state = _PoolState()
        return state

    def begin_run(self) -> None:
        state = self._state()
        if not state.sizes and state.plan is not None and not state.lingering:
            # The last run asked for no memory (a small model, small inputs): its trace is empty
            # and nothing of it can linger; record into it again (a run a few µs long pays for
            # the containers begin() would build).
            state.recording = True
            return
        # Planned bytes still referenced from an earlier run (kept by a kernel or an observer)
        # must not be handed out again until they are dead.
        lingering = [index for index in state.from_arena
                     if index in state.owners and _references(state.owners, index) > self._idle_references]
        state.lingering = {index: state.owners[index] for index in lingering}
        state.begin()

    def allocate(self, shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
        """An uninitialised C-contiguous array (the ``allocate`` of the kernel contract)."""
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < self.MIN_BYTES or dtype.hasobject:  # most requests of a small model: no state
            return np.empty(shape, dtype)
        state = self._state()
        if not state.recording:
            return np.empty(shape, dtype)
        index = len(state.sizes)
        self._note_dead(state, index)
        owner = self._planned(state, index, nbytes)
        if owner is None:
            owner = np.empty(nbytes, dtype=np.uint8)
        state.owners[index] = owner
        state.sizes.append(nbytes)
        state.dead_at.append(None)
        state.live.add(index)
        return owner[:nbytes].view(dtype).reshape(shape)

    def end_run(self, outputs: list[Any], completed: bool) -> None:
        state = self._state()
        if not state.recording:
            return
        if not state.sizes and state.plan == []:  # asked for nothing, as planned
            state.recording = False
            return
        handed = {id(_owner_of(value)) for value in outputs}
        for index, owner in list(state.owners.items()):
            if id(owner) in handed:
                state.handed.add(index)
                del state.owners[index]
                state.live.discard(index)
                if index in state.from_arena:
                    # The caller now holds planned bytes: plan again, in a new arena.
                    state.missed = True
        self._note_dead(state, len(state.sizes))
        # A run of fewer requests than planned, each served from the plan, keeps it.
        if completed and (state.missed or state.plan is None or len(state.plan) < len(state.sizes)):
            state.replan()
        state.recording = False

    def held_bytes(self) -> int:
        """Bytes of this thread's arena: the planned working memory of the kernels."""
        arena = self._state().arena
        return 0 if arena is None else arena.nbytes

    def _note_dead(self, state: _PoolState, now: int) -> None:
        for index in [i for i in state.live if _references(state.owners, i) <= self._idle_references]:
            state.dead_at[index] = now
            state.live.discard(index)

    def _planned(self, state: _PoolState, index: int, nbytes: int) -> np.ndarray | None:
        if state.plan is None or index >= len(state.plan):
            state.missed = True
            return None
        if state.plan[index] is None:  # planned to leave with the caller: a fresh buffer
            return None
        offset, size = state.plan[index]
        if size < nbytes:
            state.missed = True
            return None
        # _note_dead has just run: every request still in `live` is referenced.
        for other in state.live:
            if other in state.from_arena and _overlap(state.plan[other], offset, size):
                state.missed = True
                return None
        for other in list(state.lingering):
            if _overlap(state.plan[other], offset, size) if other < len(state.plan) else True:
                if _references(state.lingering, other) > self._idle_references:
                    state.missed = True
                    return None
                del state.lingering[other]
        state.from_arena.add(index)
        # frombuffer makes an owner of its own: views of it refer to it, not to the arena.
        return np.frombuffer(state.arena_view[offset : offset + size], np.uint8)


class _PoolState:
    """One thread's plan, arena and the trace of its current run (see :class:`BufferPool`)."""

    def __init__(self) -> None:
        self.plan: list[tuple[int, int] | None] | None = None  # (offset, size) per request
        self.arena: np.ndarray | None = None
        self.arena_view: memoryview | None = None
        # Runs of n requests (the model's path at input shapes like the last ones): the largest
        # size each request asked for, planned for all of them.
        self.largest: PlanCache[list[int]] = PlanCache()
        self.lingering: dict[int, np.ndarray] = {}
        self.recording = False
        self.begin()

    def begin(self) -> None:
        self.sizes: list[int] = []
        self.dead_at: list[int | None] = []
        self.owners: dict[int, np.ndarray] = {}
        self.from_arena: set[int] = set()
        self.live: set[int] = set()
        self.handed: set[int] = set()
        self.missed = False
        self.recording = True

    def replan(self) -> None:
        """Offsets for this run's requests: for each of a few orders, place each request at the
        lowest offset that fits beside the requests already placed whose lifetimes overlap it;
        keep the smallest arena. (No single greedy order is best for every model: the arena can
        come out larger than the peak of live requests, fragmented.)"""
        alignment = BufferPool.ALIGNMENT
        end_of_run = len(self.sizes)
        # Each request gets the largest size it had in runs of as many requests (the model's
        # path at other input shapes), so a server cycling through shapes stops planning (and
        # faulting in) a new arena for each larger one.
        largest = self.largest.get(len(self.sizes))
        sizes = self.sizes if largest is None else [max(size, most) for size, most in zip(self.sizes, largest)]
        self.largest.put(len(sizes), sizes)
        intervals = []  # (aligned size, index = start, stop)
        for index, size in enumerate(sizes):
            if index in self.handed:
                continue
            dead = self.dead_at[index]
            # Still alive at the end (a kernel kept it): it shares with nothing.
            stop = dead if dead is not None else end_of_run + 1
            intervals.append((-(-size // alignment) * alignment, index, stop))
        orders = [
            lambda item: (-item[0], item[1]),  # largest first
            lambda item: (-item[0] * (item[2] - item[1]), item[1]),  # largest area of memory x time
            lambda item: (-(item[2] - item[1]), -item[0]),  # longest-lived first
            lambda item: (item[1], -item[0]),  # in the order of the run
        ]
        best: dict[int, tuple[int, int]] = {}
        best_total = None
        for order in orders:
            offsets = _place(sorted(intervals, key=order))
            total = max((o + n for o, n in offsets.values()), default=0)
            if best_total is None or total < best_total:
                best, best_total = offsets, total
        self.plan = [None] * len(self.sizes)
        self.lingering = {}
        try:
            self.arena = np.empty(max(best_total or 0, 1), dtype=np.uint8)
        except MemoryError:
            # The run itself fitted, one buffer at a time; the arena, all at once, does not. Run
            # without one (every request a fresh buffer) rather than fail after the work is done.
            self.arena = self.arena_view = None
            return
        for index, offset_and_size in best.items():
            self.plan[index] = offset_and_size
        self.arena_view = memoryview(self.arena)


def _place(intervals: list[tuple[int, int, int]]) -> dict[int, tuple[int, int]]:
    """Greedy placement in the given order: each (size, start, stop) at the lowest offset clear of
    every placed interval that overlaps it in time."""
    placed: list[tuple[int, int, int, int]] = []  # offset, size, start, stop
    offsets: dict[int, tuple[int, int]] = {}
    for size, index, stop in intervals:
        busy = sorted((o, o + n) for o, n, start, end in placed if start < stop and index < end)
        offset = 0
        for low, high in busy:
            if offset + size <= low:
                break
            offset = max(offset, high)
        placed.append((offset, size, index, stop))
        offsets[index] = (offset, size)
    return offsets


def _overlap(planned: tuple[int, int] | None, offset: int, size: int) -> bool:
    return planned is not None and planned[0] < offset + size and offset < planned[0] + planned[1]


def _references(owners: dict[int, np.ndarray], key: int) -> int:
    return sys.getrefcount(owners[key])


def _owner_of(value: Any) -> Any:
    """The array that owns ``value``'s memory as far as views go (see ``BufferPool``)."""
    while isinstance(value, np.ndarray) and isinstance(value.base, np.ndarray):
        value = value.base
    return value
