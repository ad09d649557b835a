"""Whose threads ONNX Runtime sessions run on: a pool of their own each, or the process's shared pool.

By default each session owns an intra-op thread pool (``threads`` threads, the caller being one
of them; ONNX Runtime's default is one per physical core). A process holding many models, a
server with a repository of hundreds, then holds hundreds of pools: 300 small models on a
2-core machine took 614 threads, and on a 16-core one each session adds 15
(bench/serving_many_models.py). :func:`share_threads` makes ONNX Runtime create its pools of the
process (``onnxruntime.set_global_thread_pool_sizes``: ``threads`` intra-op threads and one
inter-op thread, lite's sessions running nodes in sequence); every session lite builds after it
runs on them (``SessionOptions.use_per_session_threads = False``).

The shared pools are the process's in ONNX Runtime itself, not a choice per session: once they
exist, its Python binding refuses to build a session with a pool of its own ("use_per_session_threads
must be false when using a global thread pool"), and they cannot be resized. So sharing is one
call for the process (a server makes it at startup), ``threads=`` given to a later load no longer
sizes anything, and the thread count choice (thread_choice.py) does not apply. Sessions built
before the call keep their own pools. ONNX Runtime's Python API has the shared pools from 1.23.

The shared pool's threads spin as ONNX Runtime's own default has them (``spinning="always"``):
``session.force_spinning_stop``, which stops a session's own pool when a run returns, does not
reach the process's pool, and the Python API sizes that pool and sets nothing else. So
``spinning`` applies to sessions with pools of their own only.
"""

from __future__ import annotations

import threading
from typing import Any

from lite.errors import EngineUnavailableError, LiteError

# SessionConfig.spinning -> ONNX Runtime's session config entries (onnxruntime_session_options_config_keys.h).
SPINNING = {
    "run": {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "1"},
    "always": {"session.intra_op.allow_spinning": "1", "session.force_spinning_stop": "0"},
    "never": {"session.intra_op.allow_spinning": "0", "session.force_spinning_stop": "1"},
}
OUTSIDE = "outside lite"  # the shared pools' size when code outside lite created them

_lock = threading.Lock()
_shared: dict[str, Any] = {}  # "threads": the shared pools' intra-op size, once they exist (None: ORT's default)


class ThreadPoolError(LiteError, RuntimeError):
    """ONNX Runtime's shared thread pool cannot do what was asked: be resized, or give a session
    a pool of its own."""


def _onnxruntime():
    """ONNX Runtime's module, imported here: sessions.py, which imports this module, is not."""
    try:
        import onnxruntime
    except ImportError as err:
        raise EngineUnavailableError("shared thread pools are ONNX Runtime's: pip install 'lite-toolchain[ort]'") from err
    return onnxruntime


def share_threads(threads: int | None = None) -> None:
    """From now on, every ONNX Runtime session lite builds in this process runs on ONNX Runtime's
    shared pool of ``threads`` intra-op threads (None: ONNX Runtime's default, one per physical
    core). Asking again for the same size does nothing; for another, raises :class:`ThreadPoolError`.
    Raises :class:`lite.EngineUnavailableError` where ONNX Runtime is older than 1.23 (no shared
    pools in its Python API)."""
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None (ONNX Runtime's default); got {threads!r}")
    ort = _onnxruntime()
    if not hasattr(ort, "set_global_thread_pool_sizes") or not hasattr(ort.SessionOptions(), "use_per_session_threads"):
        raise EngineUnavailableError(f"ONNX Runtime {ort.__version__} offers no shared thread pool to Python (1.23 and "
                                     "later do): pip install 'onnxruntime>=1.23', or keep a pool per session")
    with _lock:
        if "threads" in _shared:
            _check_size(threads)
            return
        try:
            ort.set_global_thread_pool_sizes(threads or 0, 1)  # 0: ONNX Runtime's default
        except Exception as err:  # noqa: BLE001 - ONNX Runtime's untyped Fail: the pools exist already
            if "already been created" not in str(err):
                raise
            _shared["threads"] = OUTSIDE  # created by other code of this process: used as they are
        else:
            _shared["threads"] = threads


def shared_threads() -> int | None | str:
    """The shared pool's intra-op threads (None: ONNX Runtime's default, :data:`OUTSIDE` when code
    outside lite created it); raises :class:`ThreadPoolError` where :func:`share_threads` was not called."""
    if "threads" not in _shared:
        raise ThreadPoolError("ONNX Runtime's thread pools are not shared in this process: call share_threads() first")
    return _shared["threads"]


def sharing() -> bool:
    """Whether sessions built now run on the process's shared pool."""
    return "threads" in _shared


def configure(options: Any, threads: int | None, spinning: str) -> None:
    """Set ``options`` (an ``onnxruntime.SessionOptions``) to run on the process's shared pool where
    :func:`share_threads` was called, else on a pool of its own of ``threads`` intra-op threads
    spinning as ``spinning`` says."""
    if sharing():
        # Thread counts set on the options would be ignored, with a warning on stderr per session.
        options.use_per_session_threads = False
        return
    if threads is not None:
        options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    for key, value in SPINNING[spinning].items():
        options.add_session_config_entry(key, value)


def refused(err: Exception) -> ThreadPoolError | None:
    """ONNX Runtime's refusal of a session with a pool of its own, as a :class:`ThreadPoolError`
    saying what to do; None for any other error."""
    if "use_per_session_threads must be false" not in str(err):
        return None
    return ThreadPoolError("code outside lite made ONNX Runtime's thread pools shared in this process "
                           "(onnxruntime.set_global_thread_pool_sizes), and ONNX Runtime then builds no session with "
                           "a pool of its own: call lite.engines.ort.thread_pools.share_threads() after it, and lite's "
                           "sessions use the shared pool too")


def _check_size(threads: int | None) -> None:
    created = _shared["threads"]
    if created != OUTSIDE and threads != created:
        raise ThreadPoolError(
            f"ONNX Runtime's shared thread pool of this process has {_describe(created)} and cannot be resized to "
            f"{_describe(threads)}: share_threads() takes the size once per process"
        )


def _describe(threads: int | None) -> str:
    return "ONNX Runtime's default number of intra-op threads" if threads is None else f"{threads} intra-op threads"
