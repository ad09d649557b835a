"""Binary elementwise kernels (arithmetic, logic, comparison, Where, variadic) against onnx.reference
on fresh random inputs (unary math and activations: test_unary.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.errors import KernelError
from tests.lite.ops._checks_core import check
from tests.lite.ops._reference import kernel_outputs

rng = np.random.default_rng(2024)

F32 = np.float32
BROADCAST_SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((0, 3), (1, 3))]


def normal(shape, dtype=F32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def integers(shape, dtype, low=-20, high=20):
    return rng.integers(low, high, size=shape).astype(dtype)


def non_zero_integers(shape, dtype, low=-9, high=9):
    values = integers(shape, dtype, low, high)
    return np.where(values == 0, 1, values).astype(dtype)


# --- arithmetic -------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("opset", [7, 13, 14])
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_arithmetic_float(op, opset, shapes):
    a, b = normal(shapes[0]), normal(shapes[1])
    check(op, [a, b], opset=opset)


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float64])
def test_arithmetic_types(op, dtype):
    low = 0 if dtype == np.uint8 else -50
    a = integers((4, 5), dtype, low, 50)
    b = non_zero_integers((5,), dtype, 1 if dtype == np.uint8 else -7, 7)
    check(op, [a, b], opset=14)


def test_integer_division_truncates_toward_zero():
    a = np.array([-7, 7, -7, 7, 0, -1], dtype=np.int64)
    b = np.array([2, -2, -2, 2, 3, 2], dtype=np.int64)
    (result,) = check("Div", [a, b], opset=14)
    assert result.tolist() == [-3, -3, 3, 3, 0, 0]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow"])
def test_legacy_broadcast_attribute(op):
    # onnx.reference no longer implements the opset < 7 broadcast attribute; compare with
    # the numpy-broadcast kernel on B reshaped by hand.
    a = np.abs(normal((2, 3, 4))) + 0.5
    b = np.abs(normal((3,))) + 0.5
    (legacy,) = kernel_outputs(op, [a, b], {"broadcast": 1, "axis": 1}, opset=6 if op != "Pow" else 1)
    (modern,) = kernel_outputs(op, [a, b.reshape(3, 1)], {}, opset=14)
    np.testing.assert_array_equal(legacy, modern)
    (suffix,) = kernel_outputs(
        op, [a, np.abs(normal((4,))) + 0.5], {"broadcast": 1}, opset=6 if op != "Pow" else 1
    )
    assert suffix.shape == (2, 3, 4)
    with pytest.raises(KernelError, match=op):
        kernel_outputs(op, [a, b], {}, opset=6 if op != "Pow" else 1)


@pytest.mark.parametrize(
    ("opset", "exponent_dtype"),
    # Mixed base/exponent types arrive in opset 12.
    [(7, F32), (12, F32), (12, np.int64), (13, np.float64), (15, np.int32), (15, F32)],
)
def test_pow_keeps_base_type(opset, exponent_dtype):
    base = np.abs(normal((3, 4))) + 0.1
    exponent = integers((4,), exponent_dtype, -3, 4)
    check("Pow", [base, exponent], opset=opset)


@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 2.5])
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_pow_of_floats_by_small_scalar_exponents(exponent, dtype):
    """1, 2 and 3 as products (GPT-2's GELU cubes its input), within an ulp of np.power."""
    base = normal((3, 4, 5), dtype, scale=3)
    base[0, 0, :3] = [np.inf, -np.inf, np.nan]
    (result,) = kernel_outputs("Pow", [base, np.array(exponent, dtype)], {}, opset=15)
    assert result.dtype == dtype
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(result, np.power(base, exponent), rtol=4 * np.finfo(dtype).eps)


def test_pow_integers():
    base = np.array([2, -3, 1, -1, -1, 5, 0], dtype=np.int32)
    exponent = np.array([3, 3, -2, -3, -2, -1, 2], dtype=np.int32)
    (result,) = kernel_outputs("Pow", [base, exponent], {}, opset=15)
    assert result.dtype == np.int32
    assert result.tolist() == [8, -27, 1, -1, 1, 0, 0]
    check("Pow", [base[:2], exponent[:2]], opset=15)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_mod_integers(fmod, dtype):
    check("Mod", [integers((3, 5), dtype, -30, 30), non_zero_integers((5,), dtype)], {"fmod": fmod}, opset=13)


@pytest.mark.parametrize("opset", [10, 13])
def test_mod_float_fmod(opset):
    check("Mod", [normal((4, 5), scale=10), normal((4, 5)) + 3], {"fmod": 1}, opset=opset)


# --- bits and logic ---------------------------------------------------------------------------


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_bit_shift(direction, dtype):
    x = integers((3, 4), dtype, 0, 200)
    y = integers((4,), dtype, 0, 8)
    check("BitShift", [x, y], {"direction": direction}, opset=11)


def test_bit_shift_signed_and_out_of_range():
    x = np.array([-16, 16, -1, 5], dtype=np.int32)
    y = np.array([2, 40, 33, -1], dtype=np.int32)
    (right,) = kernel_outputs("BitShift", [x, y], {"direction": "RIGHT"}, opset=28)
    (left,) = kernel_outputs("BitShift", [x, y], {"direction": "LEFT"}, opset=28)
    assert right.tolist() == [-4, 0, -1, 0]
    assert left.tolist() == [-64, 0, 0, 0]


@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize("dtype", [np.int32, np.uint8, np.int64])
def test_bitwise_binary(op, dtype):
    low = 0 if dtype == np.uint8 else -100
    check(op, [integers((3, 4), dtype, low, 100), integers((4,), dtype, low, 100)], opset=18)


@pytest.mark.parametrize("dtype", [np.int16, np.uint32])
def test_bitwise_not(dtype):
    check("BitwiseNot", [integers((3, 4), dtype, 0, 100)], opset=18)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES)
def test_logical(op, shapes):
    check(op, [rng.random(shapes[0]) > 0.5, rng.random(shapes[1]) > 0.5], opset=7)


@pytest.mark.parametrize("op", ["And", "Or", "Xor"])
def test_logical_legacy_broadcast(op):
    a = rng.random((2, 3, 4)) > 0.5
    b = rng.random((3,)) > 0.5
    (legacy,) = kernel_outputs(op, [a, b], {"broadcast": 1, "axis": 1}, opset=1)
    (modern,) = kernel_outputs(op, [a, b.reshape(3, 1)], {}, opset=7)
    np.testing.assert_array_equal(legacy, modern)


def test_not():
    check("Not", [rng.random((3, 4)) > 0.5], opset=1)


# --- comparison and Where ---------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [F32, np.int32, np.int64, np.uint8])
@pytest.mark.parametrize("shapes", BROADCAST_SHAPES[:3])
def test_comparison(op, dtype, shapes):
    opset = 16 if "OrEqual" in op else 13
    a = integers(shapes[0], dtype, 0, 4)
    b = integers(shapes[1], dtype, 0, 4)
    check(op, [a, b], opset=opset)


def test_equal_strings():
    a = np.array(["a", "b", "c"], dtype=object)
    b = np.array(["a", "x", "c"], dtype=object)
    check("Equal", [a, b], opset=19)


@pytest.mark.parametrize("op", ["Equal", "Less", "Greater"])
def test_comparison_legacy_broadcast(op):
    a = integers((2, 3, 4), np.int32, 0, 3)
    b = integers((3, 4), np.int32, 0, 3)
    (legacy,) = kernel_outputs(op, [a, b], {"broadcast": 1}, opset=1)
    (modern,) = kernel_outputs(op, [a, b], {}, opset=7)
    np.testing.assert_array_equal(legacy, modern)


@pytest.mark.parametrize("opset", [9, 16])
@pytest.mark.parametrize("dtype", [F32, np.int64])
def test_where(opset, dtype):
    condition = rng.random((3, 1, 4)) > 0.5
    check("Where", [condition, integers((2, 4), dtype), integers((1, 1), dtype)], opset=opset)


# --- variadic ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["Max", "Min", "Sum", "Mean"])
@pytest.mark.parametrize("opset", [6, 8, 13])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_variadic(op, opset, count):
    # The first shape is the broadcast result: onnx.reference accumulates into a copy of it.
    shapes = [(3, 4)] * count if opset < 8 else [(2, 3, 4), (4,), (3, 1)][:count]
    check(op, [normal(shape) for shape in shapes], opset=opset)


@pytest.mark.parametrize("op", ["Max", "Min", "Sum"])
def test_variadic_integers(op):
    check(op, [integers((3, 4), np.int32), integers((4,), np.int32)], opset=13)
