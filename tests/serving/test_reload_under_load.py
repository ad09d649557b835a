"""Reload under load: while 32 clients send requests continuously, a new
version is copied in and loaded (RepositoryModelLoad with ``version_policy: {"latest": 1}``: the
new version is loaded, requests switch to it, the old one drains and is unloaded), 20 times.
Zero failed requests, and every answer comes from a version that was loaded while it was in
flight; versions are told apart by their output (``y = x + version``) as well as by
``model_version``."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import tritonclient.grpc.aio as aioclient

from lite.format import GraphBuilder, save

from .conftest import start_server, write_config

CLIENTS = 32
RELOADS = 20


def versioned_model(path, version: int) -> None:
    b = GraphBuilder(f"plus_{version}")
    x = b.input("X", np.float32, ["N", 4])
    offset = b.constant("offset", np.full(4, version, np.float32))
    b.output(b.node("Add", [x, offset], outputs=["Y"]), np.float32, ["N", 4])
    path.parent.mkdir(parents=True, exist_ok=True)
    save(b.build(), str(path))  # atomic: the repository never shows a partial file


@pytest.mark.slow
def test_reload_twenty_times_under_32_clients(tmp_path):
    repository = tmp_path / "repository"
    versioned_model(repository / "plus" / "1" / "model.lite", 1)
    write_config(repository / "plus", {"version_policy": {"latest": 1}})
    server = start_server(repository)
    try:
        answers, failures, loaded = asyncio.run(_load_and_reload(server.address, repository))
    finally:
        server.stop()
    print(f"{len(answers)} answers from {CLIENTS} clients over {RELOADS} reloads, {len(failures)} failed")
    assert not failures, f"{len(failures)} failed requests, e.g. {failures[:3]}"
    assert len(answers) > 20 * CLIENTS
    for sent, received, version, value in answers:
        assert value == version, f"model_version {version} answered with the output of version {value}"
        start, end = loaded[version]
        assert start <= received and sent <= end, f"version {version} answered outside its loaded time"
    assert {version for _, _, version, _ in answers} == set(range(1, RELOADS + 2))


async def _load_and_reload(address: str, repository):
    answers: list[tuple[float, float, int, int]] = []
    failures: list[str] = []
    # version -> (when its load was requested, when the next version's load returned)
    loaded: dict[int, tuple[float, float]] = {1: (0.0, float("inf"))}
    stop = asyncio.Event()
    x = np.zeros((1, 4), np.float32)

    async def client_loop(client: aioclient.InferenceServerClient) -> None:
        while not stop.is_set():
            tensor = aioclient.InferInput("X", [1, 4], "FP32")
            tensor.set_data_from_numpy(x)
            sent = time.monotonic()
            try:
                result = await client.infer("plus", [tensor], client_timeout=30)
            except Exception as err:  # noqa: BLE001 - every failure is counted and reported
                failures.append(f"{type(err).__name__}: {err}")
                continue
            version = int(result.get_response().model_version)
            answers.append((sent, time.monotonic(), version, int(result.as_numpy("Y")[0, 0])))

    client = aioclient.InferenceServerClient(address)
    try:
        workers = [asyncio.create_task(client_loop(client)) for _ in range(CLIENTS)]
        await asyncio.sleep(0.5)
        for version in range(2, RELOADS + 2):
            await asyncio.to_thread(versioned_model, repository / "plus" / str(version) / "model.lite", version)
            requested = time.monotonic()
            await client.load_model("plus")
            returned = time.monotonic()
            loaded[version] = (requested, float("inf"))
            loaded[version - 1] = (loaded[version - 1][0], returned)
            await asyncio.sleep(0.2)  # traffic on the new version before the next swap
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.gather(*workers)
    finally:
        await client.close()
    return answers, failures, loaded
