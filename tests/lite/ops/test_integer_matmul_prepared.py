"""MatMulInteger and QLinearMatMul with their constant B prepared once at load: the same int32
results as ONNX Runtime, in float32 where that is exact and float64 where K is too large."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

from lite.ops.registry import KERNELS

rng = np.random.default_rng(5)


def matmul_integer_model(B, b_zero_point):
    inputs = [helper.make_tensor_value_info("A", TensorProto.UINT8, None),
              helper.make_tensor_value_info("a_zp", TensorProto.UINT8, None)]
    node = helper.make_node("MatMulInteger", ["A", "B", "a_zp", "b_zp"], ["Y"])
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("Y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(B, "B"), numpy_helper.from_array(b_zero_point, "b_zp")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def onnxruntime_product(A, a_zero_point, B, b_zero_point):
    model = matmul_integer_model(B, b_zero_point)
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": A, "a_zp": a_zero_point})[0]


def kernel_product(A, a_zero_point, B, b_zero_point, *, prepared):
    chosen = KERNELS.select("MatMulInteger", "", 13)
    extra = {}
    if prepared:
        extra["prepared"] = chosen.prepare([None, B, None, b_zero_point], [None] * 4)
        assert extra["prepared"] is not None
    return chosen.fn(A, B, a_zero_point, b_zero_point, **extra), extra.get("prepared")


@pytest.mark.parametrize(("depth", "low", "high", "dtype"), [
    (16, -127, 128, np.float32),   # 16 * 255 * 255 < 2**24: float32 is exact
    (600, -127, 128, np.float64),  # extreme weights over a long K: float32 could round, kept float64
    (600, -3, 4, np.float32),      # the same K with small weights: the column bound allows float32
])
def test_prepared_weight_gives_onnxruntimes_int32(depth, low, high, dtype):
    A = rng.integers(0, 256, (2, 5, depth), dtype=np.uint8)
    A[..., ::2] = 0  # far from the zero point: the largest |a - a_zp| there is
    B = rng.integers(low, high, (depth, 9), dtype=np.int8)
    B[:, 0] = low  # one column at the extreme on every row
    a_zero_point, b_zero_point = np.uint8(255), np.int8(0) if low < -100 else np.int8(1)
    expected = onnxruntime_product(A, np.array(a_zero_point), B, np.array(b_zero_point))
    for prepared in (False, True):
        got, value = kernel_product(A, a_zero_point, B, b_zero_point, prepared=prepared)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, expected)
        if value is not None:
            assert value.b.dtype == dtype


def test_a_b_zero_point_other_than_the_prepared_one_falls_back():
    B = rng.integers(-127, 128, (8, 3), dtype=np.int8)
    A = rng.integers(0, 256, (4, 8), dtype=np.uint8)
    _, prepared = kernel_product(A, np.uint8(3), B, np.int8(2), prepared=True)
    chosen = KERNELS.select("MatMulInteger", "", 13)
    got = chosen.fn(A, B, np.uint8(3), np.int8(-5), prepared=prepared)  # another b zero point at run time
    expected = (A.astype(np.int64) - 3) @ (B.astype(np.int64) + 5)
    np.testing.assert_array_equal(got, expected)


def test_numpy_engine_centres_the_weight_once_at_load(monkeypatch):
    import lite
    from converter import convert_model
    from lite.format import to_bytes
    from lite.ops import mat_mul_integer

    calls = []
    original = mat_mul_integer._centred_b
    monkeypatch.setattr(mat_mul_integer, "_centred_b", lambda *args: calls.append(1) or original(*args))
    B = rng.integers(-127, 128, (32, 6), dtype=np.int8)
    model = lite.Model.load(to_bytes(convert_model(matmul_integer_model(B, np.array(np.int8(0))))), device="numpy")
    A = rng.integers(0, 256, (3, 32), dtype=np.uint8)
    a_zero_point = np.array(np.uint8(128))
    expected = onnxruntime_product(A, a_zero_point, B, np.array(np.int8(0)))
    for _ in range(3):
        np.testing.assert_array_equal(model.predict({"A": A, "a_zp": a_zero_point})["Y"], expected)
    assert len(calls) == 1


def test_qlinear_matmul_prepared_matches_unprepared():
    chosen = KERNELS.select("QLinearMatMul", "", 10)
    a = rng.integers(0, 256, (4, 40), dtype=np.uint8)
    b = rng.integers(0, 256, (40, 7), dtype=np.uint8)
    scales = [np.float32(0.02), np.float32(0.01), np.float32(0.5)]
    args = (a, scales[0], np.uint8(120), b, scales[1], np.uint8(128), scales[2], np.uint8(10))
    prepared = chosen.prepare([None, None, None, b, None, np.uint8(128)], [None] * 8)
    assert prepared is not None
    np.testing.assert_array_equal(chosen.fn(*args, prepared=prepared), chosen.fn(*args))


@pytest.mark.parametrize("op", ["ConvInteger", "QLinearConv"])
def test_integer_convolutions_prepare_their_weight(op):
    chosen = KERNELS.select(op, "", 10)
    x = rng.integers(0, 256, (1, 3, 9, 9), dtype=np.uint8)
    w = rng.integers(-127, 128, (4, 3, 3, 3), dtype=np.int8)
    attributes = {"pads": [1, 1, 1, 1]}
    if op == "ConvInteger":
        args = [x, w, np.uint8(100), np.int8(3)]
        constants = [None, w, None, np.int8(3)]
    else:
        bias = rng.integers(-500, 500, 4).astype(np.int32)
        args = [x, np.float32(0.02), np.uint8(100), w, np.float32(0.01), np.int8(3), np.float32(0.3), np.uint8(5), bias]
        constants = [None, None, None, w, None, np.int8(3), None, None, bias]
    prepared = chosen.prepare(constants, [None] * len(args), **attributes)
    assert prepared is not None
    expected = chosen.fn(*args, **attributes)
    for _ in range(2):  # the second call reuses the layer kept for this shape
        np.testing.assert_array_equal(chosen.fn(*args, **attributes, prepared=prepared), expected)
    if op == "ConvInteger":
        np.testing.assert_array_equal(expected, onnxruntime_conv_integer(x, w, attributes))


def onnxruntime_conv_integer(x, w, attributes):
    node = helper.make_node("ConvInteger", ["x", "w", "x_zp", "w_zp"], ["y"], **attributes)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, None)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(np.uint8(100)), "x_zp"),
                               numpy_helper.from_array(np.array(np.int8(3)), "w_zp")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]
