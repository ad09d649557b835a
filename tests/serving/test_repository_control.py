"""Load/unload through the API, hot reload without dropping requests, polling, control disabled,
and graceful shutdown on SIGTERM. Each test owns its repository and server."""

from __future__ import annotations

import asyncio
import shutil
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.utils import InferenceServerException

from lite.format import GraphBuilder, save

from .conftest import identity_model, request_counts, slow_model, start_server, write_config


def ones(client_module, name: str, shape: list[int]):
    tensor = client_module.InferInput(name, shape, "FP32")
    tensor.set_data_from_numpy(np.ones(shape, np.float32))
    return tensor


def test_load_and_unload_through_the_api(tmp_path):
    identity_model(tmp_path / "a" / "1" / "model.lite")
    identity_model(tmp_path / "b" / "1" / "model.lite")
    server = start_server(tmp_path, "--model", "a")
    try:
        client = grpcclient.InferenceServerClient(server.address)
        assert not _ready_or_missing(client, "b")
        client.load_model("b")
        assert client.is_model_ready("b")
        client.infer("b", [ones(grpcclient, "INPUT0", [1, 16])])
        client.unload_model("b")
        with pytest.raises(InferenceServerException) as info:
            client.infer("b", [ones(grpcclient, "INPUT0", [1, 16])])
        assert info.value.status() == "StatusCode.NOT_FOUND"
        assert "unloaded" in info.value.message()
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["b"]["state"] == "UNAVAILABLE"
        with pytest.raises(InferenceServerException) as info:
            client.load_model("../a")
        assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
        with pytest.raises(InferenceServerException) as info:
            client.load_model("missing")
        assert info.value.status() == "StatusCode.NOT_FOUND"
        client.close()
    finally:
        server.stop()


def _ready_or_missing(client, name: str) -> bool:
    try:
        return client.is_model_ready(name)
    except InferenceServerException:
        return False


def test_a_broken_model_fails_to_load_with_a_reason(tmp_path):
    """The reason names the file inside the repository, never where the server keeps it."""
    identity_model(tmp_path / "good" / "1" / "model.lite")
    (tmp_path / "broken" / "1").mkdir(parents=True)
    (tmp_path / "broken" / "1" / "model.lite").write_bytes(b"not a model at all")
    server = start_server(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        assert client.is_model_ready("good")
        with pytest.raises(InferenceServerException) as info:
            client.load_model("broken")
        assert info.value.status() == "StatusCode.FAILED_PRECONDITION"
        assert "cannot load" in info.value.message()
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["broken"]["state"] == "UNAVAILABLE" and "cannot load" in index["broken"]["reason"]
        with pytest.raises(InferenceServerException) as missing:
            client.load_model("missing")
        for text in (info.value.message(), index["broken"]["reason"], missing.value.message()):
            assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text, text
        assert "broken/1/model.lite" in info.value.message() and "broken/1/model.lite" in index["broken"]["reason"]
        assert "model repository <repository>" in missing.value.message()
        client.close()
    finally:
        server.stop()


def test_engine_options_reach_the_engine_and_a_wrong_one_says_which(tmp_path):
    """A model's ``engine_options`` are its engine's load options: served with them when they
    apply, and a model whose options the engine does not know fails to load naming the option
    and the valid ones (the other models serve on)."""
    pytest.importorskip("onnxruntime")
    identity_model(tmp_path / "tuned" / "1" / "model.lite")
    write_config(tmp_path / "tuned", {"engine": "onnxruntime", "engine_options": {"optimization": "basic"}})
    identity_model(tmp_path / "typo" / "1" / "model.lite")
    write_config(tmp_path / "typo", {"engine": "onnxruntime", "engine_options": {"optimisation": "basic"}})
    server = start_server(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        assert client.is_model_ready("tuned")
        x = np.arange(16, dtype=np.float32).reshape(1, 16)
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(x)
        np.testing.assert_array_equal(client.infer("tuned", [tensor]).as_numpy("OUTPUT0"), x)
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["typo"]["state"] == "UNAVAILABLE"
        assert "optimisation" in index["typo"]["reason"] and "optimization" in index["typo"]["reason"]
        client.close()
    finally:
        server.stop()

def test_repository_control_can_be_disabled(tmp_path):
    identity_model(tmp_path / "a" / "1" / "model.lite")
    server = start_server(tmp_path, "--no-repository-control")
    try:
        client = grpcclient.InferenceServerClient(server.address)
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as info:
                call("a")
            assert info.value.status() == "StatusCode.PERMISSION_DENIED"
        assert client.is_model_ready("a")
        client.close()
    finally:
        server.stop()


@pytest.mark.slow
def test_reload_and_unload_never_drop_in_flight_requests(tmp_path):
    slow_model(tmp_path / "m" / "1" / "model.lite")
    write_config(tmp_path / "m", {"instance_count": 1})
    server = start_server(tmp_path)

    async def scenario() -> tuple[list, list]:
        client = aioclient.InferenceServerClient(server.address)
        try:
            tensor = ones(aioclient, "X", [1024, 512])
            first = [asyncio.ensure_future(client.infer("m", [tensor])) for _ in range(4)]
            # Swap only once the server holds all four (a request still on its way when the model is
            # gone is refused, which is right but not this test's point).
            await asyncio.to_thread(_wait_for, lambda: _arrived(server.metrics_port, "m") >= 4)
            # a new version appears and is loaded while requests run and wait on version 1
            slow_model(tmp_path / "m" / "2" / "model.lite")
            await client.load_model("m")
            assert (await client.get_model_metadata("m", as_json=True))["versions"] == ["2"]
            second = [asyncio.ensure_future(client.infer("m", [tensor])) for _ in range(2)]
            await asyncio.to_thread(_wait_for, lambda: _arrived(server.metrics_port, "m", version="2") >= 2)
            await client.unload_model("m")  # drains version 2's queue before returning
            return await asyncio.gather(*first, return_exceptions=True), await asyncio.gather(
                *second, return_exceptions=True)
        finally:
            await client.close()

    try:
        first, second = asyncio.run(scenario())
    finally:
        server.stop()
    assert all(not isinstance(r, Exception) for r in first), first
    # requests that reached version 1 before the swap finished there; none was dropped
    assert "1" in {r.get_response().model_version for r in first}
    assert all(not isinstance(r, Exception) for r in second), second
    assert {r.get_response().model_version for r in second} == {"2"}


def two_output_model(path) -> None:
    """x -> y1 = x, y2 = -x."""
    b = GraphBuilder("two")
    x = b.input("x", np.float32, ["N", 4])
    b.output(b.node("Identity", [x], outputs=["y1"]), np.float32, ["N", 4])
    b.output(b.node("Neg", [x], outputs=["y2"]), np.float32, ["N", 4])
    path.parent.mkdir(parents=True, exist_ok=True)
    save(b.build(), str(path))


@pytest.mark.parametrize(("renames", "words"), [
    ({"outputs": {"y2": "y1"}}, ("outputs ['y1', 'y2'] would all be served as 'y1'",)),
    ({"outputs": {"y1": "z", "y2": "z"}}, ("['y1', 'y2'] are all renamed to 'z'",)),
    ({"inputs": {"x": "y1"}}, ("output 'y1' and input 'x' would both be served as 'y1'",)),
    ({"outputs": {"y2": "x"}}, ("output 'y2' and input 'x' would both be served as 'x'",)),
], ids=["output-takes-another-outputs-name", "two-outputs-one-name", "input-takes-an-outputs-name",
        "output-takes-an-inputs-name"])
def test_a_renaming_that_gives_two_tensors_one_served_name_fails_the_load(tmp_path, renames, words):
    two_output_model(tmp_path / "clash" / "1" / "model.lite")
    write_config(tmp_path / "clash", renames)
    two_output_model(tmp_path / "swap" / "1" / "model.lite")
    write_config(tmp_path / "swap", {"outputs": {"y1": "y2", "y2": "y1"}})  # a swap names each tensor once
    server = start_server(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["clash"]["state"] == "UNAVAILABLE"
        with pytest.raises(InferenceServerException) as info:
            client.load_model("clash")
        assert info.value.status() == "StatusCode.FAILED_PRECONDITION"
        assert all(w in info.value.message() for w in words), info.value.message()
        x = client_input("x", np.arange(4, dtype=np.float32).reshape(1, 4))
        result = client.infer("swap", [x], outputs=[grpcclient.InferRequestedOutput("y1")])
        np.testing.assert_array_equal(result.as_numpy("y1"), -np.arange(4, dtype=np.float32).reshape(1, 4))
        client.close()
    finally:
        server.stop()


def client_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), "FP32")
    tensor.set_data_from_numpy(array)
    return tensor


@pytest.mark.slow
def test_polling_picks_up_new_changed_and_removed_models(tmp_path):
    identity_model(tmp_path / "a" / "1" / "model.lite")
    server = start_server(tmp_path, "--poll-interval-s", "0.2")
    try:
        client = grpcclient.InferenceServerClient(server.address)
        identity_model(tmp_path / "b" / "1" / "model.lite")
        _wait_for(lambda: _ready_or_missing(client, "b"))
        identity_model(tmp_path / "a" / "2" / "model.lite", shape=("N", 4))
        _wait_for(lambda: client.get_model_metadata("a", as_json=True)["versions"] == ["2"])
        shutil.rmtree(tmp_path / "b")
        _wait_for(lambda: not _ready_or_missing(client, "b"))
        client.close()
    finally:
        server.stop()


@pytest.mark.slow
def test_sigterm_finishes_in_flight_requests_then_exits(tmp_path):
    slow_model(tmp_path / "m" / "1" / "model.lite")
    server = start_server(tmp_path)

    async def scenario() -> list:
        client = aioclient.InferenceServerClient(server.address)
        try:
            tensor = ones(aioclient, "X", [2048, 512])
            calls = [asyncio.ensure_future(client.infer("m", [tensor])) for _ in range(3)]
            # SIGTERM once the server has all three and some still run: a request still on its way
            # when the server stops accepting is refused, which is right but not this test's point.
            def all_arrived_some_running() -> bool:
                pending, done = request_counts(server.metrics_port, "m")
                return pending >= 1 and pending + done >= 3

            await asyncio.to_thread(_wait_for, all_arrived_some_running)
            server.process.terminate()  # SIGTERM
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await client.close()

    try:
        results = asyncio.run(scenario())
        code = server.process.wait(20)
    finally:
        server.stop()  # a no-op when the process already exited; never leave a server behind
    assert code == 0
    assert all(not isinstance(r, Exception) for r in results), results
    assert any('"shutting down"' in line for line in server.logs)


def _arrived(metrics_port: int, model: str, version: str | None = None) -> float:
    """Requests of ``model`` (one version, or all) the server has received: in flight or done."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if f'model="{model}"' not in line or (version is not None and f'version="{version}"' not in line):
            continue
        if line.startswith(("lite_inference_pending_requests{", "lite_inference_requests_total{")):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except InferenceServerException:
            pass
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def test_a_failed_reload_keeps_the_model_ready_and_says_why_in_the_index(tmp_path):
    path = identity_model(tmp_path / "a" / "1" / "model.lite")
    server = start_server(tmp_path, "--poll-interval-s", "0.2")
    client = grpcclient.InferenceServerClient(server.address)
    try:
        def entry() -> dict:
            return client.get_model_repository_index(as_json=True)["models"][0]

        assert entry() == {"name": "a", "version": "1", "state": "READY"}
        with open(path, "r+b") as handle:  # truncated in place, as `cp` begins to write
            handle.truncate(100)
        _wait_for(lambda: "reason" in entry())
        stale = entry()
        assert stale["state"] == "READY" and stale["version"] == "1"
        assert stale["reason"].startswith("the last reload failed, the versions loaded before keep serving: ")
        assert "model a" in stale["reason"] and "truncated" in stale["reason"], stale["reason"]
        ones = np.ones((1, 16), np.float32)
        np.testing.assert_array_equal(client.infer("a", [client_input("INPUT0", ones)]).as_numpy("OUTPUT0"), ones)
        identity_model(tmp_path / "a" / "1" / "model.lite")  # whole again: reloaded, the reason is gone
        _wait_for(lambda: "reason" not in entry())
        assert entry()["state"] == "READY"
    finally:
        client.close()
        server.stop()
