"""``--ort-thread-pools shared``: the models' ONNX Runtime sessions run on one shared thread pool,
not a pool per model.

With a pool per session, every model adds its intra-op workers to the process: 300 small models
took 614 threads on a 2-core machine, and each session adds a thread per core beyond the first.
``--threads 2`` makes the count the same on any machine: a pool of its own costs each session one
worker thread, the shared pool one in all.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from lite.format import GraphBuilder

from .conftest import _save, start_server, write_config

pytest.importorskip("onnxruntime", minversion="1.23", reason="the shared pool needs onnxruntime 1.23 or later")
pytest.importorskip("onnx", reason="the ONNX Runtime engine needs onnx")

MODELS = 40
# Besides one instance thread per model, the server's own threads: the event loop's, gRPC's, the
# metrics endpoint's (about 12). A worker per model would add MODELS more.
SPARE = 25


def add_model(path: Path, constant: float) -> None:
    builder = GraphBuilder("add")
    x = builder.input("INPUT0", np.float32, [1, 16])
    y = builder.node("Add", [x, builder.constant("c", np.full([1, 16], constant, np.float32))], outputs=["OUTPUT0"])
    builder.output(y, np.float32, [1, 16])
    _save(builder.build(), path)


@pytest.fixture(scope="module")
def many_models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("many")
    for index in range(MODELS):
        add_model(root / f"add{index:02d}" / "1" / "model.lite", index)
    return root


def threads_of(pid: int) -> int:
    return len(list(Path(f"/proc/{pid}/task").iterdir()))


def answer(server, model: str) -> np.ndarray:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(server.address)
    try:
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        return client.infer(model, [tensor]).as_numpy("OUTPUT0")
    finally:
        client.close()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_many_models_share_one_thread_pool(many_models):
    server = start_server(many_models, "--device", "cpu", "--threads", "2", "--ort-thread-pools", "shared",
                          timeout=120)
    try:
        assert float(answer(server, "add07")[0, 0]) == 8.0
        assert threads_of(server.process.pid) <= MODELS + SPARE
    finally:
        server.stop()


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_a_pool_per_session_when_asked(many_models):
    # The other side of the bound above: with a pool per session the same repository takes a
    # worker thread per model more.
    server = start_server(many_models, "--device", "cpu", "--threads", "2", "--ort-thread-pools", "session",
                          timeout=120)
    try:
        assert float(answer(server, "add07")[0, 0]) == 8.0
        assert threads_of(server.process.pid) > MODELS + SPARE
    finally:
        server.stop()


@pytest.mark.slow
def test_a_model_that_sets_threads_is_served_on_the_shared_pool_with_a_warning(tmp_path):
    # ONNX Runtime builds no session with a pool of its own once the shared pool exists.
    add_model(tmp_path / "own" / "1" / "model.lite", 2.0)
    write_config(tmp_path / "own", {"threads": 3})
    server = start_server(tmp_path, "--device", "cpu", "--ort-thread-pools", "shared", timeout=60)
    try:
        assert float(answer(server, "own")[0, 0]) == 3.0
        warnings = [line for line in server.logs if "threads=3 of its config.json does not apply" in line]
        assert len(warnings) == 1 and "--ort-thread-pools session" in warnings[0]
    finally:
        server.stop()
