"""Shape, Size, Cast, CastLike, ConstantOfShape, Constant and Range: kernels that read only a
tensor's shape or type, or make a tensor from attributes, against onnx.reference on fresh random
inputs."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto

from lite.errors import KernelError
from tests.lite.ops._checks_core import check
from tests.lite.ops._reference import kernel_outputs

rng = np.random.default_rng(5)
F32 = np.float32
I64 = np.int64


def normal(shape, dtype=F32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("opset", [1, 13, 15, 19, 21])
@pytest.mark.parametrize(("start", "end"), [(None, None), (1, None), (-2, None), (0, -1), (-10, 10), (2, 1)])
def test_shape(opset, start, end):
    if opset < 15 and (start, end) != (None, None):
        return
    attributes = {key: value for key, value in (("start", start), ("end", end)) if value is not None}
    check("Shape", [normal((2, 3, 4))], attributes, opset=opset)


@pytest.mark.parametrize("shape", [(2, 3, 4), (), (0, 5)])
def test_size(shape):
    check("Size", [normal(shape)], opset=13)


NUMERIC_TYPES = {
    TensorProto.FLOAT: F32,
    TensorProto.DOUBLE: np.float64,
    TensorProto.FLOAT16: np.float16,
    TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8,
    TensorProto.INT32: np.int32,
    TensorProto.INT64: I64,
    TensorProto.UINT16: np.uint16,
    TensorProto.BOOL: np.bool_,
}


@pytest.mark.parametrize("source", sorted(NUMERIC_TYPES))
@pytest.mark.parametrize("target", sorted(NUMERIC_TYPES))
def test_cast_numeric(source, target):
    values = rng.uniform(0, 100, size=(3, 4))
    values[0, :2] = 0
    x = values.astype(NUMERIC_TYPES[source])
    check("Cast", [x], {"to": target}, opset=13)


@pytest.mark.parametrize("opset", [6, 9, 13, 19, 21])
def test_cast_truncates_toward_zero(opset):
    x = np.array([-2.7, -0.5, 0.5, 2.7], dtype=F32)
    (result,) = check("Cast", [x], {"to": TensorProto.INT32}, opset=opset)
    assert result.tolist() == [-2, 0, 0, 2]


def test_cast_strings():
    numbers = np.array([0.1, 1.5, -2.0, 1e10, np.inf], dtype=F32)
    check("Cast", [numbers], {"to": TensorProto.STRING}, opset=13)
    check("Cast", [np.array([1, -5], dtype=I64)], {"to": TensorProto.STRING}, opset=13)
    text = np.array(["1.5", "-2", "inf", "NaN", "1e3"], dtype=object)
    check("Cast", [text], {"to": TensorProto.FLOAT}, opset=13)
    check("Cast", [np.array(["12", "-7"], dtype=object)], {"to": TensorProto.INT64}, opset=13)
    (flags,) = kernel_outputs(
        "Cast", [np.array(["true", "False", "0", "2.5"], dtype=object)], {"to": TensorProto.BOOL}, opset=13
    )
    assert flags.tolist() == [True, False, False, True]


def test_cast_1_takes_a_type_name():
    (result,) = kernel_outputs("Cast", [np.array([1.7, -1.7], dtype=F32)], {"to": "INT32"}, opset=1)
    assert result.dtype == np.int32 and result.tolist() == [1, -1]


def test_cast_to_bfloat16_gives_words():
    (result,) = kernel_outputs(
        "Cast", [np.array([1.0, -2.0], dtype=F32)], {"to": TensorProto.BFLOAT16}, opset=13
    )
    assert result.dtype == np.uint16 and result.tolist() == [0x3F80, 0xC000]


@pytest.mark.parametrize("opset", [15, 19, 21])
@pytest.mark.parametrize("target", [np.int32, np.float64, np.bool_, np.float16])
def test_cast_like(opset, target):
    check("CastLike", [normal((3, 4)) * 10, np.zeros(1, dtype=target)], opset=opset)


@pytest.mark.parametrize("opset", [9, 20, 21])
@pytest.mark.parametrize("value", [None, np.array([3], dtype=np.int32), np.array([1.5], dtype=np.float64)])
@pytest.mark.parametrize("shape", [(2, 3), (0,), ()])
def test_constant_of_shape(opset, value, shape):
    attributes = {} if value is None else {"value": value}
    check("ConstantOfShape", [np.array(shape, dtype=I64)], attributes, opset=opset)


CONSTANT_CASES = [
    {"value": np.arange(6, dtype=F32).reshape(2, 3)},
    {"value": np.array(["x", "yz"], dtype=object)},
    {"value_float": 2.5},
    {"value_floats": [1.0, 2.0]},
    {"value_int": 7},
    {"value_ints": [1, -2, 3]},
    {"value_string": "hello"},
    {"value_strings": ["a", "b"]},
]


@pytest.mark.parametrize("attributes", CONSTANT_CASES)
def test_constant(attributes):
    check("Constant", [], attributes, opset=13)


def test_constant_needs_exactly_one_value():
    with pytest.raises(KernelError, match="Constant"):
        kernel_outputs("Constant", [], {"value_int": 1, "value_float": 2.0}, opset=13)


RANGE_CASES = [
    (0, 10, 3, I64),
    (10, 0, -3, np.int32),
    (5, 5, 1, I64),
    (0, 10, -1, np.int16),
    (0.5, 3.2, 0.7, F32),
    (1.0, -2.0, -0.25, np.float64),
]


@pytest.mark.parametrize(("start", "limit", "delta", "dtype"), RANGE_CASES)
def test_range(start, limit, delta, dtype):
    inputs = [np.array(v, dtype=dtype) for v in (start, limit, delta)]
    check("Range", inputs, opset=11)
