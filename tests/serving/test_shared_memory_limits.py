"""A request's inputs in shared memory count, in bytes, against the message limit: a request of a
few hundred bytes must not make the server read more than a message could carry."""

from __future__ import annotations

import os

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from lite.format import GraphBuilder, save

from .conftest import start_server
from .test_shared_memory import Regions, _input, _refused

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
    inputs = [_input(name, [rows, 16], "FP64", region="r", byte_size=byte_size) for name in ("A", "B")]
    return client.infer("sum", inputs)


def test_inputs_in_memory_within_the_limit_together_are_served(client, regions):
    values = np.ones((8, 16), np.float64)  # 1024 bytes, twice: 2048
    regions.create("r", values.nbytes, values=values)
    np.testing.assert_array_equal(_infer(client, 8, values.nbytes).as_numpy("Y"), 2 * values)


def test_an_fp64_input_within_the_element_limit_but_over_the_byte_limit_is_refused(client, regions):
    """256 x 16 = 4096 elements passed the element limit, and were 32 KiB, 8x the message limit."""
    regions.create("r", 256 * 16 * 8)
    _refused(lambda: _infer(client, 256, 256 * 16 * 8), "RESOURCE_EXHAUSTED", "--max-message-bytes",
             f"limit of {LIMIT} bytes per request")


def test_inputs_each_within_the_limit_but_over_it_together_are_refused(client, regions):
    """Each input was checked alone: the same region could back every input of a request."""
    values = np.ones((24, 16), np.float64)  # 3072 bytes, twice: 6144
    regions.create("r", values.nbytes, values=values)
    _refused(lambda: _infer(client, 24, values.nbytes), "RESOURCE_EXHAUSTED", "6144 bytes", "--max-message-bytes")
