"""Groups of nodes computed from shapes that compute the same thing (a transformer's layers each
work out their reshape targets from their own Shape node) share one memo: a new input shape is
worked out once, and each layer's results are still its own computation's."""

from __future__ import annotations

import numpy as np

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_steps import _MemoGroup
from lite.format import GraphBuilder, load, to_bytes


def layered_model(last_pair: int):
    """Three layers, each ``Reshape(h, [N, -1, pair])`` with the target from ``Shape(h)``; the
    first two use pair 2, the third ``last_pair``."""
    b = GraphBuilder("layers", opset=14)
    h = b.input("x", np.float32, ["N", "L"])
    for layer, pair in enumerate((2, 2, last_pair)):
        h = b.node("Relu", [h]) if layer % 2 == 0 else b.node("Neg", [h])
        batch = b.node("Gather", [b.node("Shape", [h]), b.constant(f"zero{layer}", np.array(0, np.int64))], axis=0)
        target = b.node("Concat", [b.node("Unsqueeze", [batch, b.constant(f"axes{layer}", np.array([0], np.int64))]),
                                   b.constant(f"rest{layer}", np.array([-1], np.int64)),
                                   b.constant(f"pair{layer}", np.array([pair], np.int64))], axis=0)
        b.output(b.node("Reshape", [h, target], outputs=[f"y{layer}"]), np.float32, None)
    return load(to_bytes(b.build()))


def memos(engine: NumpyEngine) -> list:
    return [step.fn.memo for step in engine.plans[0].steps if isinstance(step.fn, _MemoGroup)]


def test_layers_computing_the_same_targets_share_one_memo():
    engine = NumpyEngine(layered_model(last_pair=4))
    groups = memos(engine)
    assert len(groups) == 3
    assert groups[0] is groups[1] and groups[2] is not groups[0]  # the third's constant differs
    for n, length in [(2, 8), (3, 4), (2, 8), (1, 12)]:
        x = np.random.default_rng(length).standard_normal((n, length)).astype(np.float32)
        outputs = engine.run({"x": x})
        first = np.maximum(x, 0)
        np.testing.assert_array_equal(outputs["y0"], first.reshape(n, -1, 2))
        np.testing.assert_array_equal(outputs["y1"], (-first).reshape(n, -1, 2))
        np.testing.assert_array_equal(outputs["y2"], np.maximum(-first, 0).reshape(n, -1, 4))
    assert len(groups[0]) == 3 and len(groups[2]) == 3  # one entry per input shape

