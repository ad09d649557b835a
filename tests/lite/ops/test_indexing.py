"""Indexing and assorted kernels (Gather ... Det) against onnx.reference on fresh random
inputs."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import KernelError
from tests.lite.ops._checks_core import check
from tests.lite.ops._reference import check_against_onnxruntime, kernel_outputs

rng = np.random.default_rng(9)
F32 = np.float32
I64 = np.int64


def normal(shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


def indices(shape, dimension, dtype=I64, negative=True):
    low = -dimension if negative else 0
    return rng.integers(low, dimension, size=shape).astype(dtype)


# --- gathers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("index_shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("index_dtype", [np.int32, I64])
def test_gather(opset, axis, index_shape, index_dtype):
    data = normal((3, 4, 5))
    if opset < 11 and axis < 0:
        axis = 2
    dimension = data.shape[axis]
    check(
        "Gather",
        [data, indices(index_shape, dimension, index_dtype, negative=opset >= 11)],
        {"axis": axis},
        opset=opset,
    )


def test_gather_strings_and_bad_index():
    data = np.array(["a", "b", "c"], dtype=object)
    check("Gather", [data, np.array([2, 0, -1], dtype=I64)], opset=13)
    with pytest.raises(KernelError, match="Gather"):
        kernel_outputs("Gather", [data, np.array([3], dtype=I64)], {}, opset=13)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(opset, axis):
    data = normal((3, 4, 5))
    index_shape = list(data.shape)
    index_shape[axis] = 6
    inputs = [data, indices(tuple(index_shape), data.shape[axis])]
    if axis < 0:
        # onnx.reference checks the index shape without normalizing a negative axis.
        check_against_onnxruntime("GatherElements", inputs, {"axis": axis}, opset=opset, rtol=0, atol=0)
    else:
        check("GatherElements", inputs, {"axis": axis}, opset=opset)


def test_gather_elements_with_shorter_indices():
    # Off the axis, indices may be shorter than data (onnx.reference refuses this).
    data = normal((3, 4, 5))
    picked = indices((2, 6, 3), 4)
    check_against_onnxruntime("GatherElements", [data, picked], {"axis": 1}, opset=13, rtol=0, atol=0)


GATHER_ND_CASES = [
    ((3, 4, 5), (2, 1), 0),
    ((3, 4, 5), (2, 2), 0),
    ((3, 4, 5), (6, 3), 0),
    ((3, 4, 5), (2, 3, 2), 0),
    ((3, 4, 5), (3, 1), 1),
    ((3, 4, 5), (3, 2, 2), 1),
    ((2, 3, 4, 5), (2, 3, 4, 1), 2),
]


@pytest.mark.parametrize(("data_shape", "index_shape", "batch_dims"), GATHER_ND_CASES)
@pytest.mark.parametrize("opset", [12, 13])
def test_gather_nd(data_shape, index_shape, batch_dims, opset):
    data = normal(data_shape)
    depth = index_shape[-1]
    limits = np.array(data_shape[batch_dims : batch_dims + depth])
    # Non-negative indices: onnx.reference does not wrap negative ones.
    picked = (rng.random(index_shape) * limits).astype(I64)
    check("GatherND", [data, picked], {"batch_dims": batch_dims}, opset=opset)


def test_gather_nd_negative_indices():
    data = normal((3, 4))
    (result,) = kernel_outputs("GatherND", [data, np.array([[-1, -2], [0, 3]], dtype=I64)], {}, opset=13)
    np.testing.assert_array_equal(result, [data[2, 2], data[0, 3]])
    (rows,) = kernel_outputs("GatherND", [normal((3, 4, 2)), np.array([[[-3], [2]]], dtype=I64)], {}, opset=13)
    assert rows.shape == (1, 2, 4, 2)


@pytest.mark.parametrize("picked", [[[0, 4]], [[3, 0]], [[-4, 0]], [[0, -5]]])
def test_gather_nd_out_of_range_names_the_indices(picked):
    from lite.errors import KernelError

    with pytest.raises(KernelError, match="GatherND"):
        kernel_outputs("GatherND", [normal((3, 4)), np.array(picked, dtype=I64)], {}, opset=13)


# --- scatters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opset", "reduction"),
    [(11, None), (13, None), (16, "none"), (16, "add"), (16, "mul"), (18, "max"), (18, "min")],
)
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(opset, reduction, axis):
    data = normal((4, 5, 3))
    update_shape = [3, 4, 2]
    if reduction in (None, "none"):
        # Unique destinations: with repeated indices the winner is undefined.
        dimension = data.shape[axis]
        update_shape[axis] = 1
        picked = indices(tuple(update_shape), dimension)
    else:
        picked = indices(tuple(update_shape), data.shape[axis])
    attributes = {"axis": axis} if reduction is None else {"axis": axis, "reduction": reduction}
    check("ScatterElements", [data, picked, normal(tuple(update_shape))], attributes, opset=opset)


def test_scatter_9_is_scatter_elements():
    data = normal((3, 3))
    picked = np.array([[1, 0, 2], [0, 2, 1]], dtype=I64)
    updates = normal((2, 3))
    # onnx.reference has no Scatter any more, ONNX Runtime only before opset 11.
    check_against_onnxruntime("Scatter", [data, picked, updates], {"axis": 0}, opset=9, rtol=0, atol=0)
    (scatter,) = kernel_outputs("Scatter", [data, picked, updates], {"axis": 0}, opset=11)
    (elements,) = kernel_outputs("ScatterElements", [data, picked, updates], {"axis": 0}, opset=11)
    np.testing.assert_array_equal(scatter, elements)


@pytest.mark.parametrize(
    ("opset", "reduction"),
    [(11, None), (13, None), (16, "none"), (16, "add"), (16, "mul"), (18, "max"), (18, "min")],
)
@pytest.mark.parametrize(
    ("data_shape", "index_shape"), [((4, 5, 3), (2, 1)), ((4, 5, 3), (3, 2)), ((4, 5), (2, 2, 2))]
)
def test_scatter_nd(opset, reduction, data_shape, index_shape):
    data = normal(data_shape)
    depth = index_shape[-1]
    limits = np.array(data_shape[:depth])
    if reduction in (None, "none"):
        flat = rng.choice(int(np.prod(limits)), size=int(np.prod(index_shape[:-1])), replace=False)
        picked = np.stack(np.unravel_index(flat, limits), axis=-1).reshape(index_shape).astype(I64)
    else:
        picked = (rng.random(index_shape) * limits).astype(I64)
    updates = normal(tuple(index_shape[:-1]) + tuple(data_shape[depth:]))
    attributes = {} if reduction is None else {"reduction": reduction}
    check("ScatterND", [data, picked, updates], attributes, opset=opset)


def test_scatter_does_not_touch_its_input():
    data = normal((3, 3))
    before = data.copy()
    kernel_outputs("ScatterND", [data, np.array([[0]], dtype=I64), np.ones((1, 3), F32)], {}, opset=13)
    np.testing.assert_array_equal(data, before)


# --- OneHot, NonZero, TopK, Trilu, EyeLike ------------------------------------------------------


@pytest.mark.parametrize("opset", [9, 11])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("values_dtype", [F32, I64])
def test_one_hot(opset, axis, values_dtype):
    depth = 5
    picked = rng.integers(-depth if opset >= 11 else 0, depth + 2, size=(3, 4)).astype(I64)
    values = np.array([-1, 3], dtype=values_dtype)
    check("OneHot", [picked, np.array(depth, dtype=I64), values], {"axis": axis}, opset=opset)


def test_one_hot_9_negative_index_is_all_off():
    (result,) = kernel_outputs("OneHot", [np.array([-1, 1]), np.array(3), np.array([0.0, 1.0])], {}, opset=9)
    assert result.tolist() == [[0, 0, 0], [0, 1, 0]]


@pytest.mark.parametrize("opset", [9, 13])
@pytest.mark.parametrize("shape", [(3, 4), (5,), (2, 3, 2), (0, 3)])
def test_non_zero(opset, shape):
    x = (rng.random(shape) > 0.5).astype(F32)
    check("NonZero", [x], opset=opset)


def test_non_zero_scalar():
    check("NonZero", [np.array(3.0, dtype=F32)], opset=13)
    check("NonZero", [np.array(0, dtype=I64)], opset=13)


@pytest.mark.parametrize("opset", [10, 11, 24])
@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("k", [0, 1, 3])
@pytest.mark.parametrize("largest", [0, 1])
def test_top_k(opset, axis, k, largest):
    # Few distinct values, so ties are common: the lower index must come first.
    x = rng.integers(0, 4, size=(4, 5, 3)).astype(F32)
    attributes = {"axis": axis}
    if opset >= 11:
        attributes["largest"] = largest
    elif not largest:
        return
    check("TopK", [x, np.array([k], dtype=I64)], attributes, opset=opset, output_count=2)


def test_top_k_1_attribute_and_integers():
    x = rng.integers(0, 100, size=(3, 6)).astype(np.int32)
    values, positions = kernel_outputs("TopK", [x], {"k": 2}, opset=1, output_count=2)
    expected = np.sort(x, axis=1)[:, ::-1][:, :2]
    np.testing.assert_array_equal(values, expected)
    np.testing.assert_array_equal(np.take_along_axis(x, positions, axis=1), expected)
    check("TopK", [x, np.array([3], dtype=I64)], {"largest": 0}, opset=11, output_count=2)


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 0, 2, 10])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 3), (5, 2)])
def test_trilu(upper, k, shape):
    x = normal(shape)
    check("Trilu", [x, None if k is None else np.array(k, dtype=I64)], {"upper": upper}, opset=14)


@pytest.mark.parametrize("opset", [9, 22])
@pytest.mark.parametrize("k", [0, 1, -2])
@pytest.mark.parametrize("dtype", [None, 1, 7, 9])
def test_eye_like(opset, k, dtype):
    attributes = {"k": k} if dtype is None else {"k": k, "dtype": dtype}
    check("EyeLike", [normal((3, 5))], attributes, opset=opset)


# --- Einsum, Compress, Unique, Dropout, ReverseSequence, Det -----------------------------------

EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij", [(3, 4)]),
    ("ji", [(3, 4)]),
    ("i,i", [(5,), (5,)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),
    ("ij, jk, kl -> il", [(2, 3), (3, 4), (4, 5)]),
    ("ijk->", [(2, 3, 4)]),
]


@pytest.mark.parametrize(("equation", "shapes"), EINSUM_CASES)
def test_einsum(equation, shapes):
    check(
        "Einsum", [normal(shape) for shape in shapes], {"equation": equation}, opset=12, rtol=1e-5, atol=1e-5
    )


def test_einsum_integers():
    a = rng.integers(-5, 5, size=(3, 4)).astype(np.int32)
    b = rng.integers(-5, 5, size=(4, 2)).astype(np.int32)
    check("Einsum", [a, b], {"equation": "ij,jk->ik"}, opset=12)


@pytest.mark.parametrize("opset", [9, 11])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress(opset, axis):
    if opset < 11 and axis == -1:
        return
    x = normal((3, 4))
    length = x.size if axis is None else x.shape[axis]
    condition = rng.random(length - 1) > 0.4
    check("Compress", [x, condition], {} if axis is None else {"axis": axis}, opset=opset)


UNIQUE_CASES = [
    (np.array([3, 1, 3, 2, 1, 5], dtype=I64), None),
    (np.array([[1, 2], [1, 2], [0, 3]], dtype=I64), 0),
    (np.array([[1, 0, 1], [2, 3, 2]], dtype=F32), 1),
    (np.array([[2.0, 1.0], [1.0, 2.0]], dtype=F32), None),
]


@pytest.mark.parametrize(("x", "axis"), UNIQUE_CASES)
@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique(x, axis, sorted_):
    attributes = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    if not sorted_:
        # onnx.reference mishandles sorted=0 (input returned unchanged along an axis, a crash
        # on 2-D input without one).
        check_against_onnxruntime("Unique", [x], attributes, opset=11, output_count=4, rtol=0, atol=0)
    else:
        check("Unique", [x], attributes, opset=11, output_count=4)


def test_dropout_before_10_mask_has_input_type():
    # onnx.reference applies the opset-10 bool mask to every version.
    x = normal((3, 4))
    for opset in (1, 6, 7):
        output, mask = kernel_outputs("Dropout", [x], {"ratio": 0.2}, opset=opset, output_count=2)
        np.testing.assert_array_equal(output, x)
        assert mask.dtype == F32 and np.all(mask == 1)


@pytest.mark.parametrize("opset", [10, 12, 13, 22])
def test_dropout_inference(opset):
    x = normal((3, 4))
    check("Dropout", [x], opset=opset, output_count=2)
    if opset >= 12:
        check("Dropout", [x, np.array(0.3, dtype=F32), np.array(False)], opset=opset, output_count=2)


def test_dropout_training_keeps_expectation():
    x = np.ones((200, 200), dtype=F32)
    output, mask = kernel_outputs(
        "Dropout", [x, np.array(0.25, dtype=F32), np.array(True)], {"seed": 3}, opset=13, output_count=2
    )
    assert mask.dtype == np.bool_ and output.dtype == F32
    assert abs(mask.mean() - 0.75) < 0.02
    np.testing.assert_allclose(output[mask], 1 / 0.75, rtol=1e-6)
    assert np.all(output[~mask] == 0)


@pytest.mark.parametrize(("batch_axis", "time_axis"), [(1, 0), (0, 1)])
def test_reverse_sequence(batch_axis, time_axis):
    shape = [0, 0, 3]
    shape[batch_axis], shape[time_axis] = 4, 5
    lengths = np.array([1, 5, 0, 3], dtype=I64)
    check(
        "ReverseSequence",
        [normal(tuple(shape)), lengths],
        {"batch_axis": batch_axis, "time_axis": time_axis},
        opset=10,
    )


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1,)])
def test_det(shape):
    if len(shape) == 1:
        with pytest.raises(KernelError, match="Det"):
            kernel_outputs("Det", [normal(shape)], {}, opset=11)
        return
    check("Det", [normal(shape)], opset=11, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.uint64])
def test_gather_scalar_and_unsigned_indices(dtype):
    data = normal((4, 3))
    check("Gather", [data, np.array(2, dtype=dtype)], {"axis": 0}, opset=13)
    check("Gather", [data, np.array([[1, 0], [2, 2]], dtype=dtype)], {"axis": 1}, opset=13)
    (row,) = kernel_outputs("Gather", [data[0], np.array(1, dtype=dtype)], {}, opset=13)
    assert isinstance(row, np.ndarray) and row.shape == () and row == data[0, 1]
    with pytest.raises(KernelError, match="Gather"):
        kernel_outputs("Gather", [data, np.array(4, dtype=dtype)], {}, opset=13)
