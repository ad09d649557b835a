"""What a request may make the server hold: tensors whose declared shapes claim more than their
bytes (a zero dimension carries no data whatever the others are), outputs predicted from the
inputs' shapes, and the answers a stream keeps for a client that does not read them.

One server with a 1 MiB message limit, so that every bound is small and reached quickly.
"""

from __future__ import annotations

import io
import struct
import time
import zlib
from pathlib import Path

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from lite.format import GraphBuilder, save

from .conftest import identity_model, image_model, start_server, write_config

MIB = 1024 * 1024
TIMEOUT = 10.0
STREAM_LIMIT = 2  # requests one stream may hold (running, or answered and not yet sent)


def matmul_model(path: Path) -> None:
    """a [N, K] @ b [K, M] -> y [N, M]: empty inputs (K = 0) make a full output of zeros."""
    builder = GraphBuilder("matmul")
    a = builder.input("a", np.float32, ["N", "K"])
    b = builder.input("b", np.float32, ["K", "M"])
    builder.output(builder.node("MatMul", [a, b], outputs=["y"]), np.float32, ["N", "M"])
    path.parent.mkdir(parents=True, exist_ok=True)
    save(builder.build(), str(path))


def expand_model(path: Path) -> None:
    """x [1] expanded to the shape the input ``shape`` holds: the output's size depends on the
    data, not on the input shapes (declared dims no input has), so it cannot be predicted."""
    builder = GraphBuilder("expand")
    x = builder.input("x", np.float32, [1])
    shape = builder.input("shape", np.int64, [2])
    builder.output(builder.node("Expand", [x, shape], outputs=["y"]), np.float32, ["rows", "columns"])
    path.parent.mkdir(parents=True, exist_ok=True)
    save(builder.build(), str(path))


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("limits-repository")
    matmul_model(root / "matmul" / "1" / "model.lite")
    expand_model(root / "expand" / "1" / "model.lite")
    identity_model(root / "dynamic" / "1" / "model.lite", shape=("N", "M"))
    image_model(root / "image" / "1" / "model.lite")
    write_config(root / "image", {"preprocessing": "image"})  # no batching: any number of images
    image_model(root / "image_batched" / "1" / "model.lite")
    write_config(root / "image_batched", {"preprocessing": "image", "max_batch_size": 4})
    server = start_server(root, "--max-message-bytes", str(MIB), "--stream-concurrency", str(STREAM_LIMIT))
    yield server
    server.stop()


@pytest.fixture()
def stub(limited_server):
    with grpc.insecure_channel(limited_server.address) as channel:
        yield service_pb2_grpc.GRPCInferenceServiceStub(channel)


def request(model: str, **shapes: list[int]) -> service_pb2.ModelInferRequest:
    """Inputs of the given shapes, filled with ones (no bytes at all when a dimension is 0)."""
    message = service_pb2.ModelInferRequest(model_name=model)
    for name, shape in shapes.items():
        message.inputs.add(name=name, datatype="FP32", shape=shape)
        message.raw_input_contents.append(b"" if 0 in shape else np.ones(shape, np.float32).tobytes())
    return message


def peak_resident_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError("no VmHWM line")


def refusal(stub, message: service_pb2.ModelInferRequest) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(message, timeout=TIMEOUT)
    return info.value


# ----- declared shapes ---------------------------------------------------------------------------


def test_an_answer_predicted_larger_than_a_message_is_refused_before_the_model_runs(stub):
    # 2 x 16 bytes of shapes and no data; the product would be 1024 x 512 floats, 2 MiB.
    message = request("matmul", a=[1024, 0], b=[0, 512])
    assert message.ByteSize() < 64
    error = refusal(stub, message)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "the answer would hold 2097152 bytes of output data" in error.details()
    assert "output 'y'" in error.details() and f"max_message_bytes {MIB}" in error.details()


def test_an_output_predicted_beyond_the_element_limit_is_refused_even_when_not_answered(limited_server, stub):
    peak = peak_resident_kb(limited_server.process.pid)
    message = request("matmul", a=[1 << 13, 0], b=[0, 1 << 13])  # 2**26 floats: 256 MiB
    message.outputs.add(name="y").parameters["classification"].int64_param = 1  # answers one string per row
    error = refusal(stub, message)
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "output 'y' (declared ['N', 'M']) would have 67108864 elements" in error.details()
    assert f"limit is {MIB} elements per tensor" in error.details()
    assert peak_resident_kb(limited_server.process.pid) - peak < 16 * 1024  # none of the 256 MiB was made


@pytest.mark.parametrize(("shape", "code", "words"), [
    ([2**31, 0], grpc.StatusCode.INVALID_ARGUMENT, "dimension 2147483648 is larger than 2147483647"),
    ([2**63 - 1, 0], grpc.StatusCode.INVALID_ARGUMENT, "is larger than 2147483647"),
    ([2 * MIB, 0], grpc.StatusCode.RESOURCE_EXHAUSTED,
     f"2097152 elements counting its non-zero dimensions; the server's limit is {MIB} elements per tensor"),
    ([1024, 0, 1025], grpc.StatusCode.RESOURCE_EXHAUSTED, "1049600 elements counting its non-zero dimensions"),
], ids=["2**31", "int64-max", "twice-the-limit", "three-dims"])
def test_an_empty_input_that_claims_too_many_elements_is_refused(stub, shape, code, words):
    error = refusal(stub, request("dynamic", INPUT0=shape))
    assert error.code() == code
    assert "input 'INPUT0'" in error.details() and words in error.details(), error.details()


def test_requests_within_the_limits_are_served(stub):
    response = stub.ModelInfer(request("matmul", a=[2, 3], b=[3, 4]), timeout=TIMEOUT)
    assert list(response.outputs[0].shape) == [2, 4]
    y = np.frombuffer(response.raw_output_contents[0], np.float32)
    np.testing.assert_array_equal(y, np.full(8, 3.0, np.float32))
    for shape in ([MIB, 0], [0, 5], [256, 512]):  # at the limit, empty, half a message of data
        response = stub.ModelInfer(request("dynamic", INPUT0=shape), timeout=TIMEOUT)
        assert list(response.outputs[0].shape) == shape
    response = stub.ModelInfer(request("matmul", a=[256, 0], b=[0, 256]), timeout=TIMEOUT)  # 256 KiB of zeros
    assert not np.frombuffer(response.raw_output_contents[0], np.float32).any()


# ----- answers whose size depends on the data -------------------------------------------------------


def expand_request(rows: int, columns: int) -> service_pb2.ModelInferRequest:
    message = service_pb2.ModelInferRequest(model_name="expand", id="big")
    message.inputs.add(name="x", datatype="FP32", shape=[1])
    message.inputs.add(name="shape", datatype="INT64", shape=[2])
    message.raw_input_contents.append(np.ones(1, np.float32).tobytes())
    message.raw_input_contents.append(np.array([rows, columns], np.int64).tobytes())
    return message


def outcomes(metrics_port: int, model: str) -> dict[str, float]:
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("lite_inference_requests_total{") and f'model="{model}"' in line:
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            counts[outcome] = float(line.rsplit(" ", 1)[1])
    return counts


def test_an_answer_larger_than_a_message_is_refused_by_the_server_naming_the_output(limited_server, stub):
    response = stub.ModelInfer(expand_request(64, 1024), timeout=TIMEOUT)  # 256 KiB: served
    assert list(response.outputs[0].shape) == [64, 1024]
    before = outcomes(limited_server.metrics_port, "expand")
    error = refusal(stub, expand_request(512, 1024))  # 2 MiB of floats, 512 Ki elements: within the element limit
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    details = error.details()
    assert "model expand: the answer would be" in details and "output 'y' 2097152 bytes" in details, details
    assert f"max_message_bytes {MIB}" in details and "--max-message-bytes" in details, details
    after = outcomes(limited_server.metrics_port, "expand")
    assert after["success"] == before["success"]
    assert after.get("resource_exhausted", 0) == before.get("resource_exhausted", 0) + 1
    logs = "".join(limited_server.logs)
    assert "ExecuteBatchError" not in logs and "Sent message larger than max" not in logs
    assert logs.count("answer refused") == 1


def test_an_output_beyond_the_element_limit_is_refused_after_the_model_made_it(stub):
    error = refusal(stub, expand_request(2, MIB))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"output 'y' has shape [2, {MIB}], {2 * MIB} elements" in error.details(), error.details()
    assert f"limit is {MIB} elements per tensor (max_tensor_elements)" in error.details()


# ----- streams ---------------------------------------------------------------------------------------


def inference_count(stub, model: str) -> int:
    response = stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name=model), timeout=TIMEOUT)
    return sum(s.inference_count for s in response.model_stats)


def settled_count(stub, model: str, quiet: float = 0.5, limit: float = 10.0) -> int:
    """The model's inference count once it stopped changing for ``quiet`` seconds."""
    deadline = time.monotonic() + limit
    count, since = inference_count(stub, model), time.monotonic()
    while time.monotonic() - since < quiet and time.monotonic() < deadline:
        time.sleep(0.05)
        now = inference_count(stub, model)
        if now != count:
            count, since = now, time.monotonic()
    return count


def test_a_stream_whose_client_does_not_read_stops_taking_requests(stub):
    """Each request is 40 bytes and answers 512 KiB; the client sends 60 and reads nothing. The
    server answers what the connection's flow-control window takes, holds STREAM_LIMIT more, and
    reads no further until the client reads; then every request is answered."""
    before = inference_count(stub, "matmul")
    sent = 60

    def requests():
        for index in range(sent):
            message = request("matmul", a=[256, 0], b=[0, 512])
            message.id = str(index)
            yield message

    answers = stub.ModelStreamInfer(requests(), timeout=60)
    try:
        held_back = settled_count(stub, "matmul") - before
        # Without the bound all 60 ran at once, their 30 MiB of answers queued in the server.
        assert held_back < sent // 2, f"{held_back} of {sent} requests ran while the client read nothing"
        ids = set()
        for answer in answers:
            assert not answer.error_message, answer.error_message
            assert list(answer.infer_response.outputs[0].shape) == [256, 512]
            ids.add(answer.infer_response.id)
            if len(ids) == sent:
                break
        assert ids == {str(i) for i in range(sent)}
    finally:
        answers.cancel()


# ----- encoded images ----------------------------------------------------------------------------


def encoded(image_format: str, size: tuple[int, int] = (8, 8)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, (255, 0, 0)).save(buffer, format=image_format)
    return buffer.getvalue()


def png_declaring(width: int, height: int) -> bytes:
    """A small PNG whose header declares ``width`` x ``height`` (its pixel data is for 1 x 1)."""
    data = bytearray(encoded("PNG", (1, 1)))
    header = b"IHDR" + struct.pack(">II", width, height) + bytes(data[24:29])
    data[12:29] = header
    data[29:33] = struct.pack(">I", zlib.crc32(header))
    return bytes(data)


def image_request(model: str, images: list[bytes]):
    import tritonclient.grpc as grpcclient

    tensor = grpcclient.InferInput("IMAGE", [len(images)], "BYTES")
    tensor.set_data_from_numpy(np.array(images, dtype=object))
    return model, [tensor]


def image_refusal(server, model: str, images: list[bytes]):
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    with grpcclient.InferenceServerClient(server.address) as client, pytest.raises(InferenceServerException) as info:
        client.infer(*image_request(model, images), client_timeout=TIMEOUT)
    return info.value


def test_png_and_jpeg_images_are_served(limited_server):
    import tritonclient.grpc as grpcclient

    with grpcclient.InferenceServerClient(limited_server.address) as client:
        for model in ("image", "image_batched"):
            result = client.infer(*image_request(model, [encoded("PNG"), encoded("JPEG")]), client_timeout=TIMEOUT)
            assert result.as_numpy("MEAN").shape == (2, 3, 1, 1)


@pytest.mark.parametrize("image_format", ["GIF", "BMP", "TIFF", "WEBP"])
def test_images_in_other_formats_are_refused_before_decoding(limited_server, image_format):
    err = image_refusal(limited_server, "image", [encoded("PNG"), encoded(image_format)])
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "image 1: the image: not a decodable PNG/JPEG image (only PNG, JPEG are accepted)" in err.message()


def test_an_image_declaring_too_many_pixels_is_refused_from_its_header(limited_server):
    started = time.monotonic()
    err = image_refusal(limited_server, "image", [png_declaring(8000, 8000)])
    assert time.monotonic() - started < 2
    assert err.status() == "StatusCode.INVALID_ARGUMENT"
    assert "8000x8000 is 64,000,000 pixels, over the limit of 40,000,000 pixels per image" in err.message()


def test_a_request_of_more_images_than_allowed_is_refused_before_any_is_decoded(limited_server):
    png = encoded("PNG")
    err = image_refusal(limited_server, "image", [png] * 9)
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert "9 images in one request; at most 8 (the limit for a model without batching)" in err.message()
    err = image_refusal(limited_server, "image_batched", [png] * 5)
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert "5 images in one request; at most 4 (the model's max_batch_size)" in err.message()
    # Many small bombs: the count is refused before the first is looked at.
    started = time.monotonic()
    err = image_refusal(limited_server, "image", [png_declaring(6000, 6000)] * 200)
    assert err.status() == "StatusCode.RESOURCE_EXHAUSTED" and time.monotonic() - started < 2
