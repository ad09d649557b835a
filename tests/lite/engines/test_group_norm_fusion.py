"""The numpy engine's group normalization fusion (lite.engines.group_norm_fusion)."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node, op_types


def group_norm_model(*, groups=4, target=None, relu=True, planes_output=False, shape_output=False):
    """x -> Reshape(0, G, -1) -> InstanceNormalization -> Reshape(Shape(x)) -> Mul -> Add [-> Relu] -> y."""
    rng = np.random.default_rng(31)
    b = GraphBuilder("group_norm", opset=13)
    x = b.input("x", np.float32, ["N", 8, 5, 6])
    shape = b.constant("target", np.array(target or [0, groups, -1], np.int64))
    scale = b.constant("s", rng.standard_normal(groups).astype(np.float32))
    bias = b.constant("b", rng.standard_normal(groups).astype(np.float32))
    gamma = b.constant("gamma", rng.standard_normal((8, 1, 1)).astype(np.float32))
    beta = b.constant("beta", rng.standard_normal((8, 1, 1)).astype(np.float32))
    planes = b.node("Reshape", [x, shape], outputs=["planes"])
    normalized = b.node("InstanceNormalization", [planes, scale, bias], epsilon=1e-3)
    x_shape = b.node("Shape", [x], outputs=["x_shape"])
    y = b.node("Add", [b.node("Mul", [b.node("Reshape", [normalized, x_shape]), gamma]), beta],
               outputs=["y"] if not relu else 1)
    if relu:
        y = b.node("Relu", [y], outputs=["y"])
    b.output(y, np.float32, None)
    if planes_output:
        b.output(planes, np.float32, None)
    if shape_output:
        b.output(x_shape, np.int64, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("options", [{}, {"relu": False}, {"groups": 8}, {"shape_output": True}],
                         ids=["with relu", "no relu", "one channel per group", "shape read elsewhere"])
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


@pytest.mark.parametrize("options", [{"target": [1, 4, 60]}, {"planes_output": True}],
                         ids=["other reshape", "planes read elsewhere"])
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
