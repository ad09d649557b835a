"""Every class of bad request gets its status code and a precise message, and the server keeps
serving afterwards."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException


def infer_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


GOOD = np.zeros((1, 16), np.float32)


def rejected(client, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        client.infer(*args, **kwargs)
    return info.value


def raw_call(server, request: service_pb2.ModelInferRequest) -> grpc.RpcError:
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.ModelInfer(request)
    return info.value


@pytest.fixture(autouse=True)
def server_still_serves(client):
    yield
    result = client.infer("identity", [infer_input("INPUT0", GOOD, "FP32")])
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), GOOD)


def test_unknown_model_is_not_found(client):
    err = rejected(client, "no-such-model", [infer_input("INPUT0", GOOD, "FP32")])
    assert err.status() == "StatusCode.NOT_FOUND"
    assert "'no-such-model' is not loaded" in err.message()


def test_unknown_version_is_not_found(client):
    err = rejected(client, "identity", [infer_input("INPUT0", GOOD, "FP32")], model_version="7")
    assert err.status() == "StatusCode.NOT_FOUND"
    assert "no version 7" in err.message() and "[1]" in err.message()


@pytest.mark.parametrize("version", [
    "\u00b2",  # superscript two: str.isdigit() says yes, int() refuses it
    "\u0967",  # Devanagari one: int() reads 1
    "\uff11",  # fullwidth one: int() reads 1
    "\u0661",  # Arabic-Indic one
    "9" * 5000,  # more digits than int() converts
    "9" * 19,  # beyond int64
    " 1", "1 ", "+1", "1_0", "0x1",
], ids=["superscript", "devanagari", "fullwidth", "arabic-indic", "5000-digits", "19-digits", "leading-space",
        "trailing-space", "plus", "underscore", "hex"])
def test_a_version_that_is_not_ascii_digits_is_invalid_everywhere(server, version):
    request = service_pb2.ModelInferRequest(model_name="identity", model_version=version)
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(GOOD.tobytes())
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        calls = {
            "ModelInfer": lambda: stub.ModelInfer(request, timeout=10),
            "ModelMetadata": lambda: stub.ModelMetadata(
                service_pb2.ModelMetadataRequest(name="identity", version=version), timeout=10),
            "ModelReady": lambda: stub.ModelReady(service_pb2.ModelReadyRequest(name="identity", version=version),
                                                  timeout=10),
            "ModelStatistics": lambda: stub.ModelStatistics(
                service_pb2.ModelStatisticsRequest(name="identity", version=version), timeout=10),
        }
        for method, call in calls.items():
            with pytest.raises(grpc.RpcError) as info:
                call()
            assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, info.value.details())
            assert "is not a positive integer of 1 to 18 ASCII digits" in info.value.details(), method
            assert len(info.value.details()) < 400, method  # a 5,000-digit version is not echoed whole


def test_a_version_with_leading_zeros_is_that_version(client):
    result = client.infer("identity", [infer_input("INPUT0", GOOD, "FP32")], model_version="001")
    assert result.get_response().model_version == "1"


def test_path_traversal_in_a_model_name_is_invalid(client):
    for name in ("../identity", "a/b", "..", ".hidden"):
        err = rejected(client, name, [infer_input("INPUT0", GOOD, "FP32")])
        assert err.status() == "StatusCode.INVALID_ARGUMENT", name
        assert "invalid model name" in err.message()


def test_wrong_datatype_is_invalid(client):
    err = rejected(client, "identity", [infer_input("INPUT0", GOOD.astype(np.int32), "INT32")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "datatype INT32" in err.message() and "expects FP32" in err.message()


def test_wrong_shape_is_invalid(client):
    err = rejected(client, "identity", [infer_input("INPUT0", np.zeros((1, 15), np.float32), "FP32")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "shape [1, 15]" in err.message() and "[-1, 16]" in err.message()


def test_batch_larger_than_max_batch_size_is_invalid(client):
    err = rejected(client, "batched", [infer_input("INPUT0", np.zeros((9, 16), np.float32), "FP32")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "batch size 9" in err.message()


def test_byte_count_not_matching_the_shape_is_invalid(server):
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.append(b"\x00" * 60)
    err = raw_call(server, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "60 bytes" in err.details() and "needs 64" in err.details()


def test_raw_entries_not_matching_the_inputs_are_invalid(server):
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
    request.raw_input_contents.extend([b"\x00" * 64, b"\x00" * 64])
    err = raw_call(server, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "2 entries for 1 inputs" in err.details()


def test_bad_bytes_tensor_is_invalid(server):
    request = service_pb2.ModelInferRequest(model_name="multi")
    request.inputs.add(name="S", datatype="BYTES", shape=[1, 2])
    request.raw_input_contents.append(b"\x09\x00\x00\x00abc")  # claims 9 bytes, has 3
    err = raw_call(server, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "claims 9 bytes" in err.details()


def test_unknown_datatype_and_negative_dims_are_invalid(server):
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP8", shape=[1, 16])
    request.raw_input_contents.append(b"\x00" * 16)
    assert "unknown datatype 'FP8'" in raw_call(server, request).details()
    request = service_pb2.ModelInferRequest(model_name="identity")
    request.inputs.add(name="INPUT0", datatype="FP32", shape=[-1, 16])
    request.raw_input_contents.append(b"")
    err = raw_call(server, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "negative dimension" in err.details()


def test_missing_input_is_invalid(client):
    err = rejected(client, "multi", [infer_input("F16", np.zeros((1, 3), np.float16), "FP16")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "missing input(s)" in err.message() and "'I32'" in err.message()


def test_unknown_input_is_invalid(client):
    err = rejected(client, "identity", [infer_input("INPUT0", GOOD, "FP32"), infer_input("EXTRA", GOOD, "FP32")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unknown input(s) ['EXTRA']" in err.message()


def test_unknown_requested_output_is_invalid(client):
    err = rejected(client, "identity", [infer_input("INPUT0", GOOD, "FP32")],
                   outputs=[grpcclient.InferRequestedOutput("NOPE")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "unknown output 'NOPE'" in err.message() and "OUTPUT0" in err.message()


def classifier_request(**parameters) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="classifier")
    request.inputs.add(name="LOGITS", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.array([[0, 3, 1, 2]], np.float32).tobytes())
    output = request.outputs.add(name="PROBS")
    for key, value in parameters.items():
        if isinstance(value, str):
            output.parameters[key].string_param = value
        else:
            output.parameters[key].int64_param = value
    return request


@pytest.mark.parametrize("key", ["class_count", "classification"])
@pytest.mark.parametrize(("value", "shown"), [(-1, "-1"), (0, "0"), ("x", "'x'")])
def test_a_class_count_that_is_not_a_positive_integer_is_invalid(server, key, value, shown):
    err = raw_call(server, classifier_request(**{key: value}))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == (f"output 'PROBS': parameter {key} must be a positive integer (the number of top "
                             f"classes to answer), got {shown}")


def test_class_count_asks_for_the_top_classes_as_classification_does(server):
    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for parameters in ({"class_count": 2}, {"classification": 2}, {"class_count": 2, "classification": 2}):
            response = stub.ModelInfer(classifier_request(**parameters))
            assert response.outputs[0].datatype == "BYTES" and list(response.outputs[0].shape) == [1, 2]
            assert b":1:dog" in response.raw_output_contents[0] and b":3:fish" in response.raw_output_contents[0]
    err = raw_call(server, classifier_request(class_count=2, classification=3))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "disagree" in err.details()


def test_undecodable_image_is_invalid(client):
    images = np.array([b"not an image"], dtype=object)
    err = rejected(client, "image", [infer_input("IMAGE", images, "BYTES")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "not a decodable PNG/JPEG image" in err.message()


def test_fp16_in_typed_contents_is_invalid(server):
    request = service_pb2.ModelInferRequest(model_name="identity")
    tensor = request.inputs.add(name="INPUT0", datatype="FP16", shape=[1, 16])
    tensor.contents.fp32_contents.extend([0.0] * 16)
    err = raw_call(server, request)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "no typed contents field" in err.details()


def test_oversized_message_is_resource_exhausted(client):
    big = np.zeros((1, 17 * 1024 * 1024), np.float32)  # 68 MiB > the 64 MiB default
    b = grpcclient.InferInput("INPUT0", list(big.shape), "FP32")
    b.set_data_from_numpy(big)
    err = rejected(client, "identity", [b])
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED"


def test_full_queue_is_resource_exhausted(server):
    """The slow model allows 1 running + 2 queued requests; a burst of 8 overflows it."""
    import asyncio

    import tritonclient.grpc.aio as aioclient

    async def burst() -> list:
        client = aioclient.InferenceServerClient(server.address)
        try:
            # Large enough that each execution outlasts the burst's arrival on a busy machine.
            tensor = aioclient.InferInput("X", [256, 512], "FP32")
            tensor.set_data_from_numpy(np.ones((256, 512), np.float32))
            return await asyncio.gather(*(client.infer("slow", [tensor]) for _ in range(8)),
                                        return_exceptions=True)
        finally:
            await client.close()

    results = asyncio.run(burst())
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors, "no request was refused"
    assert all(e.status() == "StatusCode.RESOURCE_EXHAUSTED" for e in errors)
    assert "queue full" in errors[0].message()
    assert len(errors) < len(results)


def test_deadline_is_deadline_exceeded(client):
    big = grpcclient.InferInput("X", [256, 512], "FP32")
    big.set_data_from_numpy(np.ones((256, 512), np.float32))
    with pytest.raises(InferenceServerException) as info:
        client.infer("slow", [big], client_timeout=0.001)
    assert info.value.status() == "StatusCode.DEADLINE_EXCEEDED"


@pytest.fixture(scope="module")
def open_size_server(tmp_path_factory):
    """A max-pooling model (ONNX Runtime refuses an empty image), batched, of open height and
    width; and an identity of open sizes (runs on anything)."""
    from lite.format import GraphBuilder, save

    from .conftest import identity_model, start_server, write_config

    root = tmp_path_factory.mktemp("open-sizes")
    builder = GraphBuilder("pool")
    x = builder.input("IMAGE", np.float32, ["N", 3, "H", "W"])
    pooled = builder.node("MaxPool", [x], outputs=["POOLED"], kernel_shape=[2, 2], strides=[2, 2])
    builder.output(pooled, np.float32, ["N", 3, "H2", "W2"])
    (root / "pool" / "1").mkdir(parents=True)
    save(builder.build(), str(root / "pool" / "1" / "model.lite"))
    write_config(root / "pool", {"max_batch_size": 4})
    identity_model(root / "open" / "1" / "model.lite", shape=("N", "M"))
    server = start_server(root)
    yield server
    server.stop()


@pytest.mark.parametrize("shape", [(1, 3, 0, 56), (2, 3, 8, 0)])
def test_a_model_that_fails_on_an_empty_dimension_answers_invalid_argument(open_size_server, shape):
    with grpcclient.InferenceServerClient(open_size_server.address) as client:
        err = rejected(client, "pool", [infer_input("IMAGE", np.zeros(shape, np.float32), "FP32")])
        assert err.status() == "StatusCode.INVALID_ARGUMENT", err.message()
        assert f"does not run on input 'IMAGE' of shape {list(shape)} (an empty dimension)" in err.message()


def test_empty_extents_a_model_takes_are_served(open_size_server):
    with grpcclient.InferenceServerClient(open_size_server.address) as client:
        for shape in [(5, 0), (0, 5)]:
            result = client.infer("open", [infer_input("INPUT0", np.zeros(shape, np.float32), "FP32")])
            assert result.as_numpy("OUTPUT0").shape == shape


@pytest.fixture(scope="module")
def string_server(tmp_path_factory):
    """A string model: StringNormalizer upper-cases a STRING [N] input."""
    from lite.format import GraphBuilder, save

    from .conftest import start_server

    root = tmp_path_factory.mktemp("strings")
    builder = GraphBuilder("upper", opset=18)
    text = builder.input("TEXT", np.object_, ["N"])
    upper = builder.node("StringNormalizer", [text], outputs=["UPPER"], case_change_action="UPPER")
    builder.output(upper, np.object_, ["N"])
    (root / "upper" / "1").mkdir(parents=True)
    save(builder.build(), str(root / "upper" / "1" / "model.lite"))
    server = start_server(root)
    yield server
    server.stop()


def test_bytes_that_are_not_utf8_sent_to_a_string_model_are_invalid_without_a_traceback(string_server):
    """BYTES elements are any bytes on the wire; a string model reads them as UTF-8 text, so
    other bytes are the client's error (INVALID_ARGUMENT naming the input and element), not the
    model failing (INTERNAL, with a traceback logged on every such request)."""
    with grpcclient.InferenceServerClient(string_server.address) as client:
        good = client.infer("upper", [infer_input("TEXT", np.array([b"ok", "\u00e9".encode()], object), "BYTES")])
        assert good.as_numpy("UPPER").tolist() == [b"OK", "\u00c9".encode()]
        logged = len(string_server.logs)
        err = rejected(client, "upper", [infer_input("TEXT", np.array([b"ok", b"\xffA"], object), "BYTES")])
    assert err.status() == "StatusCode.INVALID_ARGUMENT", err.message()
    assert "input X element [1] is not UTF-8 text" in err.message() and "StringNormalizer" in err.message(), err.message()
    assert not any("Traceback" in line for line in string_server.logs[logged:])
