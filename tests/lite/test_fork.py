"""A process forked while the numpy engine runs in another thread (a multiprocessing pool, gunicorn's
preloaded workers, DataLoader workers) runs models in the child: no lock or thread pool of the
parent's is inherited in use."""

from __future__ import annotations

import multiprocessing
import sys

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes
from lite.ops import _parallel
from lite.ops._blas import ONE_BLAS_THREAD

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="fork start method")


def conv_model() -> bytes:
    b = GraphBuilder("conv", opset=17)
    x = b.input("x", np.float32, ["N", 3, 16, 16])
    w = b.constant("w", np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32))
    b.output(b.node("Conv", [x, w], pads=[1, 1, 1, 1], outputs=["y"]), np.float32, ["N", 8, 16, 16])
    return to_bytes(b.build())


def _child(model: lite.Model, x: np.ndarray, expected: np.ndarray, pool_was_inherited: bool) -> None:
    assert _parallel._pool is None or not pool_was_inherited
    np.testing.assert_allclose(model.predict({"x": x})["y"], expected, rtol=1e-5, atol=1e-5)


def test_a_child_forked_while_a_run_holds_the_blas_lock_runs_the_model():
    model = lite.Model.load(conv_model(), device="numpy")
    x = np.ones((1, 3, 16, 16), np.float32)
    expected = model.predict({"x": x})["y"]
    _parallel._executor(1).submit(int).result()  # the parent's helper pool exists
    context = multiprocessing.get_context("fork")
    with ONE_BLAS_THREAD._lock:  # as at the instant another thread's run takes it
        child = context.Process(target=_child, args=(model, x, expected, True))
        child.start()
    child.join(120)
    if child.exitcode is None:
        child.kill()
    assert child.exitcode == 0, "the forked child hung or failed"
