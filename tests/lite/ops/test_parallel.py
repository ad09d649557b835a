"""BLAS on one thread while the numpy engine runs (lite.ops._blas), large products split by the
engine itself (lite.ops._parallel), and the kernels' fast paths for small tensors: each gives
what numpy gives (split products up to BLAS's rounding, which depends on the block)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.ops import _blas as blas
from lite.ops import _parallel as parallel
from lite.ops._blas import ONE_BLAS_THREAD
from lite.ops.arithmetic import Add, Mul
from tests.lite.ops.test_kernel_contract import conv_chain_model, counting_allocator

rng = np.random.default_rng(7)


@pytest.fixture
def busy(monkeypatch):
    """A machine where other tasks run: engine runs take one BLAS thread and split."""
    monkeypatch.setattr(blas, "others_running", lambda: True)


@pytest.fixture
def split_everything(monkeypatch, busy):
    """Two threads and blocks of any size: every product below is split."""
    monkeypatch.setattr(parallel, "threads", lambda: 2)
    monkeypatch.setattr(parallel, "_BLOCK_MULTIPLY_ADDS", 1)
    monkeypatch.setattr(parallel, "SPLIT_MULTIPLY_ADDS", 0)
    monkeypatch.setattr(ONE_BLAS_THREAD, "split", True)


@pytest.mark.parametrize("rows, depth, columns", [(7, 5, 3), (64, 33, 17), (4, 8, 8), (1, 3, 3), (0, 2, 2),
                                                  (8, 40, 300), (3, 16, 64), (2, 0, 9)])  # more columns: split by columns
def test_split_product_is_numpys(split_everything, rows, depth, columns):
    a = rng.standard_normal((rows, depth)).astype(np.float32)
    b = rng.standard_normal((depth, columns)).astype(np.float32)
    out = np.full((rows, columns), np.nan, np.float32)
    parallel.matmul(a, b, out)
    # BLAS may sum a block's rows in another order than the whole product's: rounding differs.
    np.testing.assert_allclose(out, np.matmul(a, b), rtol=1e-5, atol=1e-5)


def test_split_product_into_strided_output(split_everything):
    a = rng.standard_normal((12, 6)).astype(np.float32)
    b = rng.standard_normal((6, 20)).astype(np.float32)
    y = np.zeros((12, 30), np.float32)
    parallel.matmul(a, b, y[:, 5:25])
    np.testing.assert_allclose(y[:, 5:25], a @ b, rtol=1e-5, atol=1e-5)
    assert not y[:, :5].any() and not y[:, 25:].any()


def test_split_product_raises_numpys_error(split_everything):
    with pytest.raises(ValueError):
        parallel.matmul(np.ones((8, 3), np.float32), np.ones((4, 2), np.float32), np.empty((8, 2), np.float32))


def test_split_products_from_several_threads(split_everything):
    a = rng.standard_normal((40, 16)).astype(np.float32)
    b = rng.standard_normal((16, 24)).astype(np.float32)
    results = [np.empty((40, 24), np.float32) for _ in range(4)]
    workers = [threading.Thread(target=parallel.matmul, args=(a, b, out)) for out in results]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for out in results:
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5)


def test_one_blas_thread_inside_and_the_count_restored_after(busy):
    before = ONE_BLAS_THREAD.threads()
    if before is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS this process can reach")
    with ONE_BLAS_THREAD:
        with ONE_BLAS_THREAD:
            assert ONE_BLAS_THREAD.threads() == 1
        assert ONE_BLAS_THREAD.threads() == 1
    assert ONE_BLAS_THREAD.threads() == before


def test_the_numpy_engine_runs_on_one_blas_thread_and_splits_itself(split_everything):
    before = ONE_BLAS_THREAD.threads()
    engine = NumpyEngine(conv_chain_model())
    x = rng.standard_normal((2, 4, 64, 64)).astype(np.float32)
    seen = []
    split = engine.run({"x": x}, lambda node, seconds, values: seen.append(ONE_BLAS_THREAD.threads()))["y"]
    if before is not None:
        assert set(seen) == {1} and ONE_BLAS_THREAD.threads() == before
    np.testing.assert_allclose(split, NumpyEngine(conv_chain_model()).run({"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_on_an_idle_machine_blas_keeps_its_threads_and_nothing_is_split(monkeypatch):
    """Quiet, OpenBLAS's own threads beat one thread and the engine's split (36 against 54 ms
    for a 224x224 ResNet-18 on 2 cores): the run leaves them alone."""
    monkeypatch.setattr(blas, "others_running", lambda: False)
    before = ONE_BLAS_THREAD.threads()
    engine = NumpyEngine(conv_chain_model())
    x = rng.standard_normal((2, 4, 64, 64)).astype(np.float32)
    seen = []
    engine.run({"x": x}, lambda node, seconds, values: seen.append((ONE_BLAS_THREAD.threads(), ONE_BLAS_THREAD.split)))
    assert {split for _, split in seen} == {False}
    assert {count for count, _ in seen} == {before}


def test_the_runnable_count_is_read_from_the_kernel():
    assert blas.others_running() in (True, False)


@pytest.mark.parametrize("a_shape, b_shape", [((1, 16, 64), (64,)), ((1, 16, 64), (1, 16, 64)), ((64,), (3, 16, 64)),
                                              ((2, 1, 5), (1, 4, 1)), ((1, 128, 256), (256,)), ((3, 1), ())])
@pytest.mark.parametrize("kernel, ufunc", [(Add, np.add), (Mul, np.multiply)])
def test_binary_kernels_with_the_arena_are_numpys(kernel, ufunc, a_shape, b_shape):
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = np.asarray(rng.standard_normal(b_shape)).astype(np.float32)
    allocate, _ = counting_allocator()
    got = kernel(a, b, allocate=allocate)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, ufunc(a, b))
