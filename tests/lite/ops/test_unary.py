"""Unary math and activation kernels against onnx.reference on fresh random inputs (the binary
elementwise kernels: test_elementwise.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tests.lite.ops._checks_core import check
from tests.lite.ops._reference import kernel_outputs

rng = np.random.default_rng(2024)

F32 = np.float32


def normal(shape, dtype=F32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def integers(shape, dtype, low=-20, high=20):
    return rng.integers(low, high, size=shape).astype(dtype)


# --- unary math -------------------------------------------------------------------------------

UNARY_DOMAINS = {
    "Abs": (-5, 5),
    "Neg": (-5, 5),
    "Exp": (-10, 10),
    "Log": (0.01, 100),
    "Sqrt": (0, 100),
    "Reciprocal": (0.1, 10),
    "Floor": (-5, 5),
    "Ceil": (-5, 5),
    "Sign": (-5, 5),
    "Sin": (-6, 6),
    "Cos": (-6, 6),
    "Tan": (-1.5, 1.5),
    "Asin": (-0.99, 0.99),
    "Acos": (-0.99, 0.99),
    "Atan": (-10, 10),
    "Sinh": (-5, 5),
    "Cosh": (-5, 5),
    "Asinh": (-10, 10),
    "Acosh": (1, 10),
    "Atanh": (-0.99, 0.99),
    "Erf": (-4, 4),
    "Tanh": (-10, 10),
    "Sigmoid": (-30, 30),
    "Softplus": (-30, 30),
    "Softsign": (-10, 10),
    "HardSwish": (-6, 6),
    "Relu": (-5, 5),
    "Mish": (-10, 10),
    "Identity": (-5, 5),
}


@pytest.mark.parametrize("op", sorted(UNARY_DOMAINS))
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_unary_float(op, dtype):
    low, high = UNARY_DOMAINS[op]
    x = rng.uniform(low, high, size=(4, 5)).astype(dtype)
    check(op, [x], opset=22)


@pytest.mark.parametrize("op", sorted(UNARY_DOMAINS))
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_unary_float_of_a_scalar_through_the_engine(op, dtype):
    # A rank-0 tensor (a GRU-based quality model's gate): numpy's ufuncs return a scalar for
    # one, which the in-place passes of the fast kernels could not write into.
    import lite
    from lite.format import GraphBuilder, to_bytes

    b = GraphBuilder("scalar", opset=22)
    b.output(b.node(op, [b.input("x", dtype, [])]), dtype, [])
    low, high = UNARY_DOMAINS[op]
    x = np.asarray(rng.uniform(low, high), dtype=dtype)
    model = lite.Model.load(to_bytes(b.build()), device="numpy")
    (got,) = model.predict({"x": x}).values()
    (want,) = kernel_outputs(op, [x.reshape(1)], {}, opset=22)  # the same kernel on one element
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == dtype
    np.testing.assert_array_equal(got, want.reshape(()))


@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign", "Relu"])
@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_unary_integers(op, dtype):
    check(op, [integers((3, 4), dtype)], opset=14)


def test_round_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 0.0], dtype=F32)
    (result,) = check("Round", [x], opset=11)
    assert result.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0, 0.0]


def test_erf_is_precise():
    x = np.linspace(-7, 7, 20001)
    (result,) = kernel_outputs("Erf", [x], {}, opset=13)
    expected = np.array([math.erf(v) for v in x])
    np.testing.assert_allclose(result, expected, rtol=0, atol=1e-14)
    (special,) = kernel_outputs("Erf", [np.array([np.inf, -np.inf, np.nan, 0.0])], {}, opset=13)
    assert special[0] == 1 and special[1] == -1 and np.isnan(special[2]) and special[3] == 0


def test_isnan_isinf():
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0], dtype=F32)
    check("IsNaN", [x], opset=13)
    for negative in (0, 1):
        for positive in (0, 1):
            check("IsInf", [x], {"detect_negative": negative, "detect_positive": positive}, opset=10)


def test_clip_1_leaves_missing_bound_open():
    # onnx.reference has no opset-1 Clip.
    x = np.array([-1e300, -2.0, 0.0, 3.0, 1e300], dtype=np.float64)
    (result,) = kernel_outputs("Clip", [x], {"max": 0.5}, opset=1)
    assert result.tolist() == [-1e300, -2.0, 0.0, 0.5, 0.5]
    (result,) = kernel_outputs("Clip", [x], {}, opset=6)
    assert result.tolist() == [-3.4028234663852886e38, -2.0, 0.0, 3.0, 3.4028234663852886e38]


@pytest.mark.parametrize("opset", [6, 11, 12, 13])
def test_clip(opset):
    x = normal((4, 5), scale=3)
    if opset < 11:
        check("Clip", [x], {"min": -1.0, "max": 2.0}, opset=opset)
        check("Clip", [x], {"max": 0.5}, opset=opset)
        return
    low, high = np.array(-1.0, F32), np.array(2.0, F32)
    check("Clip", [x, low, high], opset=opset)
    check("Clip", [x, None, high], opset=opset)
    check("Clip", [x, low], opset=opset)
    check("Clip", [x], opset=opset)
    check("Clip", [x, high, low], opset=opset)  # min > max: everything becomes max


def test_clip_integers():
    x = integers((4, 5), np.int32)
    check("Clip", [x, np.array(-3, np.int32), np.array(5, np.int32)], opset=13)


# --- activations with attributes --------------------------------------------------------------

ACTIVATION_CASES = [
    ("LeakyRelu", {}, 16),
    ("LeakyRelu", {"alpha": 0.3}, 6),
    ("PRelu", None, 16),
    ("Elu", {}, 6),
    ("Elu", {"alpha": 0.5}, 22),
    ("Selu", {}, 6),
    ("Selu", {"alpha": 2.0, "gamma": 3.0}, 22),
    ("Celu", {}, 12),
    ("Celu", {"alpha": 2.0}, 12),
    ("HardSigmoid", {}, 6),
    ("HardSigmoid", {"alpha": 0.5, "beta": 0.6}, 22),
    ("ThresholdedRelu", {}, 10),
    ("ThresholdedRelu", {"alpha": 0.5}, 22),
    ("Shrink", {}, 9),
    ("Shrink", {"lambd": 1.0, "bias": 0.3}, 9),
    ("Gelu", {}, 20),
    ("Gelu", {"approximate": "tanh"}, 20),
    ("Swish", {}, 24),
    ("Swish", {"alpha": 0.7}, 24),
]


@pytest.mark.parametrize(("op", "attributes", "opset"), ACTIVATION_CASES)
@pytest.mark.parametrize("dtype", [F32, np.float64])
def test_activation(op, attributes, opset, dtype):
    x = normal((3, 4, 5), dtype, scale=3)
    if op == "PRelu":
        check(op, [x, normal((4, 1), dtype)], opset=opset)
        check(op, [x, normal((5,), dtype)], opset=7)
        return
    check(op, [x], attributes, opset=opset)


def test_selu_1_defaults():
    # Opset 1 had rounder defaults than opset 6 (onnx.reference implements only the latter).
    x = np.array([-2.0, -0.5, 0.0, 1.5])
    (result,) = kernel_outputs("Selu", [x], {}, opset=1)
    np.testing.assert_allclose(result, 1.0507 * np.where(x > 0, x, 1.6732 * (np.exp(x) - 1)), rtol=1e-12)


def test_shrink_integers():
    check("Shrink", [integers((3, 4), np.int32)], {"lambd": 1.5, "bias": 0.5}, opset=9)


def test_activations_do_not_overflow():
    x = np.array([-1000.0, -100.0, 0.0, 100.0, 1000.0], dtype=F32)
    with np.errstate(over="raise", invalid="raise"):
        for op in ("Sigmoid", "Softplus", "Mish", "Swish"):
            (result,) = kernel_outputs(op, [x], {}, opset=24)
            assert np.all(np.isfinite(result)), op


def test_sigmoid_is_zero_where_its_value_underflows_as_in_pytorch():
    # A detector keeps candidates with sigmoid(score) > 0; a floor of 6e-39 kept all of them.
    x = np.array([-17.0, -88.0, -88.8, -90.0, -200.0, np.nan, 50.0], dtype=F32)
    with np.errstate(over="ignore"):
        expected = (1 / (1 + np.exp(-x))).astype(F32)  # e^-x overflows to inf below -88.72: exactly 0
    (result,) = kernel_outputs("Sigmoid", [x], {}, opset=13)
    np.testing.assert_array_equal(result[[0, 2, 3, 4, 6]], expected[[0, 2, 3, 4, 6]])
    assert np.isnan(result[5]) and 0 < result[1] < 1e-38


@pytest.mark.parametrize(
    "op", ["Exp", "Sigmoid", "Tanh", "Erf", "Softplus", "Gelu", "HardSwish", "Relu", "Sqrt"]
)
def test_float16_stays_float16(op):
    x = rng.uniform(0.1, 3, size=(3, 4)).astype(np.float16)
    check(op, [x], opset=22 if op != "Gelu" else 20, rtol=2e-3, atol=2e-3)


def test_mod_float_python_semantics_28():
    a = np.array([-7.5, 7.5, 3.0, -3.0, 0.0], dtype=F32)
    b = np.array([2.0, -2.0, np.inf, np.inf, 5.0], dtype=F32)
    (result,) = check("Mod", [a, b], {"fmod": 0}, opset=28)
    assert result.tolist() == [0.5, -0.5, 3.0, np.inf, 0.0]


def test_float32_erf_is_within_a_few_ulps_of_math_erf():
    import math

    from lite.ops.erf import erf_float32

    x = np.concatenate([np.linspace(-8, 8, 200_001), np.geomspace(1e-30, 1, 2000), -np.geomspace(1e-30, 1, 2000),
                        [0.0, -0.0, np.inf, -np.inf]]).astype(np.float32)
    expected = np.array([math.erf(float(v)) for v in x])
    got = erf_float32(x).astype(np.float64)
    ulps = np.abs(got - expected) / np.spacing(np.abs(expected).astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 4, x[ulps.argmax()]
    assert np.isnan(erf_float32(np.array([np.nan], np.float32)))[0]


def test_float32_gelu_keeps_its_relative_accuracy_in_the_negative_tail():
    """Gelu's float32 gate is erfc(-z) from the fit alone: a small relative error wherever the
    result is a normal float32 (it grows with z, as float32 rounds z^2 inside exp(-z^2)), where
    1 + erf(z) would lose every digit to cancellation."""
    import math

    x = np.concatenate([np.linspace(-12, 12, 100_001), np.geomspace(1e-30, 1, 1000), -np.geomspace(1e-30, 1, 1000),
                        [0.0, -0.0]]).astype(np.float32)
    expected = np.array([0.5 * float(v) * math.erfc(-float(v) / math.sqrt(2)) for v in x])
    (got,) = kernel_outputs("Gelu", [x], {}, opset=20)
    assert got.dtype == np.float32
    normal_results = np.abs(expected) >= np.finfo(np.float32).tiny
    error = np.abs(got.astype(np.float64) - expected)[normal_results] / np.abs(expected[normal_results])
    assert error.max() < 3e-5, x[normal_results][error.argmax()]
    assert error[np.abs(x[normal_results]) < 6].max() < 5e-6
    assert np.all(got[expected == 0] == 0)
    (special,) = kernel_outputs("Gelu", [np.array([np.inf, np.nan], np.float32)], {}, opset=20)
    assert special[0] == np.inf and np.isnan(special[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int8])
@pytest.mark.parametrize("arena", [False, True])
def test_relu_keeps_nan_infinities_and_the_type(dtype, arena):
    """Relu of floats is the clip ufunc with 0-d bounds (into the arena's buffer when given):
    NaN stays NaN, infinities and the type are kept."""
    from lite.ops.activations import Relu

    if np.dtype(dtype).kind == "f":
        x = np.array([[-1.5, 0.0, 2.5, np.nan], [np.inf, -np.inf, 7.0, -0.0]], dtype)
    else:
        x = np.array([[-3, 0, 2, 5], [-1, 4, -7, 1]], dtype)
    buffers = []

    def allocate(shape, dtype):
        buffers.append(np.full(shape, 9, dtype))
        return buffers[-1]

    got = Relu(x, allocate=allocate) if arena else Relu(x)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    assert (got is buffers[0]) if arena else not buffers


def test_float32_gelu_of_a_small_tensor_matches_the_arena_path():
    """Up to _GELU_SMALL elements the scratch comes from np.empty instead of ``allocate``: the
    values are those of the same elements in a larger tensor (one pass per row of the matrix either way)."""
    from lite.ops import activations

    x = np.concatenate([np.linspace(-12, 12, 3001), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(np.float32)
    small = x[: activations._GELU_SMALL - 3].reshape(1, -1)
    calls = []

    def allocate(shape, dtype=np.float32):
        calls.append(shape)
        return np.empty(shape, dtype)

    got = activations.Gelu(small, allocate=allocate)
    assert not calls and got.shape == small.shape
    large = activations.Gelu(x, allocate=allocate)
    assert calls
    # Bit-identical on numpy 2; numpy 1.x's float32 SIMD loops round a few elements apart depending
    # on where they sit in the array (3 of 2,557 by up to 3.4e-7 of their value, numpy 1.26).
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        np.testing.assert_array_equal(got[0], large[: small.size])
    np.testing.assert_allclose(got[0], large[: small.size], rtol=1e-6, atol=0)
    np.testing.assert_array_equal(activations.Gelu(x[-5:], allocate=allocate)[2:4], [np.inf, 0.0])


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_hard_swish_in_place_is_the_formula_bit_for_bit(dtype):
    """x * clip(x / 6 + 1/2, 0, 1): float32 and float64 inputs computed in place in one array,
    the same values as the formula's fresh arrays (inf, -inf, NaN and signed zeros included)."""
    x = np.concatenate([np.linspace(-8, 8, 10_001), [np.inf, -np.inf, np.nan, 0.0, -0.0]]).astype(dtype)
    with np.errstate(invalid="ignore"):  # inf * 0
        (got,) = kernel_outputs("HardSwish", [x], {}, opset=14)
        expected = np.asarray(x * np.clip(x * (1 / 6) + 0.5, 0, 1)).astype(dtype)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)


def test_float32_gelu_keeps_a_channels_last_layout():
    """A convolution's channels-last output (lite.ops._layout) is computed in its memory order and
    handed on channels-last, with the values of the C-contiguous array's Gelu."""
    from lite.ops import activations
    from lite.ops._layout import is_channels_last

    x = np.random.default_rng(3).standard_normal((1, 8, 48, 48)).astype(np.float32)
    strided = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    assert is_channels_last(strided)
    got = activations.Gelu(strided)
    assert is_channels_last(got)
    np.testing.assert_array_equal(got, activations.Gelu(x))
