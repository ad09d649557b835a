"""Every engine implements exactly the fused activations of lite.format.fused_activation, with one meaning.

The numpy implementation is the reference; the ONNX form the lowering writes (evaluated by
onnx's reference implementation) and the torch implementation must agree with it.
"""

from __future__ import annotations

import numpy as np
import pytest

from lite.format import fused_activation as vocabulary
from lite.ops import fused_activation as numpy_activations

PARAMS = {"Clip": (0.0, 6.0), "LeakyRelu": (0.1,), "HardSigmoid": (0.25, 0.4)}


def _params(name: str) -> tuple[float, ...]:
    return PARAMS.get(name, ())


def _input() -> np.ndarray:
    return np.random.default_rng(0).normal(0, 4, (2, 3, 5)).astype(np.float32)


def test_params_cover_the_vocabulary():
    assert set(PARAMS) == {name for name, a in vocabulary.ACTIVATIONS.items() if a.arity}
    for name in vocabulary.NAMES:
        assert vocabulary.check(name, _params(name)) is None
    assert "unknown fused activation" in vocabulary.check("Elu", ())


def test_numpy_implements_exactly_the_vocabulary():
    assert set(numpy_activations._ACTIVATIONS) == vocabulary.NAMES
    assert numpy_activations.ATTRIBUTE == vocabulary.ATTRIBUTE == "fused_activation"
    assert numpy_activations.PARAMS_ATTRIBUTE == vocabulary.PARAMS_ATTRIBUTE == "fused_activation_params"


# Clip's bounds are attributes before opset 11, inputs after.
@pytest.mark.parametrize(("name", "opset"), [*((name, 17) for name in sorted(vocabulary.NAMES)), ("Clip", 10)])
def test_onnx_form_computes_the_activation(name, opset):
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    from lite.format.onnx.lower import activation_nodes

    x = _input()
    initializers = []
    nodes = activation_nodes(name, _params(name), "x", "y", f"layer/{name}", opset, initializers=initializers)
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, x.shape)],
                              initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    (actual,) = ReferenceEvaluator(model).run(None, {"x": x})
    expected = numpy_activations.apply(x.copy(), name, _params(name))
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(vocabulary.NAMES))
def test_torch_applies_the_activation(name):
    torch = pytest.importorskip("torch")
    from lite.engines.torch.ops import apply_activation

    x = _input()
    actual = apply_activation(torch.from_numpy(x.copy()), name, _params(name)).numpy()
    expected = numpy_activations.apply(x.copy(), name, _params(name))
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
@pytest.mark.parametrize("name", sorted(vocabulary.NAMES))
def test_into_writes_what_apply_gives(name, dtype):
    """The activation decided once (numpy_activations.into) writes into a strided ``out`` the
    values apply gives, bit for bit, and leaves its input alone."""
    x = _input().astype(dtype)
    x[0, 0, :3] = [0.0, 6.0, -0.0]
    expected = numpy_activations.apply(x.copy(), name, _params(name))
    storage = np.full((2, 5, 3), np.nan, dtype)
    out = storage.transpose(0, 2, 1)  # channels-last-like: not C-contiguous
    before = x.copy()
    numpy_activations.into(name, _params(name), dtype)(x, out)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(x, before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, None])
@pytest.mark.parametrize("name", sorted(vocabulary.NAMES))
def test_in_place_given_the_dtype_gives_what_apply_gives(name, dtype):
    x = _input().astype(dtype or np.float32)
    expected = numpy_activations.apply(x.copy(), name, _params(name))
    numpy_activations.in_place(name, _params(name), dtype)(x)
    np.testing.assert_array_equal(x, expected)


def test_relu_and_clip_bounds_are_read_only_zero_dimensional_arrays():
    """The bounds the clip ufunc gets once typed (a numpy scalar would be converted on every call)."""
    for name in ("Relu", "Clip"):
        bounds = numpy_activations._bounds(name, _params(name), np.float32)
        assert all(b.shape == () and b.dtype == np.float32 and not b.flags.writeable for b in bounds)
    assert numpy_activations._bounds("Relu", (), np.int32) is None
    assert numpy_activations._bounds("HardSwish", (), np.float32) is None


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_hard_swish_matches_its_formula(dtype):
    """x * clip(x * (1/6) + 1/2, 0, 1) in x's type (ONNX's formula, alpha = 1/6; float16 in
    float32, rounded once), its constants typed once (0-d arrays), into a separate output, in
    place and into a new array alike."""
    x = _input().astype(dtype)
    wide = x.astype(np.float32) if dtype == np.float16 else x
    compute = wide.dtype.type
    expected = (wide * np.clip(wide * compute(1 / 6) + compute(0.5), compute(0), compute(1))).astype(dtype)
    got = numpy_activations.apply(x.copy(), "HardSwish", ())
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, expected)
    out = np.empty_like(x)
    numpy_activations.apply_into(x, out, "HardSwish", ())
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(numpy_activations.apply(x.copy().transpose(), "HardSwish", ()), expected.T)
    tolerance = 1e-3 if dtype == np.float16 else 1e-6
    np.testing.assert_allclose(got, x * np.clip(x / dtype(6) + dtype(0.5), 0, 1), rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_silu_is_within_rounding_of_its_formula(dtype):
    """h * (1 + tanh(h)), h = x / 2: x * sigmoid(x) to rounding on the scale of the values, in
    place, into a separate output or into an output overlapping the input."""
    x = np.linspace(-40, 40, 4001).astype(dtype)
    exact = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
    tolerance = 2e-6 if dtype == np.float32 else 1e-14
    got = numpy_activations.apply(x.copy(), "Silu", ())
    np.testing.assert_allclose(got, exact, rtol=tolerance, atol=tolerance)
    out = np.empty_like(x)
    numpy_activations.apply_into(x, out, "Silu", ())
    np.testing.assert_array_equal(out, got)
    halved = np.empty_like(x)
    numpy_activations.silu_of_half(x / dtype(2), halved, np.empty_like(x))
    np.testing.assert_array_equal(halved, got)
    numpy_activations.silu_of_half(x / dtype(2), halved, halved)  # the output as the scratch
    np.testing.assert_array_equal(halved, got)
    both = np.concatenate([x, x])
    numpy_activations.apply_into(both[:4001], both[:4001].reshape(1, -1)[0], "Silu", ())
    np.testing.assert_array_equal(both[:4001], got)
