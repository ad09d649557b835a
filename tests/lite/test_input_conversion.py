"""lite.Model.predict's conversion of lists, scalars, 0-d arrays and PyTorch host tensors to the
declared dtype: done where no value changes, an InvalidInputError naming the value otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes


def identity_model(dtype, shape) -> lite.Model:
    b = GraphBuilder("identity")
    x = b.input("x", dtype, shape)
    b.output(b.node("Identity", [x], outputs=["y"]), dtype, shape)
    return lite.Model.load(to_bytes(b.build()), device="numpy")


@pytest.mark.parametrize(
    "dtype, shape, value, expected",
    [
        (np.int32, ["N", 2], [[1, -2]], [[1, -2]]),
        (np.int32, ["N", 2], [[1.0, -2.0]], [[1, -2]]),  # floats without a fractional part
        (np.uint8, ["N", 2], [[0, 255]], [[0, 255]]),
        (np.float32, ["N", 2], [[1, 2**40]], [[1.0, 2.0**40]]),
        (np.float32, ["N", 2], [[0.1, -2.5]], np.array([[0.1, -2.5]], np.float32)),  # rounded to float32
        (np.bool_, ["N", 2], [[0, 1]], [[False, True]]),
        (np.int64, [], 3, 3),
        (np.int64, [], np.int32(3), 3),
        (np.int64, [], np.array(3, np.int32), 3),  # a 0-d array is a scalar, as a numpy scalar is
        (np.float32, [], 0.5, 0.5),
        (np.int32, ["N"], [], []),
    ],
)
def test_lists_and_scalars_are_converted_where_no_value_changes(dtype, shape, value, expected):
    y = identity_model(dtype, shape).predict({"x": value})["y"]
    assert y.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize(
    "dtype, shape, value, message",
    [
        (np.int32, ["N", 4], [[1.7, 2.9, -0.5, 3.99]], r"holds 1.7, which has a fractional part, the model expects int32: round"),
        (np.int64, [], 3.7, r"holds 3.7, which has a fractional part"),
        (np.int64, [], np.array(3.5), r"holds 3.5, which has a fractional part"),
        (np.int32, ["N", 4], [[2**40, 0, 0, 0]], r"holds 1099511627776, out of the range of int32 \(\[-2147483648, 2147483647\]\)"),
        (np.uint8, ["N"], [3, -1], r"holds -1, out of the range of uint8"),
        (np.int32, ["N"], [1.0, float("nan")], r"holds nan, which int32 cannot represent"),
        (np.float32, ["N"], [1.0, -1e39], r"holds -1e\+39, out of the range of float32"),
        (np.bool_, ["N"], [0, 2], r"holds 2, the model expects bool"),
        (np.int32, ["N", 4], [[1, 2, None, 4]], r"cannot be converted to int32: it holds None; pass numbers"),
        (np.float32, ["N"], ["1.5"], r"cannot be converted to float32: it holds text \('1.5'\)"),
        (np.float32, ["N"], [1 + 2j], r"cannot be converted to float32: it holds complex128 values"),
        (np.int64, ["N"], [2**70], r"cannot be converted to int64: it holds integers beyond 64 bits"),
    ],
)
def test_a_conversion_that_would_change_a_value_is_refused(dtype, shape, value, message):
    with pytest.raises(lite.InvalidInputError, match=message):
        identity_model(dtype, shape).predict({"x": value})


def test_arrays_of_another_dtype_are_refused_whatever_their_values():
    model = identity_model(np.int32, ["N", 2])
    with pytest.raises(lite.InvalidInputError, match=r"has dtype int64, the model expects int32 \(convert with"):
        model.predict({"x": np.array([[1, 2]], np.int64)})


def test_host_tensors_are_read_without_their_gradient():
    torch = pytest.importorskip("torch")
    model = identity_model(np.float32, ["N", 2])
    value = torch.tensor([[0.5, -1.0]], requires_grad=True)
    np.testing.assert_array_equal(model.predict({"x": value})["y"], [[0.5, -1.0]])
    counts = identity_model(np.int32, ["N", 2])
    assert counts.predict({"x": torch.tensor([[1, 2]])})["y"].tolist() == [[1, 2]]  # int64, in range
    with pytest.raises(lite.InvalidInputError, match="holds 1.5, which has a fractional part"):
        counts.predict({"x": torch.tensor([[1.5, 2.0]])})
    with pytest.raises(lite.InvalidInputError, match="is a PyTorch tensor numpy cannot read"):
        model.predict({"x": torch.ones((1, 2), dtype=torch.bfloat16)})
