"""kill -9 in the middle of a write leaves the old file or the complete new one, never a part
: ``lite convert``, ``train.save_checkpoint``, and copying a new model
version into a served repository, at least 50 kills each at random moments.

Each kill must be cheap, so a *zygote* process imports everything once and forks a child per
attempt; the child runs the real operation (the ``lite convert`` command's main, the checkpoint
save, the copy) and the zygote SIGKILLs it after a random delay drawn from 0 to 1.3 times the
operation's measured duration (so kills land before, during and after the write). After each
kill the target path must hold the old bytes or the complete new content; the only thing a kill
may leave behind is a hidden temporary file (``.NAME.*.tmp``), which nothing takes for a model.

Run as a script, this file is the zygote: ``python -m tests.test_crash_safety OPERATION WORKDIR``.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
KILLS = 50


# ----- the operations (run in the forked child) -----------------------------------------------------


def _convert(work: Path) -> None:
    from lite.cli import main

    main(["convert", str(work / "model.onnx"), "-o", str(work / "out.lite"), "--no-verify", "-q"])


def _checkpoint(work: Path) -> None:
    from train.checkpoint import save_checkpoint

    weights = np.load(work / "weights.npy")
    save_checkpoint({"dense.weight": weights, "step": np.array(2, np.int32)}, work / "out.ckpt")


def _copy_version(work: Path) -> None:
    """Copy a new version into the repository the documented way: written beside, renamed in."""
    from lite.atomic import atomic_write

    target = work / "repository" / "model" / "2" / "model.lite"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(work / "new.lite", "rb") as source, atomic_write(target) as handle:
        while block := source.read(1 << 20):
            handle.write(block)


OPERATIONS = {"convert": _convert, "checkpoint": _checkpoint, "copy_version": _copy_version}


def zygote(operation: str, work: Path) -> None:
    """Read ``run DELAY`` lines; fork the operation, SIGKILL it after DELAY seconds (``-1``: let it
    finish), answer ``killed SECONDS`` or ``finished SECONDS``."""
    import converter  # noqa: F401 - imported once here, so that each child starts warm
    import lite.cli  # noqa: F401
    import train.checkpoint  # noqa: F401

    run = OPERATIONS[operation]
    for line in sys.stdin:
        delay = float(line.split()[1])
        started = time.perf_counter()
        child = os.fork()
        if child == 0:
            try:
                run(work)
            finally:
                os._exit(0)
        status = _wait(child, started + delay if delay >= 0 else None)
        if status is None:
            os.kill(child, signal.SIGKILL)
            _, status = os.waitpid(child, 0)
        outcome = "killed" if os.WIFSIGNALED(status) else "finished"
        print(f"{outcome} {time.perf_counter() - started:.4f}", flush=True)


def _wait(child: int, deadline: float | None) -> int | None:
    """The child's exit status once it ends, or None when it is still running at ``deadline``: a
    run that ends before its kill costs its own time, not the whole delay."""
    if deadline is None:
        return os.waitpid(child, 0)[1]
    while time.perf_counter() < deadline:
        ended, status = os.waitpid(child, os.WNOHANG)
        if ended:
            return status
        time.sleep(0.002)
    return None


# ----- the tests -------------------------------------------------------------------------------------


class Zygote:
    def __init__(self, operation: str, work: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.test_crash_safety", operation, str(work)], cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"},
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, delay: float) -> tuple[str, float]:
        self.process.stdin.write(f"run {delay}\n")
        self.process.stdin.flush()
        outcome, seconds = self.process.stdout.readline().split()
        return outcome, float(seconds)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


def kill_repeatedly(operation: str, work: Path, check, reset) -> dict[str, int]:
    """Measure the operation, then kill it KILLS times at random moments, checking after each."""
    zygote = Zygote(operation, work)
    rng = random.Random(f"crash-safety:{operation}")
    counts = {"killed": 0, "finished": 0}
    try:
        reset()
        _, duration = zygote.run(-1)  # the first, unkilled run: its output is the complete new file
        new = check(None)
        while counts["killed"] < KILLS:
            reset()
            outcome, seconds = zygote.run(rng.uniform(0, 1.3 * duration))
            counts[outcome] += 1
            if outcome == "finished":  # the first run was slowed (a busy machine): aim at this one
                duration = min(duration, seconds)
            check(new)
            leftovers = [p.name for p in work.rglob("*") if p.is_file() and ".tmp" in p.name
                         and not p.name.startswith(".")]
            assert not leftovers, f"{operation}: visible temporary files after a kill: {leftovers}"
    finally:
        zygote.close()
    return counts


def state(path: Path, old: bytes, is_complete) -> str:
    """"old", "new" (complete), or an assertion error for anything else."""
    assert path.exists(), f"{path} vanished"
    data = path.read_bytes()
    if data == old:
        return "old"
    assert is_complete(data), f"{path}: {len(data)} bytes that are neither the old file nor a complete new one"
    return "new"


@pytest.mark.slow
def test_kill_during_lite_convert(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import converter
    from lite.format import load, save

    weights = np.random.default_rng(0).standard_normal((1024, 2048)).astype(np.float32)  # 8 MiB
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "dense",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2048])],
                              [numpy_helper.from_array(weights, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "model.onnx")
    old_model = converter.convert_model(helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]), opset_imports=[helper.make_opsetid("", 17)]))
    save(old_model, tmp_path / "old.lite")
    old = (tmp_path / "old.lite").read_bytes()
    out = tmp_path / "out.lite"

    def complete(data: bytes) -> bool:
        model = load(data)  # verifies the whole file
        return any(t.data is not None and t.data.shape == weights.shape and np.array_equal(t.data, weights)
                   for t in model.main.tensors)

    seen = []

    def check(new):
        seen.append(state(out, old, complete))
        return True

    counts = kill_repeatedly("convert", tmp_path, check, lambda: out.write_bytes(old))
    assert counts["killed"] >= KILLS
    assert "old" in seen and "new" in seen, f"every kill landed on one side: {set(seen)}"


@pytest.mark.slow
def test_kill_during_save_checkpoint(tmp_path):
    from train.checkpoint import parse, serialize

    weights = np.random.default_rng(1).standard_normal((2048, 2048)).astype(np.float32)  # 16 MiB
    np.save(tmp_path / "weights.npy", weights)
    old = serialize([("dense.weight", np.zeros((2, 2), np.float32))])
    out = tmp_path / "out.ckpt"
    seen = []

    def complete(data: bytes) -> bool:
        values = parse(data)
        return np.array_equal(values["dense.weight"], weights) and int(values["step"]) == 2

    def check(new):
        seen.append(state(out, old, complete))
        return True

    counts = kill_repeatedly("checkpoint", tmp_path, check, lambda: out.write_bytes(old))
    assert counts["killed"] >= KILLS
    assert "old" in seen and "new" in seen, f"every kill landed on one side: {set(seen)}"


@pytest.mark.slow
def test_kill_while_copying_a_version_into_a_served_repository(tmp_path):
    """The server is asked to load the model after every kill: it serves version 1, or version 2
    complete, and never fails on a partial file."""
    import shutil

    import tritonclient.grpc as grpcclient

    from lite.format import load
    from tests.serving.conftest import identity_model, start_server, write_config

    repository = tmp_path / "repository"
    identity_model(repository / "model" / "1" / "model.lite")
    write_config(repository / "model", {"version_policy": {"latest": 1}})
    new_weights = np.random.default_rng(2).standard_normal((1024, 2048)).astype(np.float32)
    from lite.format import GraphBuilder, save

    builder = GraphBuilder("big")
    x = builder.input("INPUT0", np.float32, ["N", 16])
    builder.constant("unused", new_weights)  # 8 MiB of weights make the copy take a while
    builder.output(builder.node("Identity", [x], outputs=["OUTPUT0"]), np.float32, ["N", 16])
    save(builder.build(), tmp_path / "new.lite")
    new = (tmp_path / "new.lite").read_bytes()
    version_dir = repository / "model" / "2"
    server = start_server(repository)
    client = grpcclient.InferenceServerClient(server.address)
    served = []

    def reset():
        shutil.rmtree(version_dir, ignore_errors=True)

    def check(_):
        target = version_dir / "model.lite"
        if target.exists():
            assert target.read_bytes() == new, "a partial model.lite is visible in the repository"
            load(target)
        client.load_model("model")  # RepositoryModelLoad: must succeed whatever the kill left
        versions = client.get_model_metadata("model", as_json=True)["versions"]
        served.append(versions[-1])
        assert versions[-1] == ("2" if target.exists() else "1")
        tensor = grpcclient.InferInput("INPUT0", [1, 16], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 16), np.float32))
        assert client.infer("model", [tensor]).as_numpy("OUTPUT0").tolist() == np.ones((1, 16)).tolist()
        return True

    try:
        counts = kill_repeatedly("copy_version", tmp_path, check, reset)
    finally:
        client.close()
        server.stop()
    assert counts["killed"] >= KILLS
    assert "1" in served and "2" in served, f"every kill landed on one side: {set(served)}"


if __name__ == "__main__":
    zygote(sys.argv[1], Path(sys.argv[2]))
