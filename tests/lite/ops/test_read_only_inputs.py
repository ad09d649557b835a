"""Kernels that keep what they derive from read-only inputs (lite.ops._helpers.ReadOnlyInputs):
the same results as from writeable copies, for every data shape and every other input."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, save
from lite.ops.gather_nd import GatherND
from lite.ops.reduce import ReduceMean, _mean, _reduce
from lite.ops.slice import Slice


def read_only(*values):
    arrays = [np.array(value, np.int64) for value in values]
    for array in arrays:
        array.flags.writeable = False
    return arrays


def test_slice_windows_follow_the_inputs_and_the_data_shape():
    rng = np.random.default_rng(0)
    for shape in [(2, 3, 8), (2, 3, 5), (1, 4, 8), (2, 3, 8)]:
        data = rng.standard_normal(shape)
        for starts, ends, axes, steps in [([0], [4], [-1], [1]), ([4], [2**62], [-1], [1]), ([-1, 0], [0, 2], [2, 1], [-1, 1])]:
            constant = read_only(starts, ends, axes, steps)
            expected = Slice(data, *(np.array(v, np.int64) for v in (starts, ends, axes, steps)))
            for _ in range(2):  # the second call reads what the first kept
                np.testing.assert_array_equal(Slice(data, *constant), expected)


def test_a_new_read_only_input_is_never_taken_for_an_old_one():
    data = np.arange(10.0)
    for end in range(1, 10):  # each starts/ends pair is dropped after its call
        assert Slice(data, *read_only([0], [end])).tolist() == list(range(end))


def test_gather_nd_positions_follow_the_indices_and_the_data_shape():
    rng = np.random.default_rng(1)
    for shape in [(2, 5), (3, 5), (2, 5, 4)]:
        data = rng.standard_normal(shape)
        for values in ([[0, 1], [1, 4]], [[1, -1]], [[1, 0], [0, 0], [1, 2]]):
            (indices,) = read_only(values)
            expected = GatherND(data, np.array(values, np.int64))
            for _ in range(2):
                np.testing.assert_array_equal(GatherND(data, indices), expected)


def mappings_of(path) -> int:
    with open("/proc/self/maps") as maps:
        return sum(str(path) in line for line in maps)


@pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="reads the process's mappings from /proc")
def test_a_deleted_model_is_unmapped(tmp_path):
    """A mapped model's constants are views of its file: kept by a kernel's cache, they kept the
    file mapped (a file descriptor, and the disk space of a file renamed over) after the model
    was deleted."""
    b = GraphBuilder("slice_gather")
    x = b.input("x", np.float32, ["N", 8])
    window = [b.constant(name, np.array([value], np.int64)) for name, value in [("starts", 2), ("ends", 6), ("axes", 1)]]
    sliced = b.node("Slice", [x, *window])
    y = b.node("GatherND", [sliced, b.constant("indices", np.array([[0, 3], [1, 0]], np.int64))], outputs=["y"])
    b.output(y, np.float32, [2])
    path = tmp_path / "slice_gather.lite"
    save(b.build(), path)
    model = lite.Model.load(path, device="numpy")
    data = np.arange(16, dtype=np.float32).reshape(2, 8)
    for _ in range(2):  # the second run reads what the kernels kept
        assert model.predict({"x": data})["y"].tolist() == [5.0, 10.0]
    assert mappings_of(path) > 0
    del model
    gc.collect()
    assert mappings_of(path) == 0


@pytest.mark.parametrize("shape", [(1, 16, 64), (3, 5), (7,), (2, 1, 3)])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_reduce_mean_over_the_last_axis_is_the_general_paths(shape, keepdims, dtype):
    data = np.random.default_rng(2).standard_normal(shape).astype(dtype)
    for axis in (-1, len(shape) - 1):
        axes = np.array([axis], np.int64)
        got = ReduceMean(data, axes, keepdims=keepdims)
        expected = _reduce("ReduceMean", _mean, data, axes, keepdims)
        assert got.shape == expected.shape and got.dtype == expected.dtype
        np.testing.assert_array_equal(got, expected)
