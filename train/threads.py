"""How many threads numpy's BLAS may use (``torch.set_num_threads``, MindSpore's
``runtime_num_threads``).

The training core's matrix products are small (LeNet's are 10-100 microseconds of work); on a
machine whose cores are shared with other processes, a multi-threaded BLAS can spend
milliseconds waiting for its second thread. ``set_num_threads(1)`` avoids that; larger
networks on idle machines gain from more threads. The choice is explicit: nothing changes
unless this is called.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from train.errors import ConfigurationError

_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)
_GETTERS = (
    "scipy_openblas_get_num_threads64_",
    "scipy_openblas_get_num_threads",
    "openblas_get_num_threads64_",
    "openblas_get_num_threads",
)


def _openblas() -> Any:
    """numpy's loaded OpenBLAS library, or None (another BLAS, or no /proc)."""
    maps = Path("/proc/self/maps")
    if not maps.exists():
        return None
    for library in sorted(
        {line.split()[-1] for line in maps.read_text().splitlines() if "openblas" in line.lower()}
    ):
        handle = ctypes.CDLL(library)
        if any(hasattr(handle, symbol) for symbol in _SETTERS):
            return handle
    return None


def get_num_threads() -> int | None:
    """The BLAS thread count in effect, or None when it cannot be read."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        handle = _openblas()
        getter = next(
            (getattr(handle, s) for s in _GETTERS if handle is not None and hasattr(handle, s)), None
        )
        return int(getter()) if getter is not None else None
    counts = [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
    return counts[0] if counts else None


def set_num_threads(count: int) -> bool:
    """Limit numpy's BLAS to ``count`` threads; return False when no BLAS control was found."""
    if count < 1:
        raise ConfigurationError(f"set_num_threads: count must be >= 1, got {count}")
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        handle = _openblas()
        setter = next(
            (getattr(handle, s) for s in _SETTERS if handle is not None and hasattr(handle, s)), None
        )
        if setter is None:
            return False
        setter(ctypes.c_int(count))
        return True
    threadpool_limits(limits=count, user_api="blas")
    return True


@contextlib.contextmanager
def num_threads(count: int) -> Iterator[None]:
    """Run the block with ``count`` BLAS threads, then restore the previous count."""
    previous = get_num_threads()
    set_num_threads(count)
    try:
        yield
    finally:
        if previous is not None:
            set_num_threads(previous)
