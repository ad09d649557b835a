"""``lite serve --workers N``: N server processes on one port.

One Python process takes in a few thousand requests a second, whatever it serves: its one event
loop parses every request (``bench/gpu_serving.py --server floor``: a bare grpc.aio server
answering 256 clients' 300 KB requests took in 3,900-4,700 a second on the GPU machine, its loop
thread 82-97 % busy). With ``--workers N`` the supervisor (this module, the process started by the user)
spawns N workers, each a whole server (serving.grpc.server.Server) with its own event loop and
its own copy of every model, all listening on one port with SO_REUSEPORT: the kernel spreads
incoming connections over them, and each batches the requests of its own connections.

- Start: each worker loads its models, then waits until every worker has, and only then binds
  the port, so that no connection lands on a worker still loading.
- Metrics: worker i serves on ``metrics_port + i`` (one scrape target per worker).
- Statistics (ModelStatistics) are those of the worker that answers. Loading and unloading
  through the API are refused (they would reach one worker); workers reload what changes in the
  repository when ``poll_interval_s`` is set.
- SIGTERM / SIGINT: forwarded to every worker, which shuts down gracefully; a worker that has not
  exited ``grace_period_s`` + 30 s later is killed. A supervisor that dies (SIGKILL) leaves
  workers that notice within a second and shut down.
- A worker that dies while serving (a crash, the OOM killer) is replaced by a new one, which
  binds the port as soon as it has loaded; its connections fail over when their clients
  reconnect. More than five exits within 60 s stop every worker and the supervisor exits 1, for
  the process manager to restart the whole server; so does a worker that exits while starting
  or cannot start (it says why once: the port is taken, a setting is wrong).

Workers are spawned (not forked): a forked child cannot use a CUDA context made before the fork.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import queue
import signal
import socket
import threading
import time
from typing import Any

from .settings import Settings

log = logging.getLogger("serving.workers")

_POLL_S = 0.2
_KILL_AFTER_GRACE_S = 30.0
# A worker that exits while serving is replaced, unless exits come this often: then something
# is wrong with every worker (the model, the GPU) and the supervisor gives up.
_RESTARTS_ALLOWED = 5
_RESTART_WINDOW_S = 60.0
# A worker's exit code when it cannot start (a ServingError: the port is taken, a setting is
# wrong); the supervisor does not replace such a worker.
_EXIT_CANNOT_START = 2


def run_workers(settings: Settings) -> int:
    """Supervise ``settings.workers`` worker processes until a signal; the exit code."""
    if settings.port == 0:  # one port for all: choose it here
        with socket.socket() as sock:
            sock.bind((settings.host, 0))
            settings = settings.replace(port=sock.getsockname()[1])
    context = multiprocessing.get_context("spawn")
    loaded: Any = context.Queue()
    go = context.Event()

    def spawn(index: int) -> Any:
        worker_settings = settings.replace(metrics_port=settings.metrics_port + index if settings.metrics_port else 0)
        process = context.Process(target=_worker_main, args=(worker_settings, index, loaded, go),
                                  name=f"lite-serve-worker-{index}", daemon=False)
        process.start()
        return process

    workers = [spawn(index) for index in range(settings.workers)]
    stopping = False

    def request_stop(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        ready = 0
        while not stopping and ready < len(workers):
            try:
                loaded.get(timeout=_POLL_S)
                ready += 1
            except queue.Empty:
                pass
            for process in workers:
                if process.exitcode is not None:  # at start-up: a setting or the port, not bad luck
                    log.error("worker %s exited with %s while starting; stopping the others", process.name,
                              process.exitcode)
                    return _stop(workers, settings, failed=True)
        if not stopping:
            go.set()
            log.info("workers listening", extra={"workers": len(workers), "port": settings.port})
        restarts: list[float] = []
        while not stopping:
            time.sleep(_POLL_S)
            for index, process in enumerate(workers):
                if process.exitcode is None or stopping:
                    continue
                if process.exitcode == _EXIT_CANNOT_START:  # it said why; a new one would too
                    log.error("worker %s could not start; stopping the others", process.name)
                    return _stop(workers, settings, failed=True)
                now = time.monotonic()
                restarts = [t for t in restarts if now - t < _RESTART_WINDOW_S] + [now]
                if len(restarts) > _RESTARTS_ALLOWED:
                    log.error("worker %s exited with %s: %d worker exits within %.0f s; stopping the others",
                              process.name, process.exitcode, len(restarts), _RESTART_WINDOW_S)
                    return _stop(workers, settings, failed=True)
                log.error("worker %s exited with %s; starting a new one", process.name, process.exitcode)
                process.join()  # reap it (it has exited: no wait)
                workers[index] = spawn(index)
            _drain(loaded)  # new workers announce themselves too; nobody waits for them now
        return _stop(workers, settings, failed=False)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _drain(messages: Any) -> None:
    try:
        while True:
            messages.get_nowait()
    except queue.Empty:
        pass


def _stop(workers: list, settings: Settings, failed: bool) -> int:
    for process in workers:
        if process.exitcode is None:
            process.terminate()  # SIGTERM: the worker's graceful shutdown
    deadline = time.monotonic() + settings.grace_period_s + _KILL_AFTER_GRACE_S
    for process in workers:
        process.join(max(deadline - time.monotonic(), 0.0))
        if process.exitcode is None:
            log.error("worker %s did not stop in time; killing it", process.name)
            process.kill()
            process.join()
    codes = [process.exitcode for process in workers]
    return 1 if failed or any(codes) else 0


def _worker_main(settings: Settings, index: int, loaded: Any, go: Any) -> None:
    import sys

    from .errors import ServingError
    from .eventloop import run
    from .grpc.server import serve
    from .logs import configure_logging

    configure_logging(settings.log_level, settings.log_format)
    logging.getLogger().handlers[0].addFilter(_WorkerField(index))
    threading.Thread(target=_stop_when_orphaned, args=(os.getppid(),), name="parent-watch", daemon=True).start()

    async def gate(stopping: asyncio.Event) -> bool:
        loaded.put(index)
        while not go.is_set():
            if stopping.is_set():
                return False
            await asyncio.sleep(0.05)
        return True

    try:
        code = run(serve(settings, gate=gate), settings.event_loop)
    except ServingError as err:
        print(f"lite serve (worker {index}): {err}", file=sys.stderr)
        code = _EXIT_CANNOT_START
    raise SystemExit(code)


def _stop_when_orphaned(parent: int) -> None:
    """A worker whose supervisor died (killed, crashed) shuts itself down gracefully rather than
    keep serving a port nobody manages."""
    while os.getppid() == parent:
        time.sleep(1.0)
    log.error("the supervisor (pid %d) is gone; stopping", parent)
    os.kill(os.getpid(), signal.SIGTERM)


class _WorkerField(logging.Filter):
    def __init__(self, index: int) -> None:
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self.index
        return True
