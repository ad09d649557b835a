"""The BLAS library's thread count, held at one while the numpy engine runs.

OpenBLAS cuts every GEMM into one equal share per thread and waits for the last share; its idle
threads spin. When another process takes one of the cores, the share of the thread that lost it
arrives a scheduler time slice late, and the spinning threads take time from the ones working:
a 64x64 ResNet ran 12 ms on one BLAS thread and 250 ms on two beside one busy process. Kernels
therefore call BLAS on one thread and the engine splits large products itself
(:mod:`lite.ops._parallel`), in blocks claimed by whichever thread is free.

The count is set through the library's own entry point, found among the shared objects this
process has loaded (OpenBLAS as numpy's wheels bundle it, or a system OpenBLAS); where none is
found (Accelerate, MKL, a platform without ``/proc/self/maps``) nothing changes. Runs may overlap
in several threads: the first to enter lowers the count, the last to leave restores it.
"""

from __future__ import annotations

import ctypes
import threading
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


class OneBlasThread:
    """A context manager: BLAS on one thread inside, its previous count restored after."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inside = 0
        self._previous = 1
        self._library: tuple[Callable[[int], None], Callable[[], int]] | None = None
        self._looked = False

    def _functions(self) -> tuple[Callable[[int], None], Callable[[], int]] | None:
        if not self._looked:
            self._library = _find()
            self._looked = True
        return self._library

    def __enter__(self) -> OneBlasThread:
        with self._lock:
            functions = self._functions()
            if self._inside == 0 and functions is not None:
                self._previous = functions[1]()
                if self._previous != 1:
                    functions[0](1)
            self._inside += 1
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._lock:
            self._inside -= 1
            functions = self._library
            if self._inside == 0 and functions is not None and self._previous != 1:
                functions[0](self._previous)

    def threads(self) -> int | None:
        """BLAS's thread count now (None where it cannot be read)."""
        functions = self._functions()
        return None if functions is None else functions[1]()


ONE_BLAS_THREAD = OneBlasThread()
