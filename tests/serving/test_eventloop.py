"""The event loop of a serving process: uvloop when installed (``auto``), or as asked."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from serving import eventloop
from serving.errors import ConfigError
from serving.settings import Settings

from .conftest import identity_model, start_server

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


def test_auto_takes_uvloop_when_installed():
    assert eventloop.resolve("auto") == ("uvloop" if HAS_UVLOOP else "asyncio")
    assert eventloop.resolve("asyncio") == "asyncio"


def test_asking_for_a_missing_uvloop_says_how_to_get_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "uvloop" else real(name, *a))
    assert eventloop.resolve("auto") == "asyncio"
    with pytest.raises(ConfigError, match="pip install uvloop"):
        eventloop.resolve("uvloop")


def test_an_unknown_event_loop_is_a_config_error():
    with pytest.raises(ConfigError, match="event_loop 'tornado'"):
        Settings(event_loop="tornado")
    with pytest.raises(ConfigError, match="expected one of auto, uvloop, asyncio"):
        eventloop.resolve("tornado")


def test_run_returns_the_coroutines_result():
    async def answer():
        return 42

    assert eventloop.run(answer(), "asyncio") == 42
    if HAS_UVLOOP:
        assert eventloop.run(answer(), "uvloop") == 42


@pytest.mark.parametrize("choice", ["asyncio", "uvloop"])
def test_a_server_serves_on_either_loop(tmp_path, choice):
    if choice == "uvloop" and not HAS_UVLOOP:
        pytest.skip("uvloop is not installed")
    import tritonclient.grpc as grpcclient

    identity_model(tmp_path / "identity" / "1" / "model.lite")
    server = start_server(tmp_path, "--event-loop", choice)
    try:
        ready = next(json.loads(line) for line in server.logs if '"server ready"' in line)
        assert ready["event_loop"] == choice
        client = grpcclient.InferenceServerClient(server.address)
        try:
            tensor = grpcclient.InferInput("INPUT0", [2, 16], "FP32")
            data = np.arange(32, dtype=np.float32).reshape(2, 16)
            tensor.set_data_from_numpy(data)
            np.testing.assert_array_equal(client.infer("identity", [tensor]).as_numpy("OUTPUT0"), data)
        finally:
            client.close()
    finally:
        assert server.stop() == 0
