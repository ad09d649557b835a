"""The per-call path of lite.Model on ONNX Runtime's CPU provider: numpy feeds go straight to the session."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.format import GraphBuilder, to_bytes

ort = pytest.importorskip("onnxruntime", reason="the ONNX Runtime engine needs onnxruntime (the ort extra)")
pytest.importorskip("onnx", reason="lowering to ONNX needs onnx (the ort extra)")


def _two_inputs() -> bytes:
    b = GraphBuilder("two_inputs", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    y = b.input("y", np.float32, ["M", 4])
    b.output(b.node("Concat", [x, y], outputs=["z"], axis=0), np.float32, ["K", 4])
    return to_bytes(b.build())


def _shared_dimension() -> bytes:
    b = GraphBuilder("shared_dimension", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    y = b.input("y", np.float32, ["N", 4])
    b.output(b.node("Add", [x, y], outputs=["z"]), np.float32, ["N", 4])
    return to_bytes(b.build())


def test_a_whole_graph_session_runs_directly():
    model = lite.Model.load(_two_inputs(), device="cpu", cache_dir=None)
    assert model.engine.direct is model.engine.segments[0].runner
    x, y = np.ones((2, 4), np.float32), np.zeros((3, 4), np.float32)
    out = model.predict({"x": x, "y": y})
    assert list(out) == ["z"]
    np.testing.assert_array_equal(out["z"], np.concatenate([x, y]))
    # A feed that is not a numpy array (a list) takes the general path, with the same result.
    np.testing.assert_array_equal(model.engine.run({"x": x.tolist(), "y": y})["z"], out["z"])


def test_extra_feeds_are_ignored_as_before():
    model = lite.Model.load(_two_inputs(), device="cpu", cache_dir=None)
    x = np.ones((1, 4), np.float32)
    assert model.engine.run({"x": x, "y": x, "unused": x})["z"].shape == (2, 4)


def test_a_session_error_is_a_kernel_error():
    model = lite.Model.load(_two_inputs(), device="cpu", cache_dir=None)
    with pytest.raises(lite.KernelError, match="ONNX Runtime failed"):
        model.engine.run({"x": np.ones((1, 3), np.float32), "y": np.ones((1, 4), np.float32)})


@pytest.mark.parametrize("feeds, message", [
    ({"x": np.ones((2, 4), np.float64), "y": np.ones((2, 4), np.float32)}, "dtype float64"),
    ({"x": np.ones((2, 5), np.float32), "y": np.ones((2, 4), np.float32)}, "size 5 on axis 1"),
    ({"x": np.ones((2, 4, 1), np.float32), "y": np.ones((2, 4), np.float32)}, "rank 3"),
    ({"x": np.ones((2, 4), np.float32)}, "missing 'y'"),
    ({"x": np.ones((2, 4), np.float32), "z": np.ones((2, 4), np.float32)}, "unknown 'z'"),
    ({"x": np.ones((2, 4), np.float32), "y": np.ones((3, 4), np.float32)}, "dimension 'N' is 3"),
])
def test_the_quick_input_check_refuses_what_the_full_check_refuses(feeds, message):
    model = lite.Model.load(_shared_dimension(), device="cpu", cache_dir=None)
    with pytest.raises(lite.InvalidInputError, match=message):
        model.predict(feeds)


def test_partitioned_graphs_run_segment_by_segment():
    b = GraphBuilder("custom", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    y = b.node("Twice", [b.node("Relu", [x])], domain="test.custom")
    b.output(b.node("Neg", [y], outputs=["z"]), np.float32, ["N", 4])
    ops = lite.CustomOps()

    @ops.python("Twice", domain="test.custom")
    def twice(a):
        return a * 2

    model = lite.Model.load(to_bytes(b.build()), device="cpu", custom_ops=ops, cache_dir=None)
    assert model.engine.direct is None
    np.testing.assert_array_equal(model(np.full((1, 4), -1, np.float32)), np.zeros((1, 4), np.float32))
