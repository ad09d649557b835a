"""fuse_activation: attributes on the layer; numerics through the ONNX export (ORT) and lite.Model."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from passtools import apply, assert_same_outputs, make_model, ops, rng

from converter.lower import lower_model
from converter.passes import fuse_activation, infer_shapes, run_passes

ACTIVATIONS = {
    "Relu": ("y = Relu (h)", []),
    "Clip": ("y = Clip (h, lo, hi)", [0.0, 6.0]),
    "LeakyRelu": ("y = LeakyRelu <alpha: float = 0.2> (h)", [0.2]),
    "Sigmoid": ("y = Sigmoid (h)", []),
    "Tanh": ("y = Tanh (h)", []),
    "HardSigmoid": ("y = HardSigmoid <alpha: float = 0.25, beta: float = 0.4> (h)", [0.25, 0.4]),
    "HardSwish": ("y = HardSwish (h)", []),
    "Silu": ("s = Sigmoid (h)\n y = Mul (h, s)", []),
}


def _conv_model(activation_line: str, layer: str = "conv") -> onnx.ModelProto:
    if layer == "conv":
        signature, body = "(float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y)", "h = Conv <pads: ints = [1, 1, 1, 1]> (x, w, b)"
        w = rng().normal(size=(4, 3, 3, 3))
    elif layer == "gemm":
        signature, body = "(float[2, 3] x) => (float[2, 4] y)", "h = Gemm <transB: int = 1> (x, w, b)"
        w = rng().normal(size=(4, 3))
    else:
        signature, body = "(float[2, 3] x) => (float[2, 4] y)", "h = MatMul (x, w)"
        w = rng().normal(size=(3, 4))
    weights = {"w": w.astype(np.float32), "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)}
    if layer != "matmul":
        weights["b"] = rng(1).normal(size=4).astype(np.float32)
    text = f'<ir_version: 8, opset_import: ["" : 17]>\ng {signature} {{\n {body}\n {activation_line}\n}}'
    return make_model(text, **weights)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_after_conv_is_fused(name, tmp_path):
    line, params = ACTIVATIONS[name]
    model = _conv_model(line)
    graph = ir.serde.deserialize_model(model)
    _, result = run_passes(graph, (infer_shapes, fuse_activation))
    assert result.changed == 1
    [conv] = list(graph.graph)
    assert conv.attributes["fused_activation"].value == name
    if params:
        np.testing.assert_allclose(conv.attributes["fused_activation_params"].value, params, rtol=1e-6)
    else:
        assert "fused_activation_params" not in conv.attributes
    # ONNX export expands the activation again; ORT agrees with the original.
    rewritten, _ = apply(model, fuse_activation)
    assert "Conv" in ops(rewritten)
    assert_same_outputs(model, rewritten)
    # The lite runtime applies the fused activation itself.
    _assert_lite_matches(model, graph, tmp_path)


def _assert_lite_matches(model, graph, tmp_path):
    lite = pytest.importorskip("lite")
    from converter.verify import random_inputs, run_onnxruntime
    from lite.format import save

    path = tmp_path / "fused.lite"
    save(lower_model(graph), path)
    feeds = random_inputs(model, seed=3)
    expected = run_onnxruntime(model, feeds)["y"]
    got = lite.Model.load(path, device="numpy").predict(feeds)["y"]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layer", ["gemm", "matmul"])
def test_relu_after_dense_layers_is_fused(layer):
    model = _conv_model("y = Relu (h)", layer)
    rewritten, [result] = apply(model, fuse_activation)
    assert result.changed == 1
    assert_same_outputs(model, rewritten)


def test_declines_when_layer_output_is_read_elsewhere():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y, float[1, 4, 8, 8] z) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = Relu (h)
            z = Neg (h)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
    )
    _, [result] = apply(model, fuse_activation)
    assert result.changed == 0 and "also read by 1 other node" in result.declined[0]


def test_declines_clip_with_runtime_bounds():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x, float hi) => (float[1, 4, 8, 8] y) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = Clip (h, lo, hi)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
        lo=np.array(0.0, np.float32),
    )
    _, [result] = apply(model, fuse_activation)
    assert result.changed == 0 and "not a constant" in result.declined[0]


def test_declines_when_layer_output_is_a_graph_output():
    model = make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[1, 3, 8, 8] x) => (float[1, 4, 8, 8] y, float[1, 4, 8, 8] h) {
            h = Conv <pads: ints = [1, 1, 1, 1]> (x, w)
            y = Relu (h)
        }""",
        w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32),
    )
    _, [result] = apply(model, fuse_activation)
    assert result.changed == 0 and "graph output" in result.declined[0]
