"""Softmax family, reductions, ArgMax/ArgMin and CumSum against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._checks_core import check
from tests.lite.ops._reference import check_against_onnxruntime, kernel_outputs

rng = np.random.default_rng(11)
F32 = np.float32


def normal(shape, dtype=F32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax_family(op, axis):
    x = normal((2, 3, 4), scale=5)
    attributes = {} if axis is None else {"axis": axis}
    check(op, [x], attributes, opset=13)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax", "Hardmax"])
@pytest.mark.parametrize("opset", [1, 11])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax_family_coerced_to_2d(op, opset, axis):
    # onnx.reference applies the opset-13 single-axis rule to every version; ONNX Runtime
    # implements the 2-D coercion of opsets 1 and 11.
    if opset == 1 and axis is not None and axis < 0:
        axis += 3
    x = normal((2, 3, 4), scale=5)
    attributes = {} if axis is None else {"axis": axis}
    check_against_onnxruntime(op, [x], attributes, opset=opset, rtol=1e-5, atol=1e-6)


def test_softmax_is_stable():
    x = np.array([[1000.0, 1001.0, -1000.0], [-1e4, -1e4, -1e4]], dtype=F32)
    (result,) = check("Softmax", [x], opset=13)
    assert np.all(np.isfinite(result))
    # onnx.reference computes log(softmax) and returns -inf where the exact value is -2001.3.
    (logs,) = kernel_outputs("LogSoftmax", [x], {}, opset=13)
    wide = x.astype(np.float64)
    shifted = wide - wide.max(axis=1, keepdims=True)
    expected = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    np.testing.assert_allclose(logs, expected, rtol=1e-5)


@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_softmax_over_rows_shifted_together_or_one_by_one(dtype):
    """The last-axis softmax of more than 32 rows shifts every row by the tensor's maximum when
    the rows' sums stay in range: masked entries (-inf, the float minimum) become 0; rows far
    below the maximum, a row masked entirely, infinities and NaN take the row-by-row path, with
    the same values; fewer rows take that path at once, one element per row is exp(x - x)."""
    lowest = np.finfo(dtype).min
    scores = normal((2, 3, 8, 7), dtype, scale=4)
    scores[0, 1, :, 4:] = -np.inf
    scores[1, 2, 1:, :3] = lowest
    far = normal((40, 7), dtype)
    far[1] -= 500
    masked_row = normal((40, 7), dtype)
    masked_row[2] = -np.inf
    special = normal((40, 7), dtype)
    special[0, 0], special[2, 3] = np.inf, np.nan
    # Up to 32 rows, and a last axis of length 1, take paths of their own.
    few = scores[:1, :2, :, :]
    few_special = special[:5]
    single = normal((2, 4, 3, 1), dtype, scale=100)
    single[0, 1, 2, 0], single[1, 0, 0, 0], single[1, 3, 1, 0] = np.inf, -np.inf, np.nan
    for x in (scores, far, masked_row, special, few, few_special, single):
        (got,) = kernel_outputs("Softmax", [x], {}, opset=13)
        wide = x.astype(np.float64)
        with np.errstate(invalid="ignore"):
            shifted = wide - wide.max(axis=-1, keepdims=True)
            expected = np.exp(shifted) / np.exp(shifted).sum(axis=-1, keepdims=True)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-12)


def test_hardmax_takes_first_maximum():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]], dtype=F32)
    (result,) = check("Hardmax", [x], opset=13)
    assert result.tolist() == [[0, 1, 0], [1, 0, 0]]


REDUCTIONS = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
]
AXES_CASES = [None, [0], [1], [-1], [0, 2], [2, 0, 1]]


def reduction_input(op, dtype=F32):
    if op == "ReduceLogSum":
        return rng.uniform(0.1, 2.0, size=(3, 4, 5)).astype(dtype)
    if op == "ReduceProd":
        return rng.uniform(0.5, 1.5, size=(3, 4, 5)).astype(dtype)
    return normal((3, 4, 5), dtype)


def axes_input_since(op):
    return 13 if op == "ReduceSum" else 18


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes", AXES_CASES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_axes_attribute(op, axes, keepdims):
    attributes = {"keepdims": keepdims}
    if axes is not None:
        attributes["axes"] = axes
    check(op, [reduction_input(op)], attributes, opset=11)


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("axes", AXES_CASES)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduction_axes_input(op, axes, keepdims):
    opset = max(axes_input_since(op), 18 if op != "ReduceSum" else 13)
    axes_tensor = None if axes is None else np.array(axes, dtype=np.int64)
    check(op, [reduction_input(op), axes_tensor], {"keepdims": keepdims}, opset=opset)


@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_noop_with_empty_axes(op):
    x = reduction_input(op)
    opset = axes_input_since(op)
    check(op, [x], {"noop_with_empty_axes": 1}, opset=opset)
    check(op, [x, np.array([], dtype=np.int64)], {"noop_with_empty_axes": 1}, opset=opset)
    check(op, [x, np.array([], dtype=np.int64)], {"noop_with_empty_axes": 0, "keepdims": 0}, opset=opset)


@pytest.mark.parametrize(
    ("op", "dtype"),
    [
        (op, dtype)
        for op in ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1"]
        for dtype in (np.int32, np.int64)
    ]
    # onnx.reference widens int32 ReduceSumSquare to int64; the spec keeps the input type.
    + [("ReduceSumSquare", np.int64)],
)
def test_reduction_integers_keep_type(op, dtype):
    x = rng.integers(-5, 5, size=(3, 4)).astype(dtype)
    check(op, [x, np.array([1], dtype=np.int64)], {"keepdims": 0}, opset=18)


def test_reduce_max_bool():
    x = rng.random((3, 4)) > 0.7
    check("ReduceMax", [x, np.array([1], dtype=np.int64)], opset=20)
    check("ReduceMin", [x, np.array([0], dtype=np.int64)], opset=20)


def test_reductions_over_empty_set():
    x = np.zeros((0, 3), dtype=F32)
    axes = np.array([0], dtype=np.int64)
    expected = {
        "ReduceSum": 0.0,
        "ReduceProd": 1.0,
        "ReduceMax": -np.inf,
        "ReduceMin": np.inf,
        "ReduceLogSumExp": -np.inf,
        "ReduceSumSquare": 0.0,
    }
    for op, value in expected.items():
        (result,) = kernel_outputs(op, [x, axes], {"keepdims": 0}, opset=18)
        assert result.shape == (3,) and result.dtype == F32, op
        assert np.all(result == value), op


def test_reduce_log_sum_exp_is_stable():
    x = np.array([[1000.0, 1000.0], [-np.inf, -np.inf]], dtype=F32)
    (result,) = kernel_outputs(
        "ReduceLogSumExp", [x, np.array([1], dtype=np.int64)], {"keepdims": 0}, opset=18
    )
    np.testing.assert_allclose(result, [1000.0 + np.log(2), -np.inf], rtol=1e-6)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("opset", [1, 11, 12, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_arg_extreme(op, opset, axis, keepdims):
    x = normal((3, 4, 5))
    if opset == 1 and axis < 0:
        axis = 2
    check(op, [x], {"axis": axis, "keepdims": keepdims}, opset=opset)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("select_last_index", [0, 1])
def test_arg_extreme_ties(op, select_last_index):
    x = rng.integers(0, 3, size=(4, 6)).astype(np.int32)
    for axis in (0, 1):
        check(op, [x], {"axis": axis, "select_last_index": select_last_index}, opset=13)


@pytest.mark.parametrize("opset", [11, 14])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [0, 1])
@pytest.mark.parametrize("reverse", [0, 1])
@pytest.mark.parametrize("dtype", [F32, np.int32, np.int64])
def test_cum_sum(opset, axis, exclusive, reverse, dtype):
    x = (normal((3, 4, 2), scale=10)).astype(dtype)
    check(
        "CumSum",
        [x, np.array(axis, dtype=np.int64)],
        {"exclusive": exclusive, "reverse": reverse},
        opset=opset,
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_reduce_mean_keeps_the_type_and_divides_once(dtype):
    data = (np.arange(2 * 3 * 4 * 5).reshape(2, 3, 4, 5) % 7).astype(dtype)
    for axes, keepdims in (([2, 3], 1), ([0, 2], 0), (None, 0)):
        inputs = [data] if axes is None else [data, np.array(axes, np.int64)]
        (got,) = kernel_outputs("ReduceMean", inputs, {"keepdims": keepdims}, opset=18)
        wide = data.astype(np.float64).mean(axis=None if axes is None else tuple(axes), keepdims=bool(keepdims))
        assert got.dtype == dtype
        expected = wide.astype(dtype) if dtype != np.int32 else np.trunc(wide).astype(dtype)
        np.testing.assert_allclose(got, expected, rtol=1e-3 if dtype == np.float16 else 1e-6)
    (empty,) = kernel_outputs("ReduceMean", [np.zeros((2, 0), np.float32), np.array([1], np.int64)], {}, opset=18)
    assert empty.shape == (2, 1) and np.isnan(empty).all()


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceL2", "ReduceSumSquare"])
@pytest.mark.parametrize("layout", ["channels-first", "channels-last"])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_sums_over_the_spatial_axes_of_either_layout(op, layout, keepdims):
    """Global pools of small maps (many short rows, summed as a product with ones) and of
    channels-last activations (lite.ops._layout) match the reference."""
    from lite.ops._layout import empty_channels_last

    data = normal((2, 300, 3, 2), F32)
    if layout == "channels-last":
        given = empty_channels_last(data.shape, data.dtype)
        given[...] = data
    else:
        given = data
    for axes in (np.array([2, 3], np.int64), np.array([-1, -2], np.int64)):
        (got,) = kernel_outputs(op, [given, axes], {"keepdims": keepdims}, opset=18)
        (expected,) = kernel_outputs(op, [data.astype(np.float64), axes], {"keepdims": keepdims}, opset=18)
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes", [[3, 2], [-1], [-3, -1, -2], [1, 3], [0], [2, 2], [4], [-5]])
@pytest.mark.parametrize("axes_dtype", [np.int64, np.int32])
def test_reduce_mean_over_trailing_axes_or_others(axes, axes_dtype):
    """ReduceMean's product-with-ones path takes axes naming the trailing ones, each once, in
    any order or sign; other axes, and invalid ones, go through the general path."""
    from lite.errors import KernelError
    from lite.ops.reduce import ReduceMean

    data = normal((2, 3, 4, 5), F32)
    given = np.array(axes, axes_dtype)
    if len(set(a % 4 for a in axes)) < len(axes) or not all(-4 <= a < 4 for a in axes):
        with pytest.raises(KernelError):
            ReduceMean(data, given)
        return
    for keepdims in (0, 1):
        got = ReduceMean(data, given, keepdims=keepdims)
        expected = data.astype(np.float64).mean(axis=tuple(axes), keepdims=bool(keepdims))
        assert got.dtype == np.float32 and got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape, axes", [((1, 64, 8, 8), [2]), ((2, 3, 4, 5), [1, 2]), ((2, 7, 5), [-2]),
                                         ((1, 64, 8, 1), [2]), ((3, 4), [0])])
@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sums_over_inner_axes_are_add_reduces(shape, axes, keepdims, dtype):
    """Consecutive axes before the last (FocalNet's mean over rows) are summed by einsum: the
    values add.reduce gives, in the shape it gives."""
    from lite.ops import KERNELS

    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    got = KERNELS.select("ReduceSum", "", 13).fn(x, np.array(axes, np.int64), keepdims=keepdims)
    expected = np.add.reduce(x, axis=tuple(axes), keepdims=bool(keepdims))
    assert got.dtype == dtype and got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)
    mean = KERNELS.select("ReduceMean", "", 18).fn(x, np.array(axes, np.int64), keepdims=keepdims)
    np.testing.assert_allclose(mean, x.mean(axis=tuple(axes), keepdims=bool(keepdims)), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("axes", [[1], [-2], [0, 1], [1, 3]])
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_mean_over_axes_of_length_one(axes, keepdims):
    """A mean over axes that all have length 1 is the data itself, reshaped, in a new array."""
    x = normal((1, 1, 5, 1), scale=3)
    x[0, 0, 2, 0] = np.nan
    (got,) = check("ReduceMean", [x, np.array(axes, np.int64)], {"keepdims": keepdims}, opset=18)
    assert not np.shares_memory(got, x)
    from lite.ops.reduce import _mean, _reduce

    general = _reduce("ReduceMean", _mean, x, np.array(axes, np.int64), keepdims)
    assert got.shape == general.shape
    np.testing.assert_array_equal(got, general)


def test_reduce_mean_over_a_unit_axis_named_twice_or_out_of_range_fails():
    from lite.errors import KernelError

    x = normal((1, 1, 5))
    for axes in ([1, 1], [3], [1, -2]):
        with pytest.raises(KernelError):
            kernel_outputs("ReduceMean", [x, np.array(axes, np.int64)], {}, opset=18)


def test_a_row_masked_whole_gives_nan_without_a_warning():
    # A left-padded batch under a causal mask: a row of -inf. NaN there, as ONNX Runtime gives,
    # and no numpy warning on the user's console (a fresh process: default warning filters).
    import subprocess
    import sys

    code = ("import numpy as np; from lite.ops.softmax import Softmax; x = np.zeros((3, 5), np.float32); "
            "x[1] = -np.inf; y = Softmax(x, axis=-1); print(np.isnan(y[1]).all(), np.allclose(y[[0, 2]], 0.2))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True"] and "Warning" not in done.stderr, done.stderr
