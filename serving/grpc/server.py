"""Assemble and run the server: gRPC (inference, health, reflection), metrics, signals.

Shutdown (SIGTERM or SIGINT): health turns NOT_SERVING, new requests are answered UNAVAILABLE
while the ones in flight get up to ``grace_period_s`` to finish, then gRPC stops and the models
close (:meth:`Server.stop`). An execution still running then (a model that never finishes) cannot
be interrupted, and its thread would keep the process alive: :func:`serve` ends the process
``_HARD_STOP_MARGIN_S`` after the grace period whatever is still running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import signal
import threading
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import _async as health_aio
from grpc_health.v1 import health_pb2, health_pb2_grpc

from .._generated import inference_pb2 as pb
from ..dataplane import DataPlane
from ..errors import ListenError
from ..manager import ModelManager
from ..metrics import Metrics
from ..metrics_http import start_metrics_server
from ..repository import ModelRepository
from ..settings import Settings
from .auth import BearerTokenInterceptor
from .decoding import SERVICE, add_inference_service
from .reflection import enable_reflection
from .servicer import InferenceServicer

log = logging.getLogger("serving.server")

SERVING = health_pb2.HealthCheckResponse.SERVING
# After the drain, what gRPC's own stop gives the answers still being written: the models are
# idle by then, so this only has to cover sending, not computing.
_SEND_GRACE_S = 2.0
# ... and at least this much, even when the drain took the whole grace period (a loaded machine):
# a call that arrived as the last model finished is being answered UNAVAILABLE, and gRPC's stop
# would cancel it (CANCELLED) with no time left. Well within _HARD_STOP_MARGIN_S.
_SEND_FLOOR_S = 0.5
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
# After the grace period, what the shutdown gets to finish (stop gRPC, send the last answers,
# close the models) before the process exits without waiting for executions still running.
_HARD_STOP_MARGIN_S = 3.0
# The exit status of a process ended that way (a clean shutdown exits 0).
HARD_STOP_EXIT_CODE = 1


class Server:
    """One serving process. ``start`` returns once the startup models are loaded.

    ``gate`` (a worker of several, serving.workers): the port is shared with the other workers
    (SO_REUSEPORT), and bound only after the startup models are loaded and ``gate()`` returns
    True (every worker has loaded), so that no connection lands on a worker still loading; on
    False (stopping before that) nothing is bound."""

    def __init__(self, settings: Settings, gate: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.settings = settings
        self._gate = gate
        self.metrics = Metrics()
        self.manager = ModelManager(ModelRepository(settings.repository, settings.engine_option_policy), settings, self.metrics)
        self.dataplane = DataPlane(self.manager, settings)
        self.health = health_aio.HealthServicer()
        self.manager.on_change = self._model_health
        self.port = 0
        self.metrics_port = 0
        self._grpc: grpc.aio.Server | None = None  # listening once started
        self._servicer: InferenceServicer | None = None
        self._http = None
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        settings = self.settings
        interceptors = []
        token = settings.token
        if token:
            interceptors.append(BearerTokenInterceptor(token, settings.auth_exempt_health, frozenset(("", SERVICE))))
        self._grpc = grpc.aio.server(
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", settings.max_message_bytes),
                ("grpc.max_send_message_length", settings.max_message_bytes),
                ("grpc.so_reuseport", int(self._gate is not None)),
                *keepalive_options(settings),
                *CORE_LIMITS,
            ],
        )
        self._servicer = InferenceServicer(self.dataplane, settings.stream_concurrency)
        add_inference_service(self._servicer, self._grpc)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self._grpc)
        if settings.reflection:
            enable_reflection((pb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name,
                               health_pb2.DESCRIPTOR.services_by_name["Health"].full_name), self._grpc)
        if self._gate is None:  # listen while loading: health says NOT_SERVING until ready
            self._bind()
            await self._server_health(NOT_SERVING)
            await self._grpc.start()
            self._start_metrics()
        failed = await self.manager.load_startup_models()
        if self._gate is not None:
            if not await self._gate():
                self._grpc = None  # never started: nothing to stop
                return
            self._bind()
            await self._grpc.start()
            self._start_metrics()
        self.manager.start_polling()
        self.dataplane.started = True
        await self._server_health(SERVING)
        log.info(
            "server ready",
            extra={"port": self.port, "metrics_port": self.metrics_port, "tls": settings.tls_cert is not None,
                   "event_loop": type(asyncio.get_running_loop()).__module__.split(".")[0],
                   "models": [f"{m.name}:{m.version}" for m in self.manager.loaded()], "failed": failed},
        )

    def _bind(self) -> None:
        address = f"{self.settings.host}:{self.settings.port}"
        try:
            if self.settings.tls_cert is not None:
                self.port = self._grpc.add_secure_port(address, self._credentials())
            else:
                self.port = self._grpc.add_insecure_port(address)
        except RuntimeError as err:  # grpc says only "Failed to bind to address ..."
            raise ListenError(
                f"cannot listen on {address}: the port is in use by another process, or {self.settings.host!r} "
                "is not an address of this machine; choose another --port / --host"
            ) from err

    async def stop(self) -> None:
        """Drain, then stop. The gRPC server keeps running while the requests in flight finish, so
        a call that arrives meanwhile is answered UNAVAILABLE ("shutting down") at once: stopping
        gRPC first would cancel calls that arrive as it stops (CANCELLED), and a call caught in
        its shutdown could be held for the whole grace period. Streams stop reading, answer what
        they have read, and end with UNAVAILABLE. Only then does gRPC stop; by that time no
        model is running for anyone, and it gives the answers being sent what is left of the grace
        period, between ``_SEND_FLOOR_S`` and ``_SEND_GRACE_S``."""
        if self._stopped.is_set():
            return
        grace = self.settings.grace_period_s
        log.info("shutting down", extra={"grace_period_s": grace})
        deadline = asyncio.get_running_loop().time() + grace
        await self.health.enter_graceful_shutdown()
        if self._servicer is not None:
            self._servicer.close_streams()
        drained = await self.dataplane.drain(grace)
        if self._servicer is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._servicer.streams_closed(), self._left(deadline))
        if self._grpc is not None:
            await self._grpc.stop(min(max(self._left(deadline), _SEND_FLOOR_S), _SEND_GRACE_S) if drained else 0)
        await self.manager.close()
        self.dataplane.shared_memory.close()
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
        self._stopped.set()
        log.info("stopped")

    @staticmethod
    def _left(deadline: float) -> float:
        return max(0.0, deadline - asyncio.get_running_loop().time())

    async def wait(self) -> None:
        await self._stopped.wait()

    async def _server_health(self, status: int) -> None:
        """The server's own health, under "" and under the inference service's name: probes and
        clients (grpc-health-probe -service, a load balancer's per-service check) ask for either.
        Shutdown turns both NOT_SERVING (enter_graceful_shutdown turns every name)."""
        for service in ("", SERVICE):
            await self.health.set(service, status)

    async def _model_health(self, name: str, serving: bool) -> None:
        await self.health.set(name, SERVING if serving else NOT_SERVING)

    def _credentials(self) -> grpc.ServerCredentials:
        settings = self.settings
        key = settings.tls_key.read_bytes()
        cert = settings.tls_cert.read_bytes()
        client_ca = settings.tls_client_ca.read_bytes() if settings.tls_client_ca is not None else None
        return grpc.ssl_server_credentials(
            [(key, cert)], root_certificates=client_ca, require_client_auth=client_ca is not None
        )

    def _start_metrics(self) -> None:
        """The metrics port asks for the credentials the gRPC port asks for (serving.metrics_http)."""
        settings = self.settings
        if settings.metrics_port == 0:
            return
        host = settings.metrics_host or settings.host
        try:
            self._http = start_metrics_server(
                self.metrics.registry, host, settings.metrics_port, token=settings.token,
                certificate=settings.tls_cert, key=settings.tls_key, client_ca=settings.tls_client_ca,
            )
        except OSError as err:
            raise ListenError(
                f"cannot serve metrics on {host}:{settings.metrics_port} ({err.strerror or err}): the port is in use "
                "or the host is not an address of this machine; choose another --metrics-port / --metrics-host"
            ) from err
        self.metrics_port = self._http.server_port


async def serve(settings: Settings, gate: Callable[[asyncio.Event], Awaitable[bool]] | None = None) -> int:
    """Run until SIGTERM/SIGINT; the process exit code. ``gate(stopping)``: see :class:`Server`."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    server = Server(settings, functools.partial(gate, stop) if gate is not None else None)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await server.start()
        await stop.wait()
    finally:
        _exit_after(settings.grace_period_s + _HARD_STOP_MARGIN_S)
        await server.stop()
    return 0


# gRPC core's own bounds, above its defaults. Calls arrived and not yet taken by the server's loop
# beyond max_pending_requests (default 1000, 3000 hard) are cancelled by the core: in a burst the
# client read CANCELLED, which it takes for its own doing and does not retry, where the server's
# queue would have answered RESOURCE_EXHAUSTED (max_queue_size). A pending call holds its headers
# and at most a flow-control window of data. Metadata past 8 KiB (16 KiB hard) was refused, at
# random in between: large JWT bearer tokens.
CORE_LIMITS = [
    ("grpc.server.max_pending_requests", 20_000),
    ("grpc.server.max_pending_requests_hard_limit", 20_000),
    ("grpc.max_metadata_size", 64 * 1024),
    ("grpc.absolute_max_metadata_size", 64 * 1024),
]


def keepalive_options(settings: Settings) -> list[tuple[str, int]]:
    """The keepalive settings as gRPC core's channel arguments (grpc/grpc doc/keepalive.md)."""
    return [
        ("grpc.keepalive_time_ms", settings.grpc_keepalive_time),
        ("grpc.keepalive_timeout_ms", settings.grpc_keepalive_timeout),
        ("grpc.keepalive_permit_without_calls", int(settings.grpc_keepalive_permit_without_calls)),
        ("grpc.http2.min_ping_interval_without_data_ms", settings.grpc_http2_min_recv_ping_interval_without_data),
        ("grpc.http2.max_ping_strikes", settings.grpc_http2_max_ping_strikes),
        ("grpc.http2.max_pings_without_data", settings.grpc_http2_max_pings_without_data),
    ]


def _exit_after(seconds: float) -> None:
    """End the process ``seconds`` from now unless it has exited by itself.

    A thread running engine code (a Loop that never ends, ONNX Runtime's run) cannot be stopped,
    and both the event loop's executor and the interpreter wait for their threads at exit: without
    this a server asked to stop would run on for as long as they do. A daemon thread keeps
    running while the interpreter waits for those, and does not hold up a clean exit."""

    def hard_stop() -> None:
        log.error("still running after the grace period (an execution that does not finish); exiting "
                  "without waiting for it", extra={"after_s": seconds})
        os._exit(HARD_STOP_EXIT_CODE)

    timer = threading.Timer(seconds, hard_stop)
    timer.daemon = True
    timer.start()
