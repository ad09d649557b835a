"""Shared-memory regions for the serving tests, made with tritonclient's own utilities
(``tritonclient.utils.shared_memory``), and the tensors and refusals that name them."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

grpcclient = pytest.importorskip("tritonclient.grpc")
shm = pytest.importorskip("tritonclient.utils.shared_memory")
from tritonclient.utils import InferenceServerException  # noqa: E402


def new_key() -> str:
    return f"/lite_test_{uuid.uuid4().hex[:12]}"


def status_of(err: InferenceServerException) -> str:
    return str(err.status()).rsplit(".", 1)[-1]


def refused(call, code: str, *words: str) -> str:
    with pytest.raises(InferenceServerException) as caught:
        call()
    message = caught.value.message()
    assert status_of(caught.value) == code, f"{status_of(caught.value)}: {message}"
    for word in words:
        assert word in message, message
    return message


class Regions:
    """Regions made with tritonclient's utilities, destroyed (and unregistered) at the end."""

    def __init__(self, client) -> None:
        self.client = client
        self.handles: list = []

    def create(self, name: str, byte_size: int, register: bool = True, values: np.ndarray | None = None):
        key = new_key()
        handle = shm.create_shared_memory_region(name, key, byte_size)
        handle.key = key
        self.handles.append(handle)
        if values is not None:
            shm.set_shared_memory_region(handle, [values])
        if register:
            self.client.register_system_shared_memory(name, key, byte_size)
        return handle

    def close(self) -> None:
        try:
            self.client.unregister_system_shared_memory()
        except InferenceServerException:
            pass
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


def shm_input(name: str, shape, datatype: str = "FP32", region: str | None = None, byte_size: int = 0, offset: int = 0):
    tensor = grpcclient.InferInput(name, list(shape), datatype)
    if region is not None:
        tensor.set_shared_memory(region, byte_size, offset)
    return tensor


def shm_output(name: str, region: str | None = None, byte_size: int = 0, offset: int = 0):
    output = grpcclient.InferRequestedOutput(name)
    if region is not None:
        output.set_shared_memory(region, byte_size, offset)
    return output
