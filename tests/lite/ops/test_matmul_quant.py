"""MatMul, Gemm, integer matmuls and (De)QuantizeLinear against onnx.reference."""

from __future__ import annotations

import numpy as np
import pytest

from tests.lite.ops._reference import check_against_reference, kernel_outputs

rng = np.random.default_rng(11)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def integers(dtype, *shape, low=None, high=None):
    info = np.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    return rng.integers(low, int(high) + 1, size=shape).astype(dtype)


@pytest.mark.parametrize(
    "a, b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 2)), ((2, 1, 3, 4), (5, 4, 2)), ((3,), (3,))]
)
def test_matmul(a, b):
    check_against_reference("MatMul", [normal(*a), normal(*b)], opset=13)


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 5), (1, 1), ()])
def test_gemm(trans_a, trans_b, c_shape):
    a = normal(*((4, 3) if trans_a else (3, 4)))
    b = normal(*((5, 4) if trans_b else (4, 5)))
    c = None if c_shape is None else normal(*c_shape)
    attributes = {"transA": trans_a, "transB": trans_b, "alpha": 0.7, "beta": 1.3}
    check_against_reference("Gemm", [a, b, c], attributes, opset=13)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("per_row", [False, True])
def test_matmul_integer(dtype, per_row):
    a, b = integers(dtype, 3, 6), integers(dtype, 6, 4)
    a_zero = integers(dtype, 3) if per_row else np.array(3, dtype)
    b_zero = integers(dtype, 4) if per_row else np.array(250 if dtype == np.uint8 else -5, dtype)
    if not per_row:
        check_against_reference("MatMulInteger", [a, b, a_zero, b_zero], opset=10)
        return
    # Neither onnx.reference nor ONNX Runtime accepts a per-row a_zero_point: check the spec's formula.
    (y,) = kernel_outputs("MatMulInteger", [a, b, a_zero, b_zero], {}, opset=10)
    expected = (a.astype(np.int64) - a_zero[:, None]) @ (b.astype(np.int64) - b_zero[None, :])
    np.testing.assert_array_equal(y, expected)
    assert y.dtype == np.int32


def test_matmul_integer_batched_without_zero_points():
    a, b = integers(np.uint8, 2, 3, 6), integers(np.int8, 6, 4)
    check_against_reference("MatMulInteger", [a, b], opset=10)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_qlinear_matmul(dtype):
    inputs = [
        integers(dtype, 2, 3, 8), np.array(0.03, np.float32), np.array(4, dtype),
        integers(dtype, 8, 5), np.array(0.02, np.float32), np.array(-2 if dtype == np.int8 else 9, dtype),
        np.array(0.9, np.float32), np.array(5, dtype),
    ]
    check_against_reference("QLinearMatMul", inputs, opset=10)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.uint16, np.int16])
def test_quantize_linear_per_tensor(dtype):
    x = normal(3, 4) * 50
    x[0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    scale = np.array(0.5, np.float32)
    check_against_reference("QuantizeLinear", [x, scale, np.array(1, dtype)], opset=10)
    check_against_reference("QuantizeLinear", [x, scale, np.array(1, dtype)], opset=21)


def test_quantize_linear_defaults_to_uint8():
    check_against_reference("QuantizeLinear", [normal(5) * 100, np.array(0.7, np.float32)], opset=13)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_quantize_dequantize_per_axis(axis):
    x = normal(3, 4, 5) * 20
    size = x.shape[axis]
    scale = rng.uniform(0.05, 0.5, size).astype(np.float32)
    zero = integers(np.int8, size, low=-10, high=10)
    check_against_reference("QuantizeLinear", [x, scale, zero], {"axis": axis}, opset=13)
    q = integers(np.int8, 3, 4, 5)
    # onnx.reference implements DequantizeLinear from opset 19 on; same semantics as 13.
    check_against_reference("DequantizeLinear", [q, scale, zero], {"axis": axis}, opset=19)


@pytest.mark.parametrize("axis, block_size", [(0, 2), (1, 3), (-1, 4)])
def test_quantize_dequantize_blocked(axis, block_size):
    x = normal(4, 6, 8) * 10
    blocks = list(x.shape)
    blocks[axis] = -(-x.shape[axis] // block_size)
    scale = rng.uniform(0.05, 0.5, blocks).astype(np.float32)
    zero = integers(np.uint8, *blocks, low=100, high=150)
    attributes = {"axis": axis, "block_size": block_size}
    check_against_reference("QuantizeLinear", [x, scale, zero], attributes, opset=21)
    q = integers(np.uint8, 4, 6, 8)
    check_against_reference("DequantizeLinear", [q, scale, zero], attributes, opset=21)


@pytest.mark.parametrize("element_type, low, high", [(22, -8, 7), (21, 0, 15)])
def test_quantize_linear_4bit_uses_output_dtype(element_type, low, high):
    # At kernel level int4/uint4 are unpacked logical int8/uint8 values; output_dtype names the type.
    x = normal(6, 4) * 10
    scale = np.array(0.8, np.float32)
    (y,) = kernel_outputs("QuantizeLinear", [x, scale], {"output_dtype": element_type}, opset=21)
    expected = np.clip(np.rint(x / scale), low, high)
    np.testing.assert_array_equal(y, expected)
    assert y.dtype == (np.int8 if element_type == 22 else np.uint8)
    model_outputs = _reference_4bit(x, scale, element_type)
    np.testing.assert_array_equal(y, model_outputs)


def _reference_4bit(x, scale, element_type):
    from tests.lite.ops._reference import reference_outputs

    (y,) = reference_outputs("QuantizeLinear", [x, scale], {"output_dtype": element_type}, opset=21)
    return np.asarray(y).astype(np.int16)


def test_dequantize_linear_int32_and_output_dtype():
    q = integers(np.int32, 3, 4, low=-(2**20), high=2**20)
    check_against_reference("DequantizeLinear", [q, np.array(0.01, np.float32)], opset=19)
    check_against_reference(
        "DequantizeLinear", [integers(np.int8, 3, 4), np.array(0.01, np.float32)], {"output_dtype": 10}, opset=23
    )


def test_quantize_linear_precision_attribute():
    x = normal(3, 4) * 10
    check_against_reference(
        "QuantizeLinear", [x, np.array(0.3, np.float32), np.array(3, np.int8)], {"precision": 11}, opset=23
    )


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_dynamic_quantize_linear(scale):
    check_against_reference("DynamicQuantizeLinear", [normal(4, 5) * scale], opset=11, output_count=3)
    check_against_reference("DynamicQuantizeLinear", [np.abs(normal(4, 5))], opset=11, output_count=3)


def test_quantize_linear_saturates_an_overflowing_division_without_warning():
    import warnings

    from lite.ops.quantize_linear import QuantizeLinear_13

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = QuantizeLinear_13(np.array([1e30, -1e30, 1.0], np.float32), np.float32(1e-30), np.uint8(0))
    np.testing.assert_array_equal(got, [255, 0, 255])
