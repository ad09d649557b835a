"""The protocol through a real server process and the real tritonclient (sync, aio, stream); health
and reflection: test_reflection_and_health.py."""

from __future__ import annotations

import asyncio
import collections
import io
import queue
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from .conftest import LABELS, identity_model, start_server, write_config


def infer_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def test_health_and_server_metadata(client):
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("identity")
    assert client.is_model_ready("versioned", "1")
    metadata = client.get_server_metadata(as_json=True)
    assert metadata["name"] == "lite"
    assert "model_repository" in metadata["extensions"]


def test_infer_echoes_id_and_parameters(client):
    x = np.arange(32, dtype=np.float32).reshape(2, 16)
    result = client.infer("identity", [infer_input("INPUT0", x, "FP32")], request_id="req-7",
                          parameters={"tag": "abc", "n": 3})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)
    response = result.get_response()
    assert response.id == "req-7"
    assert response.model_name == "identity" and response.model_version == "1"
    assert response.parameters["tag"].string_param == "abc"
    assert response.parameters["n"].int64_param == 3


def test_every_datatype_round_trips(client):
    arrays = {
        "F16": (np.array([[1.5, -2, 3]], dtype=np.float16), "FP16"),
        "I32": (np.array([[1, -2, 2**31 - 1]], dtype=np.int32), "INT32"),
        "B": (np.array([[True, False, True]]), "BOOL"),
        "S": (np.array([[b"hello", b"\x00\xff"]], dtype=object), "BYTES"),
        "U8": (np.array([[0, 7, 255]], dtype=np.uint8), "UINT8"),
        "F64": (np.array([[1e300, -0.0, np.pi]], dtype=np.float64), "FP64"),
    }
    inputs = [infer_input(name, array, datatype) for name, (array, datatype) in arrays.items()]
    result = client.infer("multi", inputs)
    for name, (array, datatype) in arrays.items():
        assert result.get_output(name + "_OUT").datatype == datatype
        if name != "S":
            np.testing.assert_array_equal(result.as_numpy(name + "_OUT"), array)


def test_bytes_elements_round_trip_unchanged(client):
    inputs = [
        infer_input("F16", np.zeros((1, 3), np.float16), "FP16"),
        infer_input("I32", np.ones((1, 3), np.int32), "INT32"),
        infer_input("B", np.zeros((1, 3), bool), "BOOL"),
        infer_input("S", np.array([[b"hello", b"\x00\xff"]], dtype=object), "BYTES"),
        infer_input("U8", np.zeros((1, 3), np.uint8), "UINT8"),
        infer_input("F64", np.zeros((1, 3), np.float64), "FP64"),
    ]
    got = client.infer("multi", inputs).as_numpy("S_OUT")
    np.testing.assert_array_equal(got, np.array([[b"hello", b"\x00\xff"]], dtype=object))


def test_requested_outputs_are_the_only_ones_returned(client):
    inputs = [
        infer_input("F16", np.zeros((1, 3), np.float16), "FP16"),
        infer_input("I32", np.ones((1, 3), np.int32), "INT32"),
        infer_input("B", np.zeros((1, 3), bool), "BOOL"),
        infer_input("S", np.array([[b"x", b""]], dtype=object), "BYTES"),
        infer_input("U8", np.zeros((1, 3), np.uint8), "UINT8"),
        infer_input("F64", np.zeros((1, 3), np.float64), "FP64"),
    ]
    result = client.infer("multi", inputs, outputs=[grpcclient.InferRequestedOutput("I32_OUT")])
    names = [o.name for o in result.get_response().outputs]
    assert names == ["I32_OUT"]
    np.testing.assert_array_equal(result.as_numpy("I32_OUT"), np.ones((1, 3), np.int32))


def test_typed_contents_are_accepted(server):
    """Inputs in typed ``contents`` (not raw) work; the answer is raw anyway."""
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    with grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        request = service_pb2.ModelInferRequest(model_name="identity")
        tensor = request.inputs.add(name="INPUT0", datatype="FP32", shape=[1, 16])
        tensor.contents.fp32_contents.extend(range(16))
        response = stub.ModelInfer(request)
    assert len(response.raw_output_contents) == 1
    np.testing.assert_array_equal(np.frombuffer(response.raw_output_contents[0], np.float32), np.arange(16))


def test_model_metadata_and_config(client):
    metadata = client.get_model_metadata("batched", as_json=True)
    assert metadata["platform"] == "lite"
    assert metadata["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]}]
    config = client.get_model_config("batched", as_json=True)["config"]
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == ["16"]  # the batch dimension is implied
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == "2000"
    assert config["instance_group"][0]["count"] == 1
    versions = client.get_model_metadata("versioned", as_json=True)["versions"]
    assert versions == ["1", "2"]


def test_versions_and_renames(client):
    x2 = np.ones((1, 2), np.float32)
    x3 = np.ones((1, 3), np.float32)
    assert client.infer("versioned", [infer_input("INPUT0", x2, "FP32")], model_version="1").as_numpy(
        "OUTPUT0").shape == (1, 2)
    assert client.infer("versioned", [infer_input("INPUT0", x3, "FP32")]).get_response().model_version == "2"
    result = client.infer("renamed", [infer_input("INPUT", np.ones((1, 16), np.float32), "FP32")])
    assert result.as_numpy("OUTPUT") is not None


def test_classification_returns_top_k_labels(client):
    logits = np.array([[0.1, 3.0, 0.2, 2.0], [5.0, 0.0, 0.0, 0.0]], dtype=np.float32)
    result = client.infer("classifier", [infer_input("LOGITS", logits, "FP32")],
                          outputs=[grpcclient.InferRequestedOutput("PROBS", class_count=2)])
    top = result.as_numpy("PROBS")
    assert top.shape == (2, 2)
    first = [item.decode().split(":") for item in top[0]]
    assert [(int(i), label) for _, i, label in first] == [(1, "dog"), (3, "fish")]
    assert top[1][0].decode().endswith(":0:" + LABELS[0])


def test_image_preprocessing_accepts_png_bytes(client):
    from PIL import Image

    pixels = np.zeros((16, 16, 3), dtype=np.uint8)
    pixels[..., 0] = 255  # red
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    images = np.array([buffer.getvalue(), buffer.getvalue()], dtype=object)
    result = client.infer("image", [infer_input("IMAGE", images, "BYTES")])
    means = result.as_numpy("MEAN").reshape(2, 3)
    # (pixel / 255 - 0.5) / 0.25: red channel 2.0, the others -2.0
    np.testing.assert_allclose(means[0], [2.0, -2.0, -2.0], atol=1e-5)


def test_statistics_count_requests_and_batches(client):
    before = client.get_inference_statistics("identity", as_json=True)["model_stats"][0]
    x = np.zeros((1, 16), np.float32)
    for _ in range(3):
        client.infer("identity", [infer_input("INPUT0", x, "FP32")])
    stats = client.get_inference_statistics("identity", as_json=True)["model_stats"][0]
    # JSON leaves zero counts out: a model no request has reached yet has none.
    done = int(stats["inference_stats"]["success"]["count"]) - int(before["inference_stats"]["success"].get("count", 0))
    assert done == 3
    assert int(stats["execution_count"]) >= 3
    assert int(stats["inference_stats"]["compute_infer"]["ns"]) > 0
    assert "queue" in stats["inference_stats"]
    every = client.get_inference_statistics(as_json=True)["model_stats"]
    assert {s["name"] for s in every} >= {"identity", "batched", "versioned"}


def test_async_infer_with_the_aio_client(server):
    async def run() -> list[np.ndarray]:
        client = aioclient.InferenceServerClient(server.address)
        try:
            calls = []
            for i in range(8):
                tensor = aioclient.InferInput("INPUT0", [1, 16], "FP32")
                tensor.set_data_from_numpy(np.full((1, 16), i, np.float32))
                calls.append(client.infer("batched", [tensor], request_id=str(i)))
            results = await asyncio.gather(*calls)
            return [r.as_numpy("OUTPUT0") for r in results]
        finally:
            await client.close()

    outputs = asyncio.run(run())
    for i, output in enumerate(outputs):  # batched on the server, split back exactly per request
        np.testing.assert_array_equal(output, np.full((1, 16), i, np.float32))


def test_async_infer_with_the_callback_client(client):
    answers: queue.Queue = queue.Queue()
    x = np.ones((1, 16), np.float32)
    client.async_infer("identity", [infer_input("INPUT0", x, "FP32")],
                       callback=lambda result, error: answers.put((result, error)))
    result, error = answers.get(timeout=10)
    assert error is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), x)


def test_streaming_answers_each_request_and_reports_errors_in_band(client):
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for i in range(5):
            x = np.full((1, 16), i, np.float32)
            client.async_stream_infer("identity", [infer_input("INPUT0", x, "FP32")], request_id=str(i))
        bad = np.zeros((1, 3), np.float32)
        client.async_stream_infer("identity", [infer_input("INPUT0", bad, "FP32")], request_id="bad")
        client.async_stream_infer("identity", [infer_input("INPUT0", np.ones((1, 16), np.float32), "FP32")],
                                  request_id="after")
        got = {}
        errors = []
        for _ in range(7):
            result, error = answers.get(timeout=10)
            if error is not None:
                errors.append(error)
            else:
                got[result.get_response().id] = result.as_numpy("OUTPUT0")
    finally:
        client.stop_stream()
    assert sorted(got) == ["0", "1", "2", "3", "4", "after"]  # the stream survived the bad request
    for i in range(5):
        np.testing.assert_array_equal(got[str(i)], np.full((1, 16), i, np.float32))
    assert len(errors) == 1 and "shape [1, 3]" in errors[0].message()


def test_model_ready_is_false_for_unknown_models_and_versions(client):
    """As Triton answers: tritonclient's is_model_ready() used to raise on NOT_FOUND."""
    assert client.is_model_ready("identity")
    assert not client.is_model_ready("no-such-model")
    assert not client.is_model_ready("identity", "7")


def test_prometheus_metrics(client, server):
    client.infer("identity", [infer_input("INPUT0", np.zeros((1, 16), np.float32), "FP32")])
    with pytest.raises(Exception):
        client.infer("identity", [infer_input("INPUT0", np.zeros((1, 3), np.float32), "FP32")])
    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'lite_inference_requests_total{model="identity",outcome="success",version="1"}' in text
    assert 'outcome="invalid_request"' in text
    assert "lite_inference_queue_duration_seconds_bucket" in text
    assert "lite_inference_compute_duration_seconds_bucket" in text
    assert "lite_inference_batch_size_bucket" in text
    assert "lite_models_loaded" in text


def test_repository_index_lists_models_and_versions(client):
    index = client.get_model_repository_index(as_json=True)["models"]
    entries = {(m["name"], m.get("version", "")): m.get("state") for m in index}
    assert entries[("identity", "1")] == "READY"
    assert entries[("versioned", "2")] == "READY"


def test_device_auto_uses_onnx_runtime_cpu_when_installed(client, server):
    """``--device auto`` (the default) is the runtime's choice: ONNX Runtime's CPU provider here
    (no CUDA), the numpy engine for models with string tensors; ModelConfig says KIND_CPU."""
    import json

    pytest.importorskip("onnxruntime")
    loaded = {}
    for line in server.logs:
        if '"model loaded"' in line:
            entry = json.loads(line)
            loaded[entry["model"]] = entry
    assert loaded["identity"]["requested_device"] == "auto"
    assert loaded["identity"]["device"] in ("cpu", "cuda")
    assert loaded["multi"]["device"] == "numpy"  # a BYTES input: ONNX Runtime holds strings as text only
    group = client.get_model_config("identity", as_json=True)["config"]["instance_group"][0]
    assert group["kind"] == ("KIND_GPU" if loaded["identity"]["device"] == "cuda" else "KIND_CPU")


def test_engine_auto_tunes_for_the_batch_sizes_the_server_runs(tmp_path):
    """``"engine": "auto"`` in a model's config: the server loads it with lite's autotuning for
    1, the preferred batch sizes and max_batch_size, records the decision in lite's cache (where
    ``lite bench --autotune`` and ``lite.Model.load(engine="auto")`` find it) and serves with it."""
    import json

    import tritonclient.grpc as grpcclient

    repo = tmp_path / "repo"
    identity_model(repo / "tuned" / "1" / "model.lite")
    write_config(repo / "tuned", {"max_batch_size": 8, "engine": "auto",
                                  "dynamic_batching": {"preferred_batch_sizes": [4]}})
    cache = tmp_path / "cache"
    server = start_server(repo, env={"XDG_CACHE_HOME": str(cache)}, timeout=120)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        x = np.arange(32, dtype=np.float32).reshape(2, 16)
        tensor = grpcclient.InferInput("INPUT0", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("tuned", [tensor]).as_numpy("OUTPUT0"), x)
        client.close()
    finally:
        server.stop()
    records = list((cache / "lite" / "autotune").rglob("*.json"))
    assert len(records) == 1, records
    decision = json.loads(records[0].read_text())
    assert [bucket["batch"] for bucket in decision["buckets"]] == [1, 4, 8]
    assert any('"engine": "batch 1: ' in line for line in server.logs), server.logs[-5:]


def test_a_converted_classifiers_labels_and_feature_order_reach_clients(tmp_path):
    """scikit-learn models converted by lite keep their class labels per output (``class_labels``)
    and a DictVectorizer's key order (``feature_names``): the top-k answer names the class, and
    ModelConfig's parameters tell a remote client which column is which."""
    import json

    labels, keys = ["setosa", "versicolor", "virginica"], ["petal", "sepal", "stem"]
    identity_model(tmp_path / "iris" / "1" / "model.lite", shape=("N", 3), metadata={
        "class_labels": json.dumps({"OUTPUT0": labels}), "feature_names": json.dumps({"INPUT0": keys})})
    write_config(tmp_path / "iris", {"max_batch_size": 4, "outputs": {"OUTPUT0": "probabilities"}})
    server = start_server(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        scores = np.array([[0.1, 0.7, 0.2], [0.8, 0.1, 0.1]], np.float32)
        result = client.infer("iris", [infer_input("INPUT0", scores, "FP32")],
                              outputs=[grpcclient.InferRequestedOutput("probabilities", class_count=1)])
        top = [row[0].decode() for row in result.as_numpy("probabilities")]
        assert top == ["0.700000:1:versicolor", "0.800000:0:setosa"]
        parameters = client.get_model_config("iris", as_json=True)["config"]["parameters"]
        assert json.loads(parameters["class_labels"]["string_value"]) == {"probabilities": labels}
        assert json.loads(parameters["feature_names"]["string_value"]) == {"INPUT0": keys}
        client.close()
    finally:
        server.stop()


BURST = 2500  # concurrent calls: past gRPC core's default of 1000 calls waiting for the server


def test_a_burst_of_calls_is_answered_or_refused_never_cancelled(server):
    """Calls beyond what gRPC's core held for the server were cancelled by the core (CANCELLED,
    which clients take for their own doing); every call is now answered, or refused by a full
    queue (the slow model holds 2) with RESOURCE_EXHAUSTED."""
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    def message(model: str, name: str, width: int) -> service_pb2.ModelInferRequest:
        request = service_pb2.ModelInferRequest(model_name=model)
        request.inputs.add(name=name, datatype="FP32", shape=[1, width])
        request.raw_input_contents.append(np.ones((1, width), np.float32).tobytes())
        return request

    requests = [message("identity", "INPUT0", 16), message("slow", "X", 512)]

    async def burst() -> collections.Counter:
        counts: collections.Counter = collections.Counter()
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)

            async def call(request) -> None:
                try:
                    await stub.ModelInfer(request, timeout=60)
                    counts[request.model_name, "OK"] += 1
                except grpc.aio.AioRpcError as error:
                    counts[request.model_name, error.code().name] += 1

            await asyncio.gather(*(call(requests[i % 2]) for i in range(BURST)))
        return counts

    counts = asyncio.run(burst())
    assert set(counts) <= {("identity", "OK"), ("slow", "OK"), ("slow", "RESOURCE_EXHAUSTED")}, counts
    assert counts["identity", "OK"] == BURST // 2, counts
