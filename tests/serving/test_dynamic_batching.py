"""Dynamic batching end to end: a small CNN converted from ONNX (the path bench/serving_batching.py
takes with ResNet-18), 8 concurrent single-image clients, through a real server.

Asserts that batching happens (ModelStatistics shows executions of more than one request) and
that every client gets the answer to its own image, checked against the numpy engine; also with
batches padded to declared sizes (``pad_batches``, the default on a GPU).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import tritonclient.grpc.aio as aioclient
from onnx import TensorProto, helper, numpy_helper

import lite
from lite.format import save

from .conftest import start_server

CLIENTS = 8
REQUESTS_PER_CLIENT = 6
IMAGE = (3, 16, 16)


def small_cnn() -> onnx.ModelProto:
    """Conv(3->8, 3x3) -> Relu -> MaxPool -> Conv(8->16) -> Relu -> GlobalAveragePool -> Flatten
    -> Gemm(16->10), with a variable batch dimension."""
    rng = np.random.default_rng(0)

    def weight(name: str, shape: tuple) -> TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)

    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]
    initializers = [weight("w1", (8, 3, 3, 3)), weight("b1", (8,)), weight("w2", (16, 8, 3, 3)),
                    weight("b2", (16,)), weight("w3", (10, 16)), weight("b3", (10,))]
    graph = helper.make_graph(
        nodes, "small_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", *IMAGE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.fixture(scope="module", params=[{}, {"preferred_batch_sizes": [4], "pad_batches": True}],
                ids=["merged", "padded-to-1-4-8"])
def cnn_repository(tmp_path_factory, request) -> Path:
    converter = pytest.importorskip("converter")
    root = tmp_path_factory.mktemp("batching-repository")
    (root / "cnn" / "1").mkdir(parents=True)
    save(converter.convert_model(small_cnn(), dynamic_batch=True), str(root / "cnn" / "1" / "model.lite"))
    # A long delay lets the 8 clients' requests meet in the queue even on a busy machine.
    (root / "cnn" / "config.json").write_text(json.dumps({
        "max_batch_size": CLIENTS, "dynamic_batching": {"max_queue_delay_us": 50_000, **request.param},
    }))
    return root


@pytest.mark.slow
def test_concurrent_single_image_clients_are_batched_and_answered_exactly(cnn_repository):
    reference = lite.Model.load(cnn_repository / "cnn" / "1" / "model.lite", device="numpy")
    input_name = reference.inputs[0].name
    output_name = reference.outputs[0].name
    rng = np.random.default_rng(1)
    images = rng.standard_normal((CLIENTS, REQUESTS_PER_CLIENT, 1, *IMAGE), dtype=np.float32)
    server = start_server(cnn_repository)
    try:
        async def scenario() -> tuple[np.ndarray, dict]:
            client = aioclient.InferenceServerClient(server.address)
            answers = np.zeros((CLIENTS, REQUESTS_PER_CLIENT, 1, 10), np.float32)

            async def caller(index: int) -> None:
                for step in range(REQUESTS_PER_CLIENT):
                    tensor = aioclient.InferInput(input_name, [1, *IMAGE], "FP32")
                    tensor.set_data_from_numpy(images[index, step])
                    result = await client.infer("cnn", [tensor], request_id=f"{index}-{step}",
                                                client_timeout=30)
                    assert result.get_response().id == f"{index}-{step}"
                    answers[index, step] = result.as_numpy(output_name)

            try:
                await asyncio.wait_for(asyncio.gather(*(caller(i) for i in range(CLIENTS))), 60)
                stats = await client.get_inference_statistics("cnn", as_json=True)
            finally:
                await client.close()
            return answers, stats["model_stats"][0]

        answers, stats = asyncio.run(scenario())
    finally:
        server.stop()

    expected = reference.predict({input_name: images.reshape(-1, *IMAGE)})[output_name]
    np.testing.assert_allclose(answers.reshape(-1, 10), expected, rtol=1e-4, atol=1e-4)
    total = CLIENTS * REQUESTS_PER_CLIENT
    assert int(stats["inference_count"]) == total
    sizes = {int(b["batch_size"]): int(b["compute_infer"]["count"]) for b in stats["batch_stats"]}
    assert max(sizes) > 1, f"no execution held more than one request: {sizes}"
    assert sum(size * count for size, count in sizes.items()) == total
    assert int(stats["execution_count"]) < total


def _resident_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line")


def test_batches_of_ever_new_widths_do_not_grow_the_server(tmp_path):
    """An input whose non-batch dimension varies (["N", "M"]): every width merged into a batch
    left its merge buffer in the pool for good, so a client sending new widths grew the server
    by a buffer each time (about 128 MiB for these 100 widths)."""
    from .conftest import identity_model, write_config

    identity_model(tmp_path / "varwidth" / "1" / "model.lite", shape=("N", "M"))
    write_config(tmp_path / "varwidth", {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 50_000}})
    server = start_server(tmp_path)

    async def send_pairs(widths: range) -> dict:
        client = aioclient.InferenceServerClient(server.address)
        try:
            for width in widths:
                tensor = aioclient.InferInput("INPUT0", [4, width], "FP32")
                tensor.set_data_from_numpy(np.full((4, width), width, np.float32))
                answers = await asyncio.gather(*(client.infer("varwidth", [tensor]) for _ in range(2)))
                assert all(a.as_numpy("OUTPUT0").shape == (4, width) for a in answers)
            return (await client.get_inference_statistics("varwidth", as_json=True))["model_stats"][0]
        finally:
            await client.close()

    try:
        asyncio.run(send_pairs(range(40_000, 40_008)))  # the server's own allocations settle
        before = _resident_mib(server.process.pid)
        stats = asyncio.run(send_pairs(range(41_000, 41_100)))
        grown = _resident_mib(server.process.pid) - before
    finally:
        server.stop()
    assert int(stats["execution_count"]) < int(stats["inference_count"])  # requests were merged
    assert grown < 40, f"the server grew by {grown:.0f} MiB"


def _embedding_model(path: Path) -> None:
    """Gather rows of a 10-row table: an id past it is a request the model rejects."""
    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["rows"], axis=0)], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["N", 1])],
        [helper.make_tensor_value_info("rows", TensorProto.FLOAT, ["N", 1, 4])], [table],
    )
    converter = pytest.importorskip("converter")
    path.parent.mkdir(parents=True)
    save(converter.convert_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                 dynamic_batch=True), str(path))


def test_a_request_the_model_rejects_fails_alone_not_the_batch_it_was_merged_into(tmp_path):
    _embedding_model(tmp_path / "embedding" / "1" / "model.lite")
    (tmp_path / "embedding" / "config.json").write_text(json.dumps(
        {"max_batch_size": CLIENTS, "dynamic_batching": {"max_queue_delay_us": 100_000}}))
    server = start_server(tmp_path, "--device", "numpy")

    async def scenario() -> tuple[list, dict]:
        client = aioclient.InferenceServerClient(server.address)

        async def call(row: int):
            tensor = aioclient.InferInput("ids", [1, 1], "INT64")
            tensor.set_data_from_numpy(np.array([[row]], np.int64))
            try:
                return (await client.infer("embedding", [tensor], client_timeout=30)).as_numpy("rows")
            except Exception as err:  # the rejected request's answer
                return err

        try:
            answers = await asyncio.gather(*(call(row if row != 3 else 5000) for row in range(CLIENTS)))
            stats = (await client.get_inference_statistics("embedding", as_json=True))["model_stats"][0]
        finally:
            await client.close()
        return answers, stats

    try:
        answers, stats = asyncio.run(scenario())
    finally:
        server.stop()
    for row, answer in enumerate(answers):
        if row == 3:
            assert isinstance(answer, Exception) and "5000" in str(answer) and "INVALID_ARGUMENT" in str(answer)
        else:
            assert not isinstance(answer, Exception), (row, answer)
            np.testing.assert_array_equal(answer, np.arange(4 * row, 4 * row + 4, dtype=np.float32)[None, None])
    sizes = {int(b["batch_size"]) for b in stats.get("batch_stats", [])}
    assert max(sizes, default=0) > 1, stats  # the good requests still ran merged


def test_requests_of_two_shapes_queued_alternately_are_batched_by_shape(tmp_path):
    """Sentences of two lengths, alternating: each batch ended at the first request of the other
    length, so every request ran alone."""
    from .conftest import identity_model, write_config

    identity_model(tmp_path / "varwidth" / "1" / "model.lite", shape=("N", "M"))
    write_config(tmp_path / "varwidth", {"max_batch_size": 8, "dynamic_batching": {"max_queue_delay_us": 200_000}})
    server = start_server(tmp_path)

    async def alternating() -> tuple[list, dict]:
        client = aioclient.InferenceServerClient(server.address)

        async def call(index: int) -> np.ndarray:
            width = 8 if index % 2 else 16
            tensor = aioclient.InferInput("INPUT0", [1, width], "FP32")
            tensor.set_data_from_numpy(np.full((1, width), index, np.float32))
            return (await client.infer("varwidth", [tensor], client_timeout=30)).as_numpy("OUTPUT0")

        try:
            answers = await asyncio.gather(*(call(index) for index in range(16)))
            return answers, (await client.get_inference_statistics("varwidth", as_json=True))["model_stats"][0]
        finally:
            await client.close()

    try:
        answers, stats = asyncio.run(alternating())
    finally:
        server.stop()
    for index, answer in enumerate(answers):
        np.testing.assert_array_equal(answer, np.full((1, 8 if index % 2 else 16), index, np.float32))
    assert int(stats["inference_count"]) == 16
    assert int(stats["execution_count"]) <= 8, stats
