"""The numpy engine's RMSNorm fusion (lite.engines.numpy_norms): which chains become one step,
and that the step computes what the nodes compute, fused or run in turn."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_norms import FusedRMSNorm
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node

WIDTH = 16


def rms_norm_model(*, opset=18, weight=True, weight_first=True, swap=False, exponent=2.0, axis=-1, epsilon=1e-6,
                   epsilon_type=np.float32, root_output=False):
    """x (N, T, 16) -> Pow, ReduceMean, Add ε, Sqrt, Reciprocal, Mul x, [Mul γ] -> y, as torch.export writes
    T5's and Llama's RMSNorm."""
    b = GraphBuilder("rms", opset=opset)
    x = b.input("x", np.float32, ["N", "T", WIDTH])
    square = b.node("Pow", [x, b.constant("two", np.array(exponent, np.float32))])
    if opset >= 18:
        mean = b.node("ReduceMean", [square, b.constant("axes", np.array([axis], np.int64))], keepdims=1)
    else:
        mean = b.node("ReduceMean", [square], axes=[axis], keepdims=1)
    shifted = b.node("Add", [mean, b.constant("epsilon", np.array(epsilon, epsilon_type))])
    root = b.node("Sqrt", [shifted], outputs=["root"])
    inverse = b.node("Reciprocal", [root])
    y = b.node("Mul", [inverse, x] if swap else [x, inverse], outputs=["y" if not weight else "normalized"])
    if weight:
        gamma = b.constant("gamma", np.random.default_rng(3).standard_normal(WIDTH).astype(np.float32))
        y = b.node("Mul", [gamma, y] if weight_first else [y, gamma], outputs=["y"])
    b.output(y, np.float32, None)
    if root_output:
        b.output(root, np.float32, None)
    return load(to_bytes(b.build()))


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, FusedRMSNorm)]


@pytest.mark.parametrize("options", [{}, {"opset": 13}, {"weight": False}, {"weight_first": False}, {"swap": True},
                                     {"axis": 2}],
                         ids=["opset 18", "axes attribute", "no weight", "weight second", "reciprocal first",
                              "positive axis"])
def test_an_rms_norm_is_one_step(options):
    model = rms_norm_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    assert len(engine.plans[0].steps) == 1
    rng = np.random.default_rng(4)
    for shape in [(2, 5, WIDTH), (1, 7, WIDTH), (2, 5, WIDTH)]:  # a shape seen again: its plan
        x = rng.standard_normal(shape).astype(np.float32)
        got = engine.run({"x": x})["y"]
        expected = x / np.sqrt((x.astype(np.float64) ** 2).mean(axis=-1, keepdims=True) + 1e-6)
        if options.get("weight", True):
            expected = expected * engine.plans[0].constants[engine.plans[0].index_of["gamma"]]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        # The same numpy operations in the same order as the nodes' kernels: the same float32 values.
        np.testing.assert_array_equal(got, node_by_node(model, {"x": x})["y"])


@pytest.mark.parametrize("options", [{"exponent": 3.0}, {"root_output": True}, {"epsilon_type": np.float64}],
                         ids=["a cube", "the root returned", "a float64 epsilon"])
def test_chains_that_are_not_rms_norms_stay_as_they_are(options):
    model = rms_norm_model(**options)
    engine = NumpyEngine(model)
    assert not fused(engine)
    x = np.random.default_rng(5).standard_normal((2, 3, WIDTH)).astype(np.float32)
    expected = node_by_node(model, {"x": x})
    for name, value in engine.run({"x": x}).items():
        np.testing.assert_array_equal(value, expected[name])


def test_inputs_the_fused_step_does_not_handle_run_the_original_kernels():
    """A ReduceMean axis that is not the last for this input, and a float64 input: the nodes run in turn."""
    model = rms_norm_model(axis=2, weight=False)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    (step,) = engine.plans[0].steps
    x = np.random.default_rng(6).standard_normal((2, 3, WIDTH, 2)).astype(np.float32)
    np.testing.assert_array_equal(step.fn(x), node_by_node(model, {"x": x})["y"])
    x64 = np.random.default_rng(7).standard_normal((2, 3, WIDTH))
    np.testing.assert_array_equal(step.fn(x64), node_by_node(model, {"x": x64})["y"])
    # A strided input of a planned shape: the checks, then the nodes in turn.
    x = np.random.default_rng(8).standard_normal((2, 3, WIDTH)).astype(np.float32)
    np.testing.assert_array_equal(step.fn(x), node_by_node(model, {"x": x})["y"])
    strided = np.asfortranarray(x)
    np.testing.assert_array_equal(step.fn(strided), node_by_node(model, {"x": strided})["y"])


# -- residual Add + LayerNormalization ------------------------------------------------------------


def residual_model(*, sum_output=False, statistics=False):
    """a, b (N, T, 16) -> Add -> LayerNormalization(γ, β) -> y [, the sum] [, Mean, InvStdDev]."""
    rng = np.random.default_rng(13)
    b = GraphBuilder("residual", opset=17)
    first, second = b.input("a", np.float32, ["N", "T", WIDTH]), b.input("b", np.float32, ["N", "T", WIDTH])
    total = b.node("Add", [first, second], outputs=["sum"])
    gamma = b.constant("gamma", rng.standard_normal(WIDTH).astype(np.float32))
    beta = b.constant("beta", rng.standard_normal(WIDTH).astype(np.float32))
    outputs = ["y", "mean", "inv_std"] if statistics else ["y"]
    b.node("LayerNormalization", [total, gamma, beta], outputs=outputs, epsilon=1e-5)
    for name in outputs:
        b.output(name, np.float32, None)
    if sum_output:
        b.output("sum", np.float32, None)
    return load(to_bytes(b.build()))


def test_a_residual_add_and_its_layer_norm_are_one_step():
    model = residual_model()
    engine = NumpyEngine(model)
    assert [type(step.fn).__name__ for step in engine.plans[0].steps] == ["ResidualLayerNorm"]
    rng = np.random.default_rng(14)
    for shape in [(2, 5, WIDTH), (1, 3, WIDTH)]:
        inputs = {name: rng.standard_normal(shape).astype(np.float32) for name in "ab"}
        total = inputs["a"].astype(np.float64) + inputs["b"]
        normalized = (total - total.mean(-1, keepdims=True)) / np.sqrt(total.var(-1, keepdims=True) + 1e-5)
        constants, index_of = engine.plans[0].constants, engine.plans[0].index_of
        expected = normalized * constants[index_of["gamma"]] + constants[index_of["beta"]]
        got = engine.run(inputs)["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got, node_by_node(model, inputs)["y"])
    mixed = {"a": rng.standard_normal((1, 3, WIDTH)).astype(np.float32), "b": rng.standard_normal((1, 3, WIDTH))}
    (step,) = engine.plans[0].steps
    constants = [engine.plans[0].constants[i] for i in step.inputs[2:]]
    np.testing.assert_array_equal(step.fn(mixed["a"], mixed["b"], *constants, **step.keywords),
                                  node_by_node(model, mixed)["y"])


@pytest.mark.parametrize("options", [{"sum_output": True}, {"statistics": True}], ids=["sum returned", "statistics"])
def test_a_layer_norm_whose_sum_or_statistics_are_read_stays_as_it_is(options):
    model = residual_model(**options)
    engine = NumpyEngine(model)
    assert not [step for step in engine.plans[0].steps if type(step.fn).__name__ == "ResidualLayerNorm"]
    rng = np.random.default_rng(15)
    inputs = {name: rng.standard_normal((2, 3, WIDTH)).astype(np.float32) for name in "ab"}
    expected = node_by_node(model, inputs)
    got = engine.run(inputs)
    assert set(got) == set(expected)
    for name, value in got.items():
        np.testing.assert_array_equal(value, expected[name])


def layer_norm_model(*, axis=-1, statistics=False, bias=True, computed_scale=False):
    """x (N, T, 16) -> LayerNormalization(γ, [β]) -> y [, Mean, InvStdDev], as a pre-norm transformer's."""
    rng = np.random.default_rng(16)
    b = GraphBuilder("layer_norm", opset=17)
    x = b.input("x", np.float32, ["N", "T", WIDTH])
    if computed_scale:
        gamma = b.input("gamma", np.float32, [WIDTH])
    else:
        gamma = b.constant("gamma", rng.standard_normal(WIDTH).astype(np.float32))
    inputs = [x, gamma]
    if bias:
        inputs.append(b.constant("beta", rng.standard_normal(WIDTH).astype(np.float32)))
    outputs = ["y", "mean", "inv_std"] if statistics else ["y"]
    b.node("LayerNormalization", inputs, outputs=outputs, axis=axis, epsilon=1e-5)
    for name in outputs:
        b.output(name, np.float32, None)
    return load(to_bytes(b.build()))


def constant_layer_norms(engine):
    return [step for step in engine.plans[0].steps if type(step.fn).__name__ == "ConstantLayerNorm"]


@pytest.mark.parametrize("bias", [True, False], ids=["scale and bias", "scale alone"])
def test_a_layer_norm_by_constants_computes_what_the_kernel_computes(bias):
    model = layer_norm_model(bias=bias)
    engine = NumpyEngine(model)
    (step,) = constant_layer_norms(engine)
    rng = np.random.default_rng(17)
    for shape in [(2, 5, WIDTH), (1, 3, WIDTH), (2, 5, WIDTH), (1, 1, WIDTH)]:  # shapes seen again reuse their plan
        inputs = {"x": (rng.standard_normal(shape) * 3 + 1).astype(np.float32)}
        before = inputs["x"].copy()
        got = engine.run(inputs)["y"]
        np.testing.assert_array_equal(inputs["x"], before)  # the input is never written into
        np.testing.assert_array_equal(got, node_by_node(model, inputs)["y"])
        x = inputs["x"].astype(np.float64)
        normalized = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
        np.testing.assert_allclose(got, normalized * engine.plans[0].constants[engine.plans[0].index_of["gamma"]]
                                   + (engine.plans[0].constants[engine.plans[0].index_of["beta"]] if bias else 0),
                                   rtol=1e-4, atol=1e-5)
    # Inputs the step leaves to the kernel: strided, float64, other parameters than its constants.
    parameters = [engine.plans[0].constants[i] for i in step.inputs[1:]]
    strided = rng.standard_normal((WIDTH, 4, 2)).astype(np.float32).transpose(2, 1, 0)
    float64 = rng.standard_normal((2, 3, WIDTH))
    for x in (strided, float64):
        np.testing.assert_array_equal(step.fn(x, *parameters), node_by_node(model, {"x": x})["y"])
    other = [parameter.copy() for parameter in parameters]
    x = rng.standard_normal((2, 3, WIDTH)).astype(np.float32)
    np.testing.assert_array_equal(step.fn(x, *other), node_by_node(model, {"x": x})["y"])


@pytest.mark.parametrize("options", [{"axis": 1}, {"statistics": True}, {"computed_scale": True}],
                         ids=["not the last axis", "statistics", "a computed scale"])
def test_other_layer_norms_stay_with_the_kernel(options):
    model = layer_norm_model(**options)
    engine = NumpyEngine(model)
    assert not constant_layer_norms(engine)
    rng = np.random.default_rng(18)
    inputs = {"x": rng.standard_normal((2, 3, WIDTH)).astype(np.float32)}
    if options.get("computed_scale"):
        inputs["gamma"] = rng.standard_normal(WIDTH).astype(np.float32)
    expected = node_by_node(model, inputs)
    for name, value in engine.run(inputs).items():
        np.testing.assert_array_equal(value, expected[name])


def test_the_residual_step_normalizes_a_strided_sum_with_the_kernel():
    """Two channels-last operands give a sum that is not C-contiguous: the kernel normalizes it."""
    model = residual_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    rng = np.random.default_rng(19)
    a, b = (rng.standard_normal((WIDTH, 3, 2)).astype(np.float32).transpose(2, 1, 0) for _ in range(2))
    constants = [engine.plans[0].constants[i] for i in step.inputs[2:]]
    got = step.fn(a, b, *constants, **step.keywords)
    np.testing.assert_array_equal(got, node_by_node(model, {"a": a, "b": b})["y"])


# -- L2 normalization -----------------------------------------------------------------------------


def l2_normalize_model(*, expand=True, opset=18, norm_output=False, divide_other=False):
    """x (N, H, T, 8) -> x / Expand(Clip(ReduceL2(x, -1, keepdims), 1e-12)), as torch.export writes F.normalize."""
    b = GraphBuilder("normalize", opset=opset)
    x = b.input("x", np.float32, ["N", 2, "T", 8])
    other = b.input("other", np.float32, ["N", 2, "T", 8])
    if opset >= 18:
        norm = b.node("ReduceL2", [x, b.constant("axes", np.array([-1], np.int64))], keepdims=1, outputs=["norm"])
    else:
        norm = b.node("ReduceL2", [x], axes=[-1], keepdims=1, outputs=["norm"])
    clipped = b.node("Clip", [norm, b.constant("epsilon", np.array(1e-12, np.float32))])
    if expand:
        clipped = b.node("Expand", [clipped, b.node("Shape", [x])])
    b.output(b.node("Div", [other if divide_other else x, clipped], outputs=["y"]), np.float32, None)
    if norm_output:
        b.output(norm, np.float32, None)
    return load(to_bytes(b.build()))


def fused_normalizations(engine):
    return [step for step in engine.plans[0].steps if type(step.fn).__name__ == "FusedL2Normalize"]


@pytest.mark.parametrize("options", [{}, {"expand": False}, {"opset": 13}], ids=["expanded", "broadcast", "axes attribute"])
def test_an_l2_normalization_is_one_step(options):
    model = l2_normalize_model(**options)
    engine = NumpyEngine(model)
    assert len(fused_normalizations(engine)) == 1
    rng = np.random.default_rng(16)
    for shape in [(1, 2, 5, 8), (2, 2, 3, 8)]:
        x = rng.standard_normal(shape).astype(np.float32)
        x[0, 0, 0] = 0  # a zero row: divided by ε, as clamp_min makes it
        inputs = {"x": x, "other": x}
        got = engine.run(inputs)["y"]
        norm = np.sqrt((x.astype(np.float64) ** 2).sum(-1, keepdims=True))
        np.testing.assert_allclose(got, x / np.maximum(norm, 1e-12), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(got, node_by_node(model, inputs)["y"])
        transposed = np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)  # a strided view
        strided = {"x": transposed, "other": transposed}
        np.testing.assert_allclose(engine.run(strided)["y"], node_by_node(model, strided)["y"], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("options", [{"norm_output": True}, {"divide_other": True}], ids=["norm returned", "another tensor divided"])
def test_other_divisions_by_a_norm_stay_as_they_are(options):
    model = l2_normalize_model(**options)
    engine = NumpyEngine(model)
    assert not fused_normalizations(engine)
    rng = np.random.default_rng(17)
    inputs = {name: rng.standard_normal((1, 2, 3, 8)).astype(np.float32) for name in ("x", "other")}
    expected = node_by_node(model, inputs)
    for name, value in engine.run(inputs).items():
        np.testing.assert_array_equal(value, expected[name])
