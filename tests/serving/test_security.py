"""TLS, mutual TLS and bearer-token authentication, through tritonclient against a real server.

The certificates (a CA, the server's, a client's, and a rogue CA with its own client) come from
certificates.py.
"""

from __future__ import annotations

import contextlib
import queue
import socket
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tritonclient.utils import InferenceServerException

from .certificates import Identity, Pki, make_pki
from .conftest import identity_model, refusal_to_start, start_server

TOKEN = "s3cret-token"
TIMEOUT = 10.0  # seconds for each client call: a refused handshake must not hang the test


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("secure-repository")
    identity_model(root / "identity" / "1" / "model.lite")
    return root


# ----- helpers ----------------------------------------------------------------------------------


def infer_ones(client: grpcclient.InferenceServerClient, headers: dict | None = None) -> np.ndarray:
    x = np.ones((1, 16), np.float32)
    tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(x)
    result = client.infer("identity", [tensor], headers=headers, client_timeout=TIMEOUT)
    return result.as_numpy("OUTPUT0")


def secure_client(address: str, ca: Identity,
                  client: Identity | None = None) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(
        address, ssl=True, root_certificates=str(ca.cert),
        private_key=str(client.key) if client else None,
        certificate_chain=str(client.cert) if client else None,
    )


def refused(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


# ----- TLS --------------------------------------------------------------------------------------


def test_tls_serves_clients_that_trust_the_server_ca(pki, repository):
    server = start_server(repository, "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key))
    try:
        client = secure_client(server.address, pki.ca)
        assert client.is_server_live(client_timeout=TIMEOUT)
        np.testing.assert_array_equal(infer_ones(client), np.ones((1, 16), np.float32))
        client.close()

        stranger = secure_client(server.address, pki.rogue_ca)  # does not trust the server's CA
        assert refused(lambda: infer_ones(stranger)).status() == "StatusCode.UNAVAILABLE"
        stranger.close()

        plaintext = grpcclient.InferenceServerClient(server.address)
        assert refused(lambda: infer_ones(plaintext)).status() == "StatusCode.UNAVAILABLE"
        plaintext.close()
    finally:
        server.stop()


def test_mutual_tls_accepts_only_clients_with_a_certificate_from_the_client_ca(pki, repository):
    server = start_server(repository, "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
                          "--tls-client-ca", str(pki.ca.cert))
    try:
        client = secure_client(server.address, pki.ca, pki.client)
        np.testing.assert_array_equal(infer_ones(client), np.ones((1, 16), np.float32))
        assert client.get_model_metadata("identity", client_timeout=TIMEOUT).name == "identity"
        client.close()

        anonymous = secure_client(server.address, pki.ca)  # TLS, but no client certificate
        assert refused(lambda: infer_ones(anonymous)).status() == "StatusCode.UNAVAILABLE"
        anonymous.close()

        stranger = secure_client(server.address, pki.ca, pki.rogue_client)  # certificate from another CA
        assert refused(lambda: infer_ones(stranger)).status() == "StatusCode.UNAVAILABLE"
        stranger.close()
    finally:
        server.stop()


# ----- bearer token -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def token_server(repository):
    # The token comes through the environment, as the settings advise (flags show in `ps`).
    server = start_server(repository, env={"LITE_AUTH_TOKEN": TOKEN})
    yield server
    server.stop()


@pytest.mark.parametrize("value", [f"Bearer {TOKEN}", f"bearer {TOKEN}", f"BEARER {TOKEN}", f"Bearer  {TOKEN}",
                                   f"Bearer {TOKEN} "],
                         ids=["Bearer", "bearer", "BEARER", "two-spaces", "trailing-space"])
def test_the_right_bearer_token_is_served(token_server, value):
    """The scheme name is case-insensitive (RFC 7235 section 2.1); the token is not. One or more
    spaces separate them ("Bearer" 1*SP b64token, RFC 6750 section 2.1); a token has no spaces."""
    client = grpcclient.InferenceServerClient(token_server.address)
    headers = {"authorization": value}
    np.testing.assert_array_equal(infer_ones(client, headers), np.ones((1, 16), np.float32))
    assert client.is_server_ready(headers=headers, client_timeout=TIMEOUT)
    assert client.get_inference_statistics("identity", headers=headers, client_timeout=TIMEOUT)
    client.close()


def test_metadata_of_tens_of_kib_is_read(token_server):
    """Large JWTs and trace headers: gRPC's core refused metadata past 8 KiB, at random up to 16."""
    client = grpcclient.InferenceServerClient(token_server.address)
    headers = {"authorization": f"Bearer {TOKEN}", "x-trace-context": "t" * 40_000}
    for _ in range(5):
        np.testing.assert_array_equal(infer_ones(client, headers), np.ones((1, 16), np.float32))
    client.close()


@pytest.mark.parametrize("headers", [
    None,
    {"authorization": "Bearer wrong-token"},
    {"authorization": TOKEN},  # no "Bearer " scheme
    {"authorization": f"Bearer {TOKEN}x"},
    {"authorization": f"Bearer {TOKEN.upper()}"},
    {"authorization": f"Basic {TOKEN}"},
    {"x-api-key": TOKEN},
], ids=["missing", "wrong", "no-scheme", "longer", "token-case", "basic-scheme", "other-header"])
def test_a_missing_or_wrong_token_is_unauthenticated(token_server, headers):
    client = grpcclient.InferenceServerClient(token_server.address)
    for call in (
        lambda: infer_ones(client, headers),
        lambda: client.is_server_live(headers=headers, client_timeout=TIMEOUT),
        lambda: client.get_model_repository_index(headers=headers, client_timeout=TIMEOUT),
        lambda: client.load_model("identity", headers=headers, client_timeout=TIMEOUT),
    ):
        error = refused(call)
        assert error.status() == "StatusCode.UNAUTHENTICATED"
        assert "bearer token" in error.message()
    client.close()


def test_streams_need_the_token_too(token_server):
    answers: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(token_server.address)
    client.start_stream(callback=lambda result, error: answers.put((result, error)),
                        headers={"authorization": "Bearer wrong-token"})
    try:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        # The server may end the stream before the request is queued; the callback says why.
        with contextlib.suppress(InferenceServerException):
            client.async_stream_infer("identity", [tensor])
        result, error = answers.get(timeout=TIMEOUT)
    finally:
        client.stop_stream()
        client.close()
    assert result is None
    assert error.status() == "StatusCode.UNAUTHENTICATED" and "bearer token" in error.message()


def test_health_checks_need_no_token(token_server):
    """Kubernetes probes carry no credentials (auth_exempt_health, on by default)."""
    with grpc.insecure_channel(token_server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=TIMEOUT)
    assert response.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("service", ["identity", "no-such-model"])
def test_a_models_health_needs_the_token_so_probes_cannot_list_models(token_server, service):
    """Without the token, a model's name and an unknown name get the same answer: the health
    service would otherwise tell which models the server holds (SERVING against NOT_FOUND)."""
    with grpc.insecure_channel(token_server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as check:
            stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT)
        with pytest.raises(grpc.RpcError) as watch:
            next(stub.Watch(health_pb2.HealthCheckRequest(service=service), timeout=TIMEOUT))
        authorized = stub.Check(health_pb2.HealthCheckRequest(service="identity"), timeout=TIMEOUT,
                                metadata=(("authorization", f"Bearer {TOKEN}"),))
        first = next(stub.Watch(health_pb2.HealthCheckRequest(service="inference.GRPCInferenceService"),
                                timeout=TIMEOUT))
    for refused in (check.value, watch.value):
        assert refused.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "health of a model needs the bearer token" in refused.details()
    assert authorized.status == first.status == health_pb2.HealthCheckResponse.SERVING


# ----- token files --------------------------------------------------------------------------------


@pytest.mark.parametrize("content", ["", "\n", "  \t \n\n"], ids=["empty", "newline", "whitespace"])
def test_a_blank_token_file_refuses_to_start_instead_of_serving_without_authentication(repository, tmp_path,
                                                                                       content):
    token_file = tmp_path / "token"
    token_file.write_text(content)
    message = refusal_to_start(repository, "--auth-token-file", str(token_file))
    assert f"auth_token_file '{token_file}' is empty or only whitespace" in message
    assert "without authentication" in message


def test_a_blank_token_refuses_to_start(repository):
    message = refusal_to_start(repository, env={"LITE_AUTH_TOKEN": "   "})
    assert "auth_token is empty or only whitespace" in message


def unusable_token_file(directory: Path, kind: str) -> Path:
    if kind == "missing":
        return directory / "missing"
    if kind == "directory":
        return directory
    path = directory / kind
    if kind == "not-utf8":
        path.write_bytes(b"\xff\xfe token")
    else:  # a token on two lines: no client could send it in one header
        path.write_text("first\nsecond\n")
    return path


@pytest.mark.parametrize("kind", ["missing", "directory", "not-utf8", "two-lines"])
def test_an_unusable_token_file_is_a_clear_error_not_a_traceback(repository, tmp_path, kind):
    token_file = unusable_token_file(tmp_path, kind)
    message = refusal_to_start(repository, "--auth-token-file", str(token_file))
    assert f"auth_token_file '{token_file}'" in message


def test_a_token_file_with_a_final_newline_serves_that_token(repository, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    server = start_server(repository, "--auth-token-file", str(token_file))
    try:
        client = grpcclient.InferenceServerClient(server.address)
        headers = {"authorization": f"Bearer {TOKEN}"}
        np.testing.assert_array_equal(infer_ones(client, headers), np.ones((1, 16), np.float32))
        assert refused(lambda: infer_ones(client)).status() == "StatusCode.UNAUTHENTICATED"
        client.close()
    finally:
        server.stop()


# ----- the metrics endpoint -----------------------------------------------------------------------


def scrape(port: int, headers: dict | None = None, scheme: str = "http", context: ssl.SSLContext | None = None,
           host: str = "127.0.0.1") -> tuple[int, str]:
    """Status and body of GET /metrics."""
    url = f"{scheme}://{host}:{port}/metrics"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=TIMEOUT,
                                    context=context) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.mark.parametrize("headers", [
    None,
    {"Authorization": "Bearer wrong-token"},
    {"Authorization": TOKEN},
], ids=["missing", "wrong", "no-scheme"])
def test_metrics_need_the_bearer_token_when_calls_do(token_server, headers):
    status, body = scrape(token_server.metrics_port, headers)
    assert status == 401
    assert "bearer token" in body and "identity" not in body


@pytest.mark.parametrize("scheme", ["Bearer", "bearer"])
def test_metrics_answer_the_right_bearer_token(token_server, scheme):
    status, body = scrape(token_server.metrics_port, {"Authorization": f"{scheme} {TOKEN}"})
    assert status == 200
    assert "lite_models_loaded" in body


def test_metrics_need_a_client_certificate_under_mutual_tls(pki, repository):
    server = start_server(repository, "--tls-cert", str(pki.server.cert), "--tls-key", str(pki.server.key),
                          "--tls-client-ca", str(pki.ca.cert))
    try:
        anonymous = ssl.create_default_context(cafile=str(pki.ca.cert))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            scrape(server.metrics_port, scheme="https", context=anonymous)
        stranger = ssl.create_default_context(cafile=str(pki.ca.cert))
        stranger.load_cert_chain(str(pki.rogue_client.cert), str(pki.rogue_client.key))
        with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
            scrape(server.metrics_port, scheme="https", context=stranger)
        trusted = ssl.create_default_context(cafile=str(pki.ca.cert))
        trusted.load_cert_chain(str(pki.client.cert), str(pki.client.key))
        status, body = scrape(server.metrics_port, scheme="https", context=trusted)
        assert status == 200 and "lite_models_loaded" in body
    finally:
        server.stop()


def test_metrics_host_binds_the_metrics_endpoint_apart_from_the_grpc_port(repository):
    server = start_server(repository, "--metrics-host", "127.0.0.2")  # another loopback address
    try:
        status, _ = scrape(server.metrics_port, host="127.0.0.2")
        assert status == 200
        with pytest.raises(urllib.error.URLError):
            scrape(server.metrics_port)  # 127.0.0.1, where gRPC listens
    finally:
        server.stop()


# ----- TLS files ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["missing-cert", "key-of-another-certificate", "not-pem", "client-ca-not-pem",
                                  "client-ca-directory"])
def test_unusable_tls_files_refuse_to_start_naming_the_file(pki, repository, tmp_path, kind):
    """gRPC only logs "Invalid private key" and fails to add the port, which the server used to
    report as "the port is in use"; the files are now checked before anything listens."""
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cert, key, client_ca = pki.server.cert, pki.server.key, None
    if kind == "missing-cert":
        cert = tmp_path / "missing.crt"
    elif kind == "key-of-another-certificate":
        key = pki.client.key
    elif kind == "not-pem":
        cert = key = garbage
    elif kind == "client-ca-not-pem":
        client_ca = garbage
    else:
        client_ca = tmp_path
    flags = ["--tls-cert", str(cert), "--tls-key", str(key)]
    if client_ca is not None:
        flags += ["--tls-client-ca", str(client_ca)]
    message = refusal_to_start(repository, *flags)
    assert "port is in use" not in message
    if client_ca is not None:
        assert f"tls_client_ca '{client_ca}'" in message
    else:
        assert f"tls_cert '{cert}'" in message


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("Threads:")).split()[1])


def test_idle_metrics_connections_get_neither_a_thread_each_nor_forever(token_server):
    """Each connection to the metrics port had a thread of its own that waited for the request as
    long as the client liked: every idle connection was one more thread in the server, for good."""
    from serving.metrics_http import CONNECTION_TIMEOUT_S, MAX_CONNECTIONS

    pid = token_server.process.pid
    before = _threads(pid)
    idle = [socket.create_connection(("127.0.0.1", token_server.metrics_port), timeout=TIMEOUT)
            for _ in range(MAX_CONNECTIONS + 40)]
    try:
        for connection in idle:
            connection.sendall(b"GET /metrics HTTP/1.1\r\n")  # and never the rest of the request
        time.sleep(1.0)
        assert _threads(pid) <= before + MAX_CONNECTIONS
        first = idle[0]
        first.settimeout(CONNECTION_TIMEOUT_S + 10)
        started = time.monotonic()
        assert first.recv(1024) == b""  # the server closed it
        assert time.monotonic() - started < CONNECTION_TIMEOUT_S + 5
    finally:
        for connection in idle:
            connection.close()
    deadline = time.monotonic() + 10
    while True:  # the closed connections' threads end as they see the close
        try:
            if scrape(token_server.metrics_port, {"Authorization": f"Bearer {TOKEN}"})[0] == 200:
                break
        except OSError:  # refused while the threads were still all taken
            pass
        assert time.monotonic() < deadline, "the metrics endpoint did not answer again"
        time.sleep(0.2)
