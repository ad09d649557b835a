"""The metrics endpoint's connection slots against clients without credentials: a request must
arrive whole within a deadline, and one address cannot hold every slot."""

from __future__ import annotations

import socket
import time
import urllib.request
from pathlib import Path

import pytest

from .conftest import identity_model, start_server

TOKEN = "s3cret-token"
TIMEOUT = 10.0


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("metrics-repository")
    identity_model(root / "identity" / "1" / "model.lite")
    server = start_server(root, env={"LITE_AUTH_TOKEN": TOKEN})
    yield server
    server.stop()


def scrape(port: int, headers: dict) -> tuple[int, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
        return response.status, response.read().decode()


def _trickling_connections(port: int, count: int, source: str) -> list[socket.socket]:
    """``count`` connections from ``source`` that start a request and never finish it."""
    connections = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT, source_address=(source, 0))
        connection.sendall(b"GET /metrics HTTP/1.1\r\n")
        connections.append(connection)
    return connections


def test_a_request_trickled_a_header_line_at_a_time_is_cut_off_at_the_request_deadline(token_server):
    """Each read had its own timeout, so a header line every few seconds held the connection (and
    its slot) for as long as the client liked."""
    from serving.metrics_http import REQUEST_DEADLINE_S

    [connection] = _trickling_connections(token_server.metrics_port, 1, "127.0.0.1")
    started = time.monotonic()
    try:
        while time.monotonic() - started < REQUEST_DEADLINE_S + 10:
            try:
                connection.sendall(b"X-Slow: 1\r\n")
            except OSError:  # reset: the server has closed it
                break
            connection.settimeout(1.0)
            try:
                if connection.recv(1024) == b"":
                    break
            except TimeoutError:
                continue
        assert time.monotonic() - started < REQUEST_DEADLINE_S + 3
    finally:
        connection.close()


def test_one_address_cannot_take_every_metrics_slot_from_the_scraper(token_server):
    """32 connections without credentials, trickling header lines, left no slot for Prometheus."""
    from serving.metrics_http import MAX_CONNECTIONS

    held = _trickling_connections(token_server.metrics_port, MAX_CONNECTIONS, "127.0.0.2")
    try:
        time.sleep(0.5)
        status, _ = scrape(token_server.metrics_port, {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200
    finally:
        for connection in held:
            connection.close()
