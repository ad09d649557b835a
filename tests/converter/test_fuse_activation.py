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
    from converter.reference_session import run_onnxruntime
    from converter.verify import random_inputs
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


# HardSwish as exporters write it without the operator (PaddlePaddle's hard_swish, TensorFlow's
# x * relu6(x + 3) / 6, every model before opset 14).
HARD_SWISH_FORMS = {
    "clip, product, division": "s = Add (h, three)\n c = Clip (s, lo, hi)\n p = Mul (h, c)\n y = Div (p, six)",
    "shift first, product by a sixth": "s = Add (three, h)\n c = Clip (s, lo, hi)\n p = Mul (c, h)\n y = Mul (sixth, p)",
    "gate divided first": "s = Add (h, three)\n c = Clip (s, lo, hi)\n g = Div (c, six)\n y = Mul (h, g)",
    "hard sigmoid gate": "g = HardSigmoid <alpha: float = 0.16666667, beta: float = 0.5> (h)\n y = Mul (g, h)",
}


def _hard_swish_model(lines: str, opset: int = 12, extra_output: str = "") -> onnx.ModelProto:
    outputs = "float[1, 4, 8, 8] y" + (f", float[1, 4, 8, 8] {extra_output}" if extra_output else "")
    text = (f'<ir_version: 8, opset_import: ["" : {opset}]>\n'
            f"g (float[1, 3, 8, 8] x) => ({outputs}) {{\n h = Conv <pads: ints = [1, 1, 1, 1]> (x, w, b)\n {lines}\n}}")
    weights = {"w": rng().normal(size=(4, 3, 3, 3)).astype(np.float32), "b": rng(1).normal(size=4).astype(np.float32),
               "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32),
               "three": np.array(3.0, np.float32), "six": np.array(6.0, np.float32),
               "sixth": np.array(1 / 6, np.float32)}
    return make_model(text, **weights)


@pytest.mark.parametrize("opset", [12, 17])
@pytest.mark.parametrize("form", HARD_SWISH_FORMS)
def test_hard_swish_written_out_is_fused(form, opset, tmp_path):
    model = _hard_swish_model(HARD_SWISH_FORMS[form], opset)
    graph = ir.serde.deserialize_model(model)
    _, result = run_passes(graph, (infer_shapes, fuse_activation))
    assert result.changed == 1, result.declined
    [conv] = list(graph.graph)
    assert conv.attributes["fused_activation"].value == "HardSwish"
    # Written out again for ONNX Runtime: the operator from opset 14, x · HardSigmoid(x; 1/6, 1/2) before.
    rewritten, _ = apply(model, fuse_activation)
    assert ops(rewritten) == (["Conv", "HardSwish"] if opset >= 14 else ["Conv", "HardSigmoid", "Mul"])
    assert_same_outputs(model, rewritten)
    _assert_lite_matches(model, graph, tmp_path)


def test_hard_swish_written_out_declines_a_value_read_elsewhere():
    model = _hard_swish_model("s = Add (h, three)\n c = Clip (s, lo, hi)\n p = Mul (h, c)\n y = Div (p, six)", 12, "c")
    rewritten, [result] = apply(model, fuse_activation)
    assert result.changed == 0 and "Clip" in result.declined[0] and "also read elsewhere" in result.declined[0]
    assert_same_outputs(model, rewritten)


@pytest.mark.parametrize("lines", [
    "s = Add (h, three)\n c = Clip (s, lo, hi)\n p = Mul (h, c)\n y = Div (p, three)",
    "s = Add (h, six)\n c = Clip (s, lo, hi)\n p = Mul (h, c)\n y = Div (p, six)",
    "s = Add (h, three)\n c = Clip (s, lo, three)\n p = Mul (h, c)\n y = Div (p, six)",
    "g = HardSigmoid (h)\n y = Mul (g, h)",
], ids=["divided by 3", "shifted by 6", "clipped at 3", "hard sigmoid of other slope"])
def test_hard_swish_lookalikes_stay_as_they_are(lines):
    model = _hard_swish_model(lines)
    rewritten, [result] = apply(model, fuse_activation)
    assert result.changed == 0
    assert_same_outputs(model, rewritten)
