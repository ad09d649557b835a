"""A served model's file rewritten in place (``cp new.lite repo/m/1/model.lite``) while requests run.

``cp`` truncates the file and then writes it: a memory-mapped model would read pages past the
new end of file (SIGBUS, the process dies) or compute with the new bytes under the old version.
The server reads model files into private memory, keeps serving the version it loaded, and the
repository poll picks the new file up once it is whole.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from lite.format import GraphBuilder, save

from .conftest import start_server

pytestmark = pytest.mark.timeout(120)
WIDTH = 256


def _scaling_model(path: Path, factor: float) -> Path:
    """y = x @ (factor * I): a 256 KiB weight, so that a truncated file loses mapped pages."""
    b = GraphBuilder("scale")
    x = b.input("X", np.float32, ["N", WIDTH])
    y = b.node("MatMul", [x, b.constant("W", np.eye(WIDTH, dtype=np.float32) * factor)], outputs=["Y"])
    b.output(y, np.float32, ["N", WIDTH])
    path.parent.mkdir(parents=True, exist_ok=True)
    save(b.build(), str(path))
    return path


def _rewrite_in_place(target: Path, data: bytes, pause_s: float) -> None:
    """What cp does (open with O_TRUNC, then write), slowed down to leave the file short for a while."""
    with open(target, "wb") as handle:
        handle.write(data[: len(data) // 3])
        handle.flush()
        time.sleep(pause_s)
        handle.write(data[len(data) // 3:])


def test_rewriting_a_loaded_file_in_place_neither_crashes_nor_changes_the_loaded_version(tmp_path):
    import tritonclient.grpc as grpcclient

    repository = tmp_path / "repository"
    target = _scaling_model(repository / "scale" / "1" / "model.lite", 1.0)
    replacement = _scaling_model(tmp_path / "new.lite", 2.0).read_bytes()
    server = start_server(repository, "--device", "numpy", "--poll-interval-s", "0.2")
    client = grpcclient.InferenceServerClient(server.address)
    x = np.ones((1, WIDTH), np.float32)
    answers: list[float] = []
    errors: list[str] = []
    stop = threading.Event()

    def call_repeatedly() -> None:
        while not stop.is_set():
            request = grpcclient.InferInput("X", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            try:
                answers.append(float(client.infer("scale", [request]).as_numpy("Y")[0, 0]))
            except Exception as err:  # noqa: BLE001 - any failure is what this test counts
                errors.append(str(err))

    caller = threading.Thread(target=call_repeatedly)
    try:
        caller.start()
        time.sleep(0.3)
        for _ in range(3):
            _rewrite_in_place(target, replacement, pause_s=0.5)
            time.sleep(0.3)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (not answers or answers[-1] != 2.0):
            time.sleep(0.1)
    finally:
        stop.set()
        caller.join(10)
        client.close()
        alive = server.process.poll() is None
        code = server.stop()
    log = "".join(server.logs[-20:])
    assert alive, f"the server died (exit {code}) while its model file was rewritten:\n{log}"
    assert not errors, errors[:3]
    assert set(answers) <= {1.0, 2.0}, sorted(set(answers))  # never a mix of old and new weights
    assert answers[0] == 1.0 and answers[-1] == 2.0  # the old version until the poll loaded the new file


def test_mapped_model_files_are_an_explicit_choice(tmp_path):
    """--map-model-files still serves (shared pages, no copy), for repositories replaced by rename."""
    import tritonclient.grpc as grpcclient

    repository = tmp_path / "repository"
    _scaling_model(repository / "scale" / "1" / "model.lite", 3.0)
    server = start_server(repository, "--device", "numpy")
    try:
        with grpcclient.InferenceServerClient(server.address) as client:
            request = grpcclient.InferInput("X", [1, WIDTH], "FP32")
            request.set_data_from_numpy(np.ones((1, WIDTH), np.float32))
            assert client.infer("scale", [request]).as_numpy("Y")[0, 0] == 3.0
    finally:
        server.stop()


def test_a_same_size_file_rewritten_slowly_is_loaded_whole_and_a_broken_one_is_logged_once(tmp_path):
    """``dd conv=notrunc`` keeps the size: a poll in the middle of the write loaded half the old
    weights and half the new as READY. A file that fails to load was read and logged at every poll."""
    import tritonclient.grpc as grpcclient

    repository = tmp_path / "repository"
    target = _scaling_model(repository / "scale" / "1" / "model.lite", 1.0)
    replacement = _scaling_model(tmp_path / "new.lite", 2.0).read_bytes()
    (repository / "broken" / "1").mkdir(parents=True)
    (repository / "broken" / "1" / "model.lite").write_bytes(b"LITE" + b"\0" * 60)
    # Writes far more often than polls: two polls see the same half-written file only if this
    # process stalls for a whole poll interval between two writes.
    server = start_server(repository, "--device", "numpy", "--poll-interval-s", "0.5")
    client = grpcclient.InferenceServerClient(server.address)
    x = np.ones((1, WIDTH), np.float32)
    answers = set()
    try:
        with open(target, "r+b") as handle:  # in place, same size, in pieces over several polls
            for start in range(0, len(replacement), len(replacement) // 16 + 1):
                handle.write(replacement[start:start + len(replacement) // 16 + 1])
                handle.flush()
                time.sleep(0.03)
                request = grpcclient.InferInput("X", list(x.shape), "FP32")
                request.set_data_from_numpy(x)
                answers.add(tuple(np.unique(client.infer("scale", [request]).as_numpy("Y"))))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (2.0,) not in answers:
            request = grpcclient.InferInput("X", list(x.shape), "FP32")
            request.set_data_from_numpy(x)
            answers.add(tuple(np.unique(client.infer("scale", [request]).as_numpy("Y"))))
            time.sleep(0.1)
    finally:
        client.close()
        server.stop()
    assert answers <= {(1.0,), (2.0,)} and (2.0,) in answers, sorted(answers)  # never half old, half new
    failures = [line for line in server.logs if "broken" in line and "load failed" in line]
    assert len(failures) == 2, failures  # at startup, and once by the poll: not at every poll
