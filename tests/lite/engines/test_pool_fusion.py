"""The numpy engine's constant Pad folded into the MaxPool after it (lite.engines.numpy_pool_fusion):
one step, the nodes' values exactly, without the padded tensor."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_pool_fusion import PaddedMaxPool
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node


def pad_pool_model(pads, *, value=None, kernel=(3, 3), strides=(2, 2), ceil_mode=0, pool_pads=(0, 0, 0, 0),
                   padded_output=False, mode="constant", dtype=np.float32):
    """x (N, 4, H, W) -> Pad(pads, value) -> MaxPool, as BiT's and HGNetV2's stems write it."""
    b = GraphBuilder("pad_pool", opset=18)
    x = b.input("x", dtype, ["N", 4, "H", "W"])
    inputs = [x, b.constant("pads", np.array(pads, np.int64))]
    if value is not None:
        inputs.append(b.constant("value", np.array(value, dtype)))
    padded = b.node("Pad", inputs, outputs=["padded"], mode=mode)
    b.output(b.node("MaxPool", [padded], outputs=["y"], kernel_shape=list(kernel), strides=list(strides),
                    pads=list(pool_pads), ceil_mode=ceil_mode), dtype, None)
    if padded_output:
        b.output("padded", dtype, None)
    return load(to_bytes(b.build()))


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, PaddedMaxPool)]


@pytest.mark.parametrize("pads, options", [
    ((0, 0, 1, 1, 0, 0, 1, 1), {}),  # BiT: 0 on every side, 3x3 stride 2
    ((0, 0, 1, 1, 0, 0, 1, 1), {"value": 0.5}),
    ((0, 0, 0, 0, 0, 0, 1, 1), {"kernel": (2, 2), "strides": (1, 1), "ceil_mode": 1}),  # HGNetV2
    ((0, 0, 2, 0, 0, 0, 1, 3), {"kernel": (3, 2), "strides": (2, 3), "ceil_mode": 1}),
    ((0, 0, 1, 1, 0, 0, 1, 1), {"value": -np.inf, "dtype": np.float64}),
], ids=["bit", "a value of 0.5", "hgnetv2", "uneven, ceil mode", "-inf, float64"])
def test_the_pad_joins_the_pool(pads, options):
    model = pad_pool_model(pads, **options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1 and len(engine.plans[0].steps) == 1
    rng = np.random.default_rng(4)
    for shape in [(1, 4, 9, 10), (2, 4, 8, 8), (1, 4, 3, 4), (1, 4, 1, 2)]:
        x = rng.standard_normal(shape).astype(options.get("dtype", np.float32))
        x.reshape(-1)[::7] = np.nan
        np.testing.assert_array_equal(engine.run({"x": x})["y"], node_by_node(model, {"x": x})["y"])
    # An input the path does not take (float16) runs the nodes.
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float16)
    np.testing.assert_array_equal(fused(engine)[0].fn(x), node_by_node(model, {"x": x})["y"])


def test_a_ceil_mode_window_starting_in_the_end_pads_runs_the_nodes():
    """With ceil_mode the last window must start before the (pool's own) end padding: over the
    padded tensor a window may start in what was the Pad's end pads, a window the folded pads
    would drop, so that shape runs the two nodes."""
    model = pad_pool_model((0, 0, 0, 0, 0, 0, 2, 2), kernel=(2, 2), strides=(2, 2), ceil_mode=1)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    x = np.random.default_rng(2).standard_normal((1, 4, 5, 5)).astype(np.float32) - 3
    y = engine.run({"x": x})["y"]
    np.testing.assert_array_equal(y, node_by_node(model, {"x": x})["y"])
    assert y.shape == (1, 4, 4, 4)


@pytest.mark.parametrize("options", [
    {"pool_pads": (1, 1, 1, 1)},  # the pool's own -inf padding outside the Pad's
    {"mode": "reflect"},
    {"padded_output": True},  # the padded tensor is read elsewhere
], ids=["pool pads", "reflect", "padded tensor returned"])
def test_other_pairs_stay_as_they_are(options):
    model = pad_pool_model((0, 0, 1, 1, 0, 0, 1, 1), **options)
    engine = NumpyEngine(model)
    assert not fused(engine)
    x = np.random.default_rng(5).standard_normal((1, 4, 6, 7)).astype(np.float32)
    np.testing.assert_array_equal(engine.run({"x": x})["y"], node_by_node(model, {"x": x})["y"])


def test_pads_of_the_batch_or_channel_axes_stay_as_they_are():
    assert not fused(NumpyEngine(pad_pool_model((0, 1, 1, 1, 0, 0, 1, 1))))
