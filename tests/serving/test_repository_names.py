"""Names and folders of the model repository through a real server: names it does not hold
(loads, unloads and startup models) leave no state behind and say NOT_FOUND, only folders named by
ASCII digits are versions, and two folders of one version fail the load naming both."""

from __future__ import annotations

import asyncio

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from .conftest import identity_model, start_server, write_config


def test_only_folders_named_by_ascii_digits_are_versions(tmp_path):
    """A folder named by another script's digit (or a superscript) is no version: it neither
    replaces version 1 nor becomes a newer version, and it does not stop the model loading."""
    identity_model(tmp_path / "m" / "1" / "model.lite", shape=("N", 2))
    identity_model(tmp_path / "m" / "2" / "model.lite", shape=("N", 3))
    for folder in ("\u0661", "\uff11", "\u0969", "\u00b2", "9" * 19):  # Arabic-Indic 1, fullwidth 1, Devanagari 3, ²
        identity_model(tmp_path / "m" / folder / "model.lite", shape=("N", 5))
    write_config(tmp_path / "m", {"version_policy": {"all": True}})
    server = start_server(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        metadata = client.get_model_metadata("m", as_json=True)
        assert metadata["versions"] == ["1", "2"]
        assert [int(d) for d in client.get_model_metadata("m", "1", as_json=True)["inputs"][0]["shape"]] == [-1, 2]
        client.close()
    finally:
        server.stop()


def test_loads_and_unloads_of_names_not_in_the_repository_leave_nothing_behind(tmp_path):
    """Each such name used to leave a lock and its failure message in the server for good, so a
    client sending new names grew it without bound; the lookups still say NOT_FOUND."""
    identity_model(tmp_path / "a" / "1" / "model.lite")
    server = start_server(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as info:
                call("ghost")
            assert info.value.status() == "StatusCode.NOT_FOUND"
            assert "'ghost'" in info.value.message()
        with pytest.raises(InferenceServerException) as info:
            client.get_model_metadata("ghost")
        assert info.value.message() == "model 'ghost' is not loaded"  # no failure was kept for the name
        assert client.is_model_ready("a")
        client.close()
    finally:
        server.stop()


def test_the_manager_keeps_no_state_for_names_not_in_the_repository(tmp_path):
    from serving.errors import ModelNotFoundError
    from serving.manager import ModelManager
    from serving.metrics import Metrics
    from serving.repository import ModelRepository
    from serving.settings import Settings

    identity_model(tmp_path / "a" / "1" / "model.lite")
    settings = Settings(repository=tmp_path, device="numpy")
    manager = ModelManager(ModelRepository(tmp_path), settings, Metrics())

    async def churn() -> None:
        await manager.load("a")
        for index in range(200):
            for call in (manager.load, manager.unload):
                with pytest.raises(ModelNotFoundError):
                    await call(f"ghost-{index}")
        await manager.close()

    asyncio.run(churn())
    assert set(manager._locks) == {"a"} and not manager._failures


def test_two_folders_of_one_version_fail_the_load_naming_both(tmp_path):
    """"1" and "01" are both version 1: which of the two was served depended on the order the
    file system listed them in."""
    identity_model(tmp_path / "m" / "1" / "model.lite", shape=("N", 2))
    identity_model(tmp_path / "m" / "01" / "model.lite", shape=("N", 3))
    identity_model(tmp_path / "other" / "1" / "model.lite")
    server = start_server(tmp_path)
    try:
        client = grpcclient.InferenceServerClient(server.address)
        index = {m["name"]: m for m in client.get_model_repository_index(as_json=True)["models"]}
        assert index["m"]["state"] == "UNAVAILABLE"
        assert "the folders '01' and '1' are both version 1; rename or remove one" in index["m"]["reason"]
        assert client.is_model_ready("other")
        with pytest.raises(InferenceServerException) as info:
            client.load_model("m")
        assert info.value.status() == "StatusCode.FAILED_PRECONDITION"
        assert "are both version 1" in info.value.message()
        client.close()
    finally:
        server.stop()


def test_a_startup_model_that_is_not_in_the_repository_is_logged_with_the_reason(tmp_path):
    identity_model(tmp_path / "a" / "1" / "model.lite")
    server = start_server(tmp_path, "--model", "a", "--model", "ghost")
    try:
        client = grpcclient.InferenceServerClient(server.address)
        assert client.is_model_ready("a")
        client.close()
    finally:
        server.stop()
    assert any("model ghost: not loaded at startup: model 'ghost' not found in model repository" in line
               for line in server.logs)
