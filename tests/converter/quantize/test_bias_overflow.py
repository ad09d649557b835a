"""A bias that would overflow int32 at ``input_scale * weight_scale`` is kept exact by raising
the weight scale, and the conversion says so."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.quantize.scheme import bias_fitting_scale, quantize_bias
from lite.engines.numpy_engine import NumpyEngine
from lite.format import load


def test_a_bias_that_fits_keeps_the_weight_scale():
    scale = np.array([0.01, 0.03], np.float32)
    np.testing.assert_array_equal(bias_fitting_scale(np.array([0.5, -0.25]), 0.02, scale), scale)


def test_the_raised_scale_keeps_the_bias_exact():
    """Input range 1e-9: -11.5 / (4e-12 * 4e-4) is 7e15, far past int32; clipped it became -0.0016."""
    scale = bias_fitting_scale(np.array([-11.5, 1e-6]), 3.9e-12, np.array([4e-4, 4e-4], np.float32))
    assert scale[0] > 4e-4 and scale[1] == np.float32(4e-4)  # only the channel that overflows
    values, params = quantize_bias(np.array([-11.5, 1e-6], np.float32), 3.9e-12, scale)
    np.testing.assert_allclose(values * params.scale, [-11.5, 1e-6], rtol=1e-6)


def _class_head():
    """Conv with a class-prior bias of -11.5, then Sigmoid: scores near 1e-5."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((8, 8, 1, 1)) * 0.05).astype(np.float32), "w")
    b = numpy_helper.from_array(np.full(8, -11.5, np.float32), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["logit"], name="cls"),
             helper.make_node("Sigmoid", ["logit"], ["score"])]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 4, 4])],
                              [helper.make_tensor_value_info("score", TensorProto.FLOAT, [1, 8, 4, 4])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_near_dead_input_keeps_its_large_bias_and_the_conversion_warns(tmp_path):
    """On a detector's class head (input range 1e-9) every score became 0.5 instead of 1e-5."""
    rng = np.random.default_rng(1)
    samples = [(rng.random((1, 8, 4, 4)) * 1e-9).astype(np.float32) for _ in range(8)]
    report = converter.convert(_class_head(), tmp_path / "q.lite", quant="int8", calibration_data=samples)
    (warning,) = [w for w in report.quantization.warnings if "would overflow int32" in w]
    assert "Conv 'cls'" in warning and "8 of 8 channel(s)" in warning
    x = (rng.random((1, 8, 4, 4)) * 1e-9).astype(np.float32)
    got = NumpyEngine(load(tmp_path / "q.lite")).run({"x": x})["score"]
    np.testing.assert_allclose(got, 1 / (1 + np.exp(11.5)), rtol=1e-3)
