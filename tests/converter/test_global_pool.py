"""global_pool: windows covering the whole input become global pools; every other window stays."""

from __future__ import annotations

import numpy as np
import pytest

from converter.passes import global_pool
from tests.converter.passtools import apply, assert_same_outputs, make_model

pytest.importorskip("onnxruntime")


def _pool(op: str, shape: str, attributes: str) -> str:
    out = ", ".join(f"d{i}" for i in range(shape.count(",") + 1))
    return f"""
    <ir_version: 8, opset_import: ["" : 17]>
    g (float{shape} x) => (float[{out}] y) {{
        y = {op} <{attributes}> (x)
    }}
    """


REWRITTEN = [
    # transformers' EfficientNet: a 640x640 ceil-mode window over a 2x2 map, counting pads.
    ("AveragePool", "[N, 3, 2, 2]", "kernel_shape = [640, 640], strides = [640, 640], ceil_mode = 1, "
                                    "count_include_pad = 1"),
    ("AveragePool", "[1, 3, 7, 7]", "kernel_shape = [7, 7]"),
    ("AveragePool", "[1, 3, 5, 6]", "kernel_shape = [7, 8], pads = [1, 1, 1, 1]"),
    ("MaxPool", "[2, 4, 5, 6]", "kernel_shape = [7, 8], pads = [1, 1, 1, 1]"),
    ("MaxPool", "[2, 4, 9]", "kernel_shape = [9], strides = [2]"),
]

DECLINED = [
    ("AveragePool", "[1, 3, 8, 8]", "kernel_shape = [7, 7]", "takes 2 positions"),
    ("AveragePool", "[1, 3, H, W]", "kernel_shape = [7, 7]", "not all static"),
    ("AveragePool", "[1, 3, 5, 6]", "kernel_shape = [7, 8], pads = [1, 1, 1, 1], count_include_pad = 1",
     "counts pads"),
    ("MaxPool", "[1, 3, 7, 7]", "kernel_shape = [4, 4], dilations = [2, 2]", "dilated"),
    ("AveragePool", "[1, 3, 7, 7]", "kernel_shape = [7, 7], auto_pad = \"SAME_UPPER\"", "auto_pad"),
    ("AveragePool", "[1, 3, 7, 7]", "kernel_shape = [7, 5], strides = [1, 10]", "does not reach"),
]


@pytest.mark.parametrize("op, shape, attributes", REWRITTEN)
def test_a_window_over_the_whole_input_becomes_a_global_pool(op, shape, attributes):
    model = make_model(_pool(op, shape, attributes))
    rewritten, [result] = apply(model, global_pool)
    assert result.changed == 1, result.declined
    assert [node.op_type for node in rewritten.graph.node] == [f"Global{op}"]
    assert_same_outputs(model, rewritten)


@pytest.mark.parametrize("op, shape, attributes, reason", DECLINED)
def test_other_windows_stay_and_say_why(op, shape, attributes, reason):
    model = make_model(_pool(op, shape, attributes))
    rewritten, [result] = apply(model, global_pool)
    assert result.changed == 0
    assert [node.op_type for node in rewritten.graph.node] == [op]
    assert any(reason in line for line in result.declined), result.declined


def test_the_int8_efficientnet_head_runs_on_onnxruntime(tmp_path):
    """The same head quantized: ONNX Runtime's fused QLinearAveragePool returned zeros for the
    ceil-mode window; as a global pool the int8 model matches float."""
    from onnx import helper, numpy_helper

    import converter
    import lite

    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["y"], kernel_shape=[640, 640], strides=[640, 640], ceil_mode=1)]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", 1, ["N", 3, 4, 4])],
                              [helper.make_tensor_value_info("y", 1, None)], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calibration = [rng.standard_normal((3, 4, 4)).astype(np.float32) for _ in range(8)]
    converter.convert(model, tmp_path / "q.lite", quant="int8", calibration_data=calibration)
    x = calibration[0][None]
    expected = lite.Model.load(tmp_path / "q.lite", device="numpy").predict({"x": x})["y"]
    actual = lite.Model.load(tmp_path / "q.lite", device="cpu").predict({"x": x})["y"]
    assert np.abs(expected).max() > 0.1
    np.testing.assert_allclose(actual, expected, atol=0.05 * np.abs(expected).max())
