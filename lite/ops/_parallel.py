"""Large matrix products split by the numpy engine itself across the CPU's cores.

While the engine runs on a busy machine, BLAS runs on one thread (:mod:`lite.ops._blas`:
OpenBLAS's static split stalls when another process takes a core). Products large enough to pay for it are cut here into
blocks of output rows, a few more blocks than threads, and every thread (the caller included)
claims the next block when it finishes one. A thread that loses its core meanwhile completes
fewer blocks instead of holding up an equal share, and waiting threads sleep instead of spinning.
numpy releases the GIL inside ``matmul``, so the blocks do run in parallel.
"""

from __future__ import annotations

import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from lite.ops._blas import ONE_BLAS_THREAD

# A block below this many multiply-adds costs about as much to hand to another thread as to compute.
_BLOCK_MULTIPLY_ADDS = 1 << 22
# Products below this are never split (kernels may skip preparing for matmul() below it). Waking
# a pool thread on a busy machine costs tens of microseconds: split 2.4M multiply-add products
# (a 64x64 model's 3x3 convolutions, 60-70 us on one thread) took twice as long, 29M ones
# 15-40% longer while both cores were taken; the split pays where one core is free and the
# product runs for milliseconds (224x224 convolutions).
SPLIT_MULTIPLY_ADDS = 1 << 24
_BLOCKS_PER_THREAD = 3

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def threads() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _after_fork_in_child() -> None:
    """A forked child has none of the parent's threads: a pool it inherited would take work and
    never run it. The child makes its own on first use."""
    global _lock, _pool
    _lock, _pool = threading.Lock(), None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _executor(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lite-matmul")
        return _pool


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b, out=out)`` for a 2-D ``a`` (M, K) and ``b`` (K, N), split between
    threads when the product is large (see the module docstring): into blocks of rows, or of
    columns when there are more columns. A convolution's (64, 576) x (576, 12544) product cut into
    10-row blocks ran slower than on one thread (14.8 against 11.8 ms); cut into column blocks it
    runs as fast as OpenBLAS's own two threads (6.0 ms)."""
    rows, depth = a.shape
    columns = b.shape[1]
    work = rows * depth * columns
    if not ONE_BLAS_THREAD.split:  # an idle machine (or outside a run): BLAS's own threads
        return np.matmul(a, b, out=out)
    if work < SPLIT_MULTIPLY_ADDS:  # most products of a small model: no need to ask for the cores
        return np.matmul(a, b, out=out)
    workers = threads()
    span = max(rows, columns)
    blocks = min(workers * _BLOCKS_PER_THREAD, work // _BLOCK_MULTIPLY_ADDS, span // 4)
    if workers < 2 or blocks < 2:
        return np.matmul(a, b, out=out)
    edges = [span * index // blocks for index in range(blocks + 1)]
    by_rows = rows >= columns
    claims = itertools.count()
    remaining = [blocks]
    finished = threading.Event()
    errors: list[BaseException] = []
    counting = threading.Lock()

    def work() -> None:
        while (index := next(claims)) < blocks:
            first, stop = edges[index], edges[index + 1]
            try:
                if by_rows:
                    np.matmul(a[first:stop], b, out=out[first:stop])
                else:
                    np.matmul(a, b[:, first:stop], out=out[:, first:stop])
            except BaseException as err:  # noqa: BLE001 - re-raised in the caller below
                errors.append(err)
            with counting:
                remaining[0] -= 1
                if remaining[0] == 0:
                    finished.set()

    pool = _executor(workers - 1)
    for _ in range(workers - 1):
        pool.submit(work)
    work()
    # Only blocks already claimed are waited for: a helper that starts late finds none left.
    finished.wait()
    if errors:
        raise errors[0]
    return out
