"""What a server's settings limit in shared memory, each through a server started with them.

A request's inputs in shared memory count, in bytes, against the message limit: a request of a
few hundred bytes must not make the server read more than a message could carry. The number and
bytes of registered regions are capped, registration needs the bearer token when calls do, and
``--no-shared-memory`` turns the calls off."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from lite.format import GraphBuilder, save

from .conftest import identity_model, start_server
from .shm_tools import Regions, new_key, refused, shm, shm_input

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs POSIX shared memory in /dev/shm")

LIMIT = 4096  # --max-message-bytes; the element limit follows it: 4096 elements


def _sum_model(path) -> None:
    """y = A + B, FP64 [N, 16]."""
    b = GraphBuilder("sum")
    a = b.input("A", np.float64, ["N", 16])
    c = b.input("B", np.float64, ["N", 16])
    y = b.node("Add", [a, c], outputs=["Y"])
    b.output(y, np.float64, ["N", 16])
    path.parent.mkdir(parents=True)
    save(b.build(), str(path))


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("shm_limits")
    _sum_model(root / "sum" / "1" / "model.lite")
    server = start_server(root, "--max-message-bytes", str(LIMIT), "--device", "numpy")
    yield server
    assert server.stop() == 0


@pytest.fixture()
def client(limited_server):
    client = grpcclient.InferenceServerClient(limited_server.address)
    yield client
    client.close()


@pytest.fixture()
def regions(client):
    made = Regions(client)
    yield made
    made.close()


def _infer(client, rows: int, byte_size: int):
    inputs = [shm_input(name, [rows, 16], "FP64", region="r", byte_size=byte_size) for name in ("A", "B")]
    return client.infer("sum", inputs)


def test_inputs_in_memory_within_the_limit_together_are_served(client, regions):
    values = np.ones((8, 16), np.float64)  # 1024 bytes, twice: 2048
    regions.create("r", values.nbytes, values=values)
    np.testing.assert_array_equal(_infer(client, 8, values.nbytes).as_numpy("Y"), 2 * values)


def test_an_fp64_input_within_the_element_limit_but_over_the_byte_limit_is_refused(client, regions):
    """256 x 16 = 4096 elements passed the element limit, and were 32 KiB, 8x the message limit."""
    regions.create("r", 256 * 16 * 8)
    refused(lambda: _infer(client, 256, 256 * 16 * 8), "RESOURCE_EXHAUSTED", "--max-message-bytes",
             f"limit of {LIMIT} bytes per request")


def test_inputs_each_within_the_limit_but_over_it_together_are_refused(client, regions):
    """Each input was checked alone: the same region could back every input of a request."""
    values = np.ones((24, 16), np.float64)  # 3072 bytes, twice: 6144
    regions.create("r", values.nbytes, values=values)
    refused(lambda: _infer(client, 24, values.nbytes), "RESOURCE_EXHAUSTED", "6144 bytes", "--max-message-bytes")


@pytest.fixture(scope="module")
def small_repository(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("shm_small")
    identity_model(root / "identity" / "1" / "model.lite")
    return root


def test_the_number_and_bytes_of_regions_and_the_tensor_limit_are_capped(small_repository):
    server = start_server(small_repository, "--max-shared-memory-regions", "2", "--max-shared-memory-bytes", "12000",
                          "--max-tensor-elements", "64")
    client = grpcclient.InferenceServerClient(server.address)
    made = Regions(client)
    try:
        made.create("a", 4096)
        made.create("b", 4096)
        made.create("c", 4096, register=False)
        refused(lambda: client.register_system_shared_memory("c", made.handles[2].key, 4096), "RESOURCE_EXHAUSTED",
                 "2 regions are registered")
        client.unregister_system_shared_memory("b")
        made.create("big", 8192, register=False)
        refused(lambda: client.register_system_shared_memory("big", made.handles[3].key, 8192),
                 "RESOURCE_EXHAUSTED", "--max-shared-memory-bytes")
        client.register_system_shared_memory("c", made.handles[2].key, 4096)
        # 128 elements in memory against a limit of 64: refused before the server reads them.
        refused(lambda: client.infer("identity", [shm_input("INPUT0", [8, 16], region="a", byte_size=512)]),
                 "RESOURCE_EXHAUSTED", "max_tensor_elements")
    finally:
        made.close()
        client.close()
        assert server.stop() == 0


def test_registration_needs_the_bearer_token(small_repository):
    server = start_server(small_repository, env={"LITE_AUTH_TOKEN": "s3cret"})
    client = grpcclient.InferenceServerClient(server.address)
    headers = {"authorization": "Bearer s3cret"}
    handle = shm.create_shared_memory_region("auth", new_key(), 64)
    try:
        refused(lambda: client.register_system_shared_memory("auth", handle._shm_key, 64), "UNAUTHENTICATED")
        refused(lambda: client.get_system_shared_memory_status(), "UNAUTHENTICATED")
        refused(lambda: client.unregister_system_shared_memory(), "UNAUTHENTICATED")
        client.register_system_shared_memory("auth", handle._shm_key, 64, headers=headers)
        assert list(client.get_system_shared_memory_status(headers=headers, as_json=True)["regions"]) == ["auth"]
    finally:
        shm.destroy_shared_memory_region(handle)
        client.close()
        assert server.stop() == 0


def test_no_shared_memory_turns_the_calls_off(small_repository):
    server = start_server(small_repository, "--no-shared-memory")
    client = grpcclient.InferenceServerClient(server.address)
    handle = shm.create_shared_memory_region("off", new_key(), 64)
    try:
        assert "system_shared_memory" not in client.get_server_metadata(as_json=True)["extensions"]
        refused(lambda: client.register_system_shared_memory("off", handle._shm_key, 64), "UNIMPLEMENTED",
                 "--no-shared-memory")
        refused(lambda: client.infer("identity", [shm_input("INPUT0", [1, 16], region="off", byte_size=64)]),
                 "UNIMPLEMENTED", "--no-shared-memory")
    finally:
        shm.destroy_shared_memory_region(handle)
        client.close()
        assert server.stop() == 0
