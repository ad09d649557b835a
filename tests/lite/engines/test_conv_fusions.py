"""The numpy engine's convolution fusions (lite.engines.conv_fusions): summed convolutions of one
input as one convolution."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.errors import KernelError
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node, op_types

# -- summed convolutions ---------------------------------------------------------------------------


def repvgg_model(*, stride=1, identity=True, small_pads=0, output_branch=False, second_input=False, relu=True):
    """x -> Conv 3x3 + Conv 1x1 [+ x * s + t] -> Relu -> y (RepVGG's training-form block)."""
    rng = np.random.default_rng(21)
    b = GraphBuilder("repvgg", opset=13)
    x = b.input("x", np.float32, ["N", 8, 7, 7])
    other = b.input("z", np.float32, ["N", 8, 7, 7]) if second_input else x
    w3 = b.constant("w3", rng.standard_normal((8, 8, 3, 3)).astype(np.float32))
    b3 = b.constant("b3", rng.standard_normal(8).astype(np.float32))
    w1 = b.constant("w1", rng.standard_normal((8, 8, 1, 1)).astype(np.float32))
    b1 = b.constant("b1", rng.standard_normal(8).astype(np.float32))
    large = b.node("Conv", [x, w3, b3], pads=[1] * 4, strides=[stride] * 2)
    small = b.node("Conv", [other, w1, b1], pads=[small_pads] * 4, strides=[stride] * 2, outputs=["small"])
    total = b.node("Add", [large, small])
    if identity:
        scale = b.constant("s", rng.standard_normal((8, 1, 1)).astype(np.float32))
        shift = b.constant("t", rng.standard_normal((1, 8, 1, 1)).astype(np.float32))
        total = b.node("Add", [total, b.node("Add", [b.node("Mul", [scale, x]), shift])])
    y = b.node("Relu", [total], outputs=["y"]) if relu else b.node("Identity", [total], outputs=["y"])
    b.output(y, np.float32, None)
    if output_branch:
        b.output(small, np.float32, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("options", [{}, {"identity": False}, {"stride": 2, "identity": False}, {"relu": False}],
                         ids=["with identity", "two convolutions", "stride 2", "no relu"])
def test_summed_convolutions_of_one_input_are_one_convolution(options):
    engine = NumpyEngine(repvgg_model(**options))
    relu = options.get("relu", True)
    assert op_types(engine) == (["Conv"] if relu else ["Conv", "Identity"])
    assert engine.plans[0].steps[0].activation == (("Relu", ()) if relu else None)
    rng = np.random.default_rng(22)
    for batch in (1, 2):
        feeds = {"x": rng.standard_normal((batch, 8, 7, 7)).astype(np.float32)}
        np.testing.assert_allclose(engine.run(feeds)["y"], node_by_node(engine, feeds)["y"],
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("options", [{"output_branch": True}, {"second_input": True}, {"small_pads": 1}],
                         ids=["branch read elsewhere", "other inputs", "windows not nested"])
def test_convolutions_that_cannot_be_merged_stay_as_they_are(options):
    engine = NumpyEngine(repvgg_model(identity=False, **options))
    assert op_types(engine).count("Conv") == 2
    rng = np.random.default_rng(23)
    feeds = {"x": rng.standard_normal((2, 8, 7, 7)).astype(np.float32)}
    if options.get("second_input"):
        feeds["z"] = rng.standard_normal((2, 8, 7, 7)).astype(np.float32)
    if options.get("small_pads"):  # 7x7 and 9x9 outputs: the Add fails as it did unfused
        with pytest.raises(KernelError):
            engine.run(feeds)
        return
    got, expected = engine.run(feeds), node_by_node(engine, feeds)
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5)
