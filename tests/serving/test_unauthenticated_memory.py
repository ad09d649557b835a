"""Calls without the bearer token cost the server little memory, however large their messages."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from .conftest import identity_model, start_server

TOKEN = "s3cret-token"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("unauthenticated-repository")
    identity_model(root / "identity" / "1" / "model.lite")
    server = start_server(root, env={"LITE_AUTH_TOKEN": TOKEN})
    yield server
    server.stop()


def _peak_rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) // 1024


def _model_infer_message(payload_bytes: int) -> bytes:
    """A serialized ModelInferRequest for "identity" carrying ``payload_bytes`` of raw input."""
    length, varint = payload_bytes, b""
    while length >= 0x80:
        varint += bytes([length & 0x7F | 0x80])
        length >>= 7
    return b"\x0a\x08identity" + b"\x3a" + varint + bytes([length]) + bytes(payload_bytes)


def test_large_calls_without_the_token_are_refused_without_being_received_whole(token_server):
    """A unary handler runs only once its request is received whole: 40 calls of 60 MiB without
    the token took the server from 91 MiB to 3.6 GiB before each was answered UNAUTHENTICATED."""
    calls, size = 8, 48 * MIB
    message = _model_infer_message(size)
    before = _peak_rss_mib(token_server.process.pid)
    channels = [grpc.insecure_channel(token_server.address, options=[("grpc.max_send_message_length", -1)])
                for _ in range(calls)]
    try:
        infers = [channel.unary_unary("/inference.GRPCInferenceService/ModelInfer") for channel in channels]
        futures = [infer.future(message, timeout=60) for infer in infers]
        codes = {future.exception().code() for future in futures}
    finally:
        for channel in channels:
            channel.close()
    assert codes == {grpc.StatusCode.UNAUTHENTICATED}
    grown = _peak_rss_mib(token_server.process.pid) - before
    # Held whole, the calls take 384 MiB or more; refused unread, tens (gRPC's flow-control windows).
    assert grown < calls * size // MIB * 3 // 4, f"the server grew by {grown} MiB"
