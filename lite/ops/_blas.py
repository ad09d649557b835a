"""The BLAS library's thread count, held at one while the numpy engine runs.

OpenBLAS cuts every GEMM into one equal share per thread and waits for the last share; its idle
threads spin. When another process takes one of the cores, the share of the thread that lost it
arrives a scheduler time slice late, and the spinning threads take time from the ones working:
a 64x64 ResNet ran 12 ms on one BLAS thread and 250 ms on two beside one busy process. Kernels
therefore call BLAS on one thread and the engine splits large products itself
(:mod:`lite.ops._parallel`), in blocks claimed by whichever thread is free.

On an idle machine OpenBLAS's own threads are faster (a quiet 224x224 ResNet-18 ran 36 ms on
them, 54 ms on one BLAS thread and the engine's split), so a run samples the kernel's count of
runnable tasks (``/proc/loadavg``) as it starts: with no other task running, BLAS keeps its
threads and nothing is split; otherwise it drops to one thread, and the engine splits where the
other tasks leave a core for a second thread of its own. Where they do not (any other task on a
2-core machine) the split only adds the hand-over: with both cores taken, products of 16-150 M
multiply-adds ran 1.3-2x as long split as on the one thread.

The count is set through the library's own entry point, found among the shared objects this
process has loaded (OpenBLAS as numpy's wheels bundle it, or a system OpenBLAS); where none is
found (Accelerate, MKL, a platform without ``/proc/self/maps``) nothing changes. Runs may overlap
in several threads: the first to enter lowers the count, the last to leave restores it.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from collections.abc import Callable

_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
            "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads64_",
            "openblas_get_num_threads")


def _find() -> tuple[Callable[[int], None], Callable[[], int]] | None:
    """OpenBLAS's set/get thread-count functions, if numpy's BLAS is a loaded OpenBLAS."""
    import numpy as np  # noqa: F401 - numpy loads its BLAS library on import

    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        setter = next((getattr(library, name) for name in _SETTERS if hasattr(library, name)), None)
        getter = next((getattr(library, name) for name in _GETTERS if hasattr(library, name)), None)
        if setter is not None and getter is not None:
            setter.argtypes = [ctypes.c_int]
            setter.restype = None
            getter.argtypes = []
            getter.restype = ctypes.c_int
            return setter, getter
    return None


_SAMPLE_SECONDS = 0.2  # how long one sample of the machine's load stands
_sample: list[float | int | None] = [float("-inf"), None]


def _others() -> int | None:
    """Tasks of other processes running or waiting to run, on the whole machine: the runnable
    count of ``/proc/loadavg`` less this process's own runnable threads (OpenBLAS's spin for a
    while after each product). Sampled at most every 0.2 s; None where it cannot be read."""
    now = time.monotonic()
    if now - _sample[0] < _SAMPLE_SECONDS:
        return _sample[1]
    try:
        with open("/proc/loadavg", "rb") as handle:
            runnable = int(handle.read().split()[3].split(b"/")[0])
        own = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat", "rb") as handle:
                    own += handle.read().rsplit(b")", 1)[1].split()[0] == b"R"
            except OSError:  # the thread ended meanwhile
                continue
        others = max(runnable - own, 0)
    except (OSError, ValueError, IndexError):
        others = None
    _sample[:] = [now, others]
    return others


def others_running() -> bool:
    """Whether a task of another process is running or waiting to run. Where it cannot be read,
    True: one BLAS thread, which bears contention, is the safe side."""
    others = _others()
    return others is None or others > 0


def spare_core() -> bool:
    """Whether the other processes' runnable tasks leave this process a second core, for a
    split product's helper thread. Where the count cannot be read, True (the split claims its
    blocks as threads come free, so a late helper costs little)."""
    others = _others()
    return others is None or others + 2 <= _cores()


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


class OneBlasThread:
    """A context manager: BLAS on one thread inside when the machine is busy (:attr:`split`
    then tells the kernels to split large products themselves, where a core is left for it),
    its previous count restored after; on an idle machine BLAS keeps its own threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._previous = 1
        self._library: tuple[Callable[[int], None], Callable[[], int]] | None = None
        self._looked = False
        self._lowered = False
        self.split = False  # inside a run on a busy machine with a core to spare: kernels split large products

    def _functions(self) -> tuple[Callable[[int], None], Callable[[], int]] | None:
        if not self._looked:
            self._library = _find()
            self._looked = True
        return self._library

    def __enter__(self) -> OneBlasThread:
        with self._lock:
            functions = self._functions()
            if self._inside == 0:
                busy = others_running()
                self.split = busy and spare_core()
                self._lowered = False
                if busy and functions is not None:
                    self._previous = functions[1]()
                    if self._previous != 1:
                        functions[0](1)
                        self._lowered = True
            self._inside += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0:
                self.split = False
                if self._lowered and self._library is not None:
                    self._library[0](self._previous)
                self._lowered = False

    def threads(self) -> int | None:
        """BLAS's thread count now (None where it cannot be read)."""
        functions = self._functions()
        return None if functions is None else functions[1]()


ONE_BLAS_THREAD = OneBlasThread()


def _after_fork_in_child() -> None:
    """A child forked while another thread was inside a run (a multiprocessing pool, gunicorn's
    workers, a DataLoader) inherits the lock held and the count of runs inside: its first run
    waited forever. The child has no run in progress: a fresh lock, and BLAS's count restored."""
    blas = ONE_BLAS_THREAD
    blas._lock = threading.Lock()
    blas._inside = 0
    blas.split = False
    if blas._lowered and blas._library is not None:
        blas._library[0](blas._previous)
    blas._lowered = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
