"""A request of more inputs, outputs or parameters than any model takes is refused before any of
them is decoded on the event loop."""

from __future__ import annotations

from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2 as pb

from .conftest import identity_model, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("entries-repository")
    identity_model(root / "identity" / "1" / "model.lite")
    server = start_server(root)
    yield server
    server.stop()


def _infer(address: str, request: pb.ModelInferRequest) -> grpc.RpcError:
    with grpc.insecure_channel(address) as channel:
        infer = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                    request_serializer=pb.ModelInferRequest.SerializeToString,
                                    response_deserializer=pb.ModelInferResponse.FromString)
        with pytest.raises(grpc.RpcError) as caught:
            infer(request, timeout=30)
    return caught.value


def test_a_request_of_thousands_of_inputs_is_refused_before_they_are_decoded(server):
    """A million empty inputs (20 MB) were decoded one by one on the event loop, then refused as
    unknown: 15 s during which no other client was answered."""
    request = pb.ModelInferRequest(model_name="identity")
    for index in range(5000):
        request.inputs.add(name=f"i{index}", datatype="FP32", shape=[0])
    error = _infer(server.address, request)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "5000 inputs, more than the server takes (4096)" in error.details()


def test_a_request_of_thousands_of_outputs_is_refused(server):
    request = pb.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16]).contents.fp32_contents.extend([0.0] * 16)
    for index in range(5000):
        request.outputs.add(name=f"o{index}")
    error = _infer(server.address, request)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "5000 requested outputs" in error.details()


def test_a_request_within_the_bounds_is_served(server):
    client = grpcclient.InferenceServerClient(server.address)
    try:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.zeros((1, 16), np.float32))
        assert client.infer("identity", [tensor]).as_numpy("OUTPUT0").shape == (1, 16)
    finally:
        client.close()
