"""The numpy engine's group normalization fusions (lite.engines.group_norm_fusion)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node, op_types


def group_norm_model(*, groups=4, target=None, relu=True, planes_output=False, shape_output=False, mul=True,
                     add=True, gamma_shape=(8, 1, 1)):
    """x -> Reshape(0, G, -1) -> InstanceNormalization -> Reshape(Shape(x)) [-> Mul] [-> Add] [-> Relu] -> y."""
    rng = np.random.default_rng(31)
    b = GraphBuilder("group_norm", opset=13)
    x = b.input("x", np.float32, ["N", 8, 5, 6])
    shape = b.constant("target", np.array(target or [0, groups, -1], np.int64))
    scale = b.constant("s", rng.standard_normal(groups).astype(np.float32))
    bias = b.constant("b", rng.standard_normal(groups).astype(np.float32))
    gamma = b.constant("gamma", rng.standard_normal(gamma_shape).astype(np.float32))
    beta = b.constant("beta", rng.standard_normal((8, 1, 1)).astype(np.float32))
    planes = b.node("Reshape", [x, shape], outputs=["planes"])
    normalized = b.node("InstanceNormalization", [planes, scale, bias], epsilon=1e-3)
    x_shape = b.node("Shape", [x], outputs=["x_shape"])
    after = ([("Mul", gamma)] if mul else []) + ([("Add", beta)] if add else [])
    y = b.node("Reshape", [normalized, x_shape], outputs=["y"] if not after and not relu else 1)
    for index, (op_type, constant) in enumerate(after):
        y = b.node(op_type, [y, constant], outputs=["y"] if index == len(after) - 1 and not relu else 1)
    if relu:
        y = b.node("Relu", [y], outputs=["y"])
    b.output(y, np.float32, None)
    if planes_output:
        b.output(planes, np.float32, None)
    if shape_output:
        b.output(x_shape, np.int64, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("options", [{}, {"relu": False}, {"groups": 8}, {"shape_output": True}, {"mul": False},
                                     {"add": False}, {"mul": False, "relu": False}],
                         ids=["with relu", "no relu", "one channel per group", "shape read elsewhere", "no Mul (γ = 1)",
                              "no Add (β = 0)", "only the Add"])
def test_a_group_normalization_is_one_step(options):
    engine = NumpyEngine(group_norm_model(**options))
    expected_types = ["Shape", "InstanceNormalization"] if options.get("shape_output") else ["InstanceNormalization"]
    assert op_types(engine) == expected_types
    rng = np.random.default_rng(32)
    for batch in (1, 3):
        feeds = {"x": (3 * rng.standard_normal((batch, 8, 5, 6)) + 1).astype(np.float32)}
        got, expected = engine.run(feeds), node_by_node(engine, feeds)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [{"target": [1, 4, 60]}, {"planes_output": True},
                                     {"mul": False, "add": False}, {"add": False, "gamma_shape": (1, 5, 6)}],
                         ids=["other reshape", "planes read elsewhere", "no Mul and no Add", "a Mul not per channel"])
def test_blocks_that_are_not_a_group_normalization_stay_as_they_are(options):
    engine = NumpyEngine(group_norm_model(**options))
    assert "Reshape" in op_types(engine)
    feeds = {"x": np.random.default_rng(33).standard_normal((1, 8, 5, 6)).astype(np.float32)}
    got, expected = engine.run(feeds), node_by_node(engine, feeds)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)


def test_inputs_the_fused_step_does_not_handle_run_the_original_kernels():
    engine = NumpyEngine(group_norm_model())
    (step,) = engine.plans[0].steps
    x = np.random.default_rng(34).standard_normal((2, 8, 5, 6))  # float64: not the constants' type
    expected = node_by_node(engine, {"x": x})["y"]
    got = step.fn(x)
    assert got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-6)


# -- one-group GroupNorm --------------------------------------------------------------------------

CHANNELS = 6


def one_group_model(*, affine=True, groups=1, shape_output=False, scale_value=1.0):
    """x (N, 6, H, W) -> Reshape(0, G, -1) -> InstanceNormalization -> Reshape(Shape(x)) -> Mul γ -> Add β,
    as torch.export writes GroupNorm."""
    rng = np.random.default_rng(8)
    b = GraphBuilder("group_norm", opset=18)
    x = b.input("x", np.float32, ["N", CHANNELS, "H", "W"])
    split = b.node("Reshape", [x, b.constant("groups", np.array([0, groups, -1], np.int64))])
    normalized = b.node("InstanceNormalization", [split, b.constant("s", np.full(groups, scale_value, np.float32)),
                                                  b.constant("b", np.full(groups, 0.25, np.float32))], epsilon=1e-5)
    shape = b.node("Shape", [x], outputs=["shape"])
    y = b.node("Reshape", [normalized, shape], outputs=["y" if not affine else "merged"])
    if affine:
        gamma = b.constant("gamma", rng.standard_normal((CHANNELS, 1, 1)).astype(np.float32))
        beta = b.constant("beta", rng.standard_normal((CHANNELS, 1, 1)).astype(np.float32))
        y = b.node("Add", [beta, b.node("Mul", [y, gamma])], outputs=["y"])
    b.output(y, np.float32, None)
    if shape_output:
        b.output(shape, np.int64, None)
    return load(to_bytes(b.build()))


def one_group_reference(engine, x, affine=True, scale_value=1.0):
    x = x.astype(np.float64)
    mean = x.mean(axis=(1, 2, 3), keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=(1, 2, 3), keepdims=True)
    y = (x - mean) / np.sqrt(variance + 1e-5) * scale_value + 0.25
    if affine:
        constants, index_of = engine.plans[0].constants, engine.plans[0].index_of
        y = y * constants[index_of["gamma"]] + constants[index_of["beta"]]
    return y


def fused_group_norms(engine):
    return [step for step in engine.plans[0].steps if type(step.fn).__name__ == "FusedGroupNorm"]


@pytest.mark.parametrize("options", [{}, {"affine": False}, {"scale_value": 3.0}], ids=["affine", "plain", "scaled"])
def test_a_one_group_group_norm_is_one_step_in_either_layout(options):
    model = one_group_model(**options)
    engine = NumpyEngine(model)
    assert len(fused_group_norms(engine)) == 1
    (step,) = engine.plans[0].steps
    rng = np.random.default_rng(9)
    for shape in [(2, CHANNELS, 4, 5), (1, CHANNELS, 3, 3)]:
        x = (3 * rng.standard_normal(shape) + 1).astype(np.float32)
        expected = one_group_reference(engine, x, options.get("affine", True), options.get("scale_value", 1.0))
        np.testing.assert_allclose(engine.run({"x": x})["y"], expected, rtol=2e-5, atol=2e-5)
        np.testing.assert_allclose(engine.run({"x": x})["y"], node_by_node(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)
        channels_last = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
        got = step.fn(channels_last)
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("options", [{"groups": 2}, {"shape_output": True}], ids=["two groups", "shape returned"])
def test_group_norms_the_fusion_does_not_cover_stay_as_they_are(options):
    model = one_group_model(**options)
    engine = NumpyEngine(model)
    assert not fused_group_norms(engine)
    x = np.random.default_rng(10).standard_normal((2, CHANNELS, 4, 4)).astype(np.float32)
    expected = node_by_node(model, {"x": x})
    for name, value in engine.run({"x": x}).items():
        # Two groups with per-channel γ and β are the G-group fusion's (its rounding differs).
        np.testing.assert_allclose(value, expected[name], rtol=1e-5, atol=1e-5)


def test_inputs_the_fused_group_norm_does_not_handle_run_the_original_kernels():
    model = one_group_model()
    engine = NumpyEngine(model)
    (step,) = engine.plans[0].steps
    x = np.random.default_rng(11).standard_normal((2, CHANNELS, 4, 4))  # float64: not the model's type
    np.testing.assert_array_equal(step.fn(x), node_by_node(model, {"x": x})["y"])
    strided = np.random.default_rng(12).standard_normal((2, CHANNELS, 4, 8)).astype(np.float32)[..., ::2]
    np.testing.assert_array_equal(step.fn(strided), node_by_node(model, {"x": strided})["y"])
