"""The Prometheus endpoint (``GET /metrics`` on the metrics port), protected as the gRPC port is.

The metrics name every model and how it is used, so when the gRPC port asks for credentials the
metrics port asks for the same ones: the bearer token (``Authorization: Bearer <token>``, which
Prometheus sends with ``authorization: {credentials_file: ...}`` in its scrape config) and, with
mutual TLS, a client certificate from the same CA. Without either it answers anyone who can reach
``metrics_host`` (by default the gRPC ``host``).
"""

from __future__ import annotations

import io
import socket
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from .bearer import carries_token

# Each connection is served by a thread of its own, which waits for the request as long as the
# client keeps the connection open: without bounds, a client that opens connections and sends
# nothing (or a byte now and then) made the process start a thread for each, until it could start
# none, for the models' executions either. So connections beyond MAX_CONNECTIONS at once are closed
# unanswered, and each read gets CONNECTION_TIMEOUT_S. A bound per read alone let a client without
# credentials hold every slot by sending a header line every few seconds (the token is checked once
# the request is read): the whole request, TLS handshake included, must now arrive within
# REQUEST_DEADLINE_S of the connection, and one client address holds at most
# MAX_CONNECTIONS_PER_ADDRESS slots, so that one host reconnecting as fast as it is dropped cannot
# take them all from the scraper (a scraper uses one connection at a time).
CONNECTION_TIMEOUT_S = 10.0
REQUEST_DEADLINE_S = 5.0
MAX_CONNECTIONS = 32
MAX_CONNECTIONS_PER_ADDRESS = 4


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self._slots_lock = threading.Lock()
        self._slots: Counter[str] = Counter()  # client address -> connections being served

    def process_request(self, request: socket.socket, client_address: tuple) -> None:
        if not self._take_slot(client_address[0]):
            self.shutdown_request(request)  # as many threads as it may have: this one gets none
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._give_back_slot(client_address[0])
            raise

    def process_request_thread(self, request: socket.socket, client_address: tuple) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._give_back_slot(client_address[0])

    def _take_slot(self, address: str) -> bool:
        with self._slots_lock:
            if self._slots.total() >= MAX_CONNECTIONS or self._slots[address] >= MAX_CONNECTIONS_PER_ADDRESS:
                return False
            self._slots[address] += 1
            return True

    def _give_back_slot(self, address: str) -> None:
        with self._slots_lock:
            self._slots[address] -= 1
            if not self._slots[address]:
                del self._slots[address]


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, each read given only the time left until ``deadline``
    (``time.monotonic``): a request trickled in a byte at a time ends at the deadline all the same."""

    def __init__(self, connection: socket.socket, deadline: float) -> None:
        super().__init__()
        self._connection = connection
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request did not arrive within {REQUEST_DEADLINE_S} s")
        self._connection.settimeout(left)
        return self._connection.recv_into(buffer)


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = CONNECTION_TIMEOUT_S  # for each write of the answer

    def setup(self) -> None:
        super().setup()
        self.rfile.close()
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + REQUEST_DEADLINE_S))

    def parse_request(self) -> bool:
        parsed = super().parse_request()
        self.connection.settimeout(self.timeout)  # the request is in: the answer gets the usual time
        return parsed

    def log_message(self, format: str, *args: object) -> None:  # scrapes are not worth a log line each
        pass


def start_metrics_server(registry: CollectorRegistry, host: str, port: int, *, token: str = "",
                         certificate: Path | None = None, key: Path | None = None,
                         client_ca: Path | None = None) -> WSGIServer:
    """Serve ``registry`` on ``host:port`` in a daemon thread; the server (``shutdown`` stops it).

    ``token``: every request must carry it as a bearer token. ``certificate``/``key``: HTTPS;
    with ``client_ca``, only clients presenting a certificate that CA signed get through."""
    app = make_wsgi_app(registry)
    if token:
        app = _require_token(app, token)
    server = make_server(host, port, app, _Server6 if ":" in host else _Server, handler_class=_QuietHandler)
    if certificate is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(certificate), str(key))
        if client_ca is not None:
            context.load_verify_locations(str(client_ca))
            context.verify_mode = ssl.CERT_REQUIRED
        # The handshake happens in the request's own thread: a client that connects and stays
        # silent must not block the thread that accepts connections.
        server.socket = context.wrap_socket(server.socket, server_side=True, do_handshake_on_connect=False)
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def _require_token(app: Callable, token: str) -> Callable:
    expected = token.encode()

    def guarded(environ: dict, start_response: Callable) -> Iterable[bytes]:
        given = environ.get("HTTP_AUTHORIZATION", "").encode("latin-1", "replace")
        if carries_token(given, expected):
            return app(environ, start_response)
        start_response("401 Unauthorized", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("WWW-Authenticate", 'Bearer realm="metrics"')])
        return [b"missing or invalid bearer token (header 'Authorization: Bearer <token>')\n"]

    return guarded
