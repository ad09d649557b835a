"""int8 on graphs that ONNX Runtime's transformer optimizer rewrote (com.microsoft fused ops).

ONNX's shape inference does not know those ops, so without :mod:`converter.passes.contrib_types`
the MatMuls after them read values of no known type and every quantizer declined them; a
quantization that quantizes nothing says so.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite
from converter.importer import import_onnx
from converter.passes import PassContext
from converter.passes.shape_inference import infer_shapes

pytest.importorskip("onnxruntime")

HIDDEN = 64


def _fused_block(custom_domain: str = "com.microsoft"):
    """x → MatMul → SkipLayerNormalization(+x) → MatMul → FastGelu → MatMul → y, as ONNX Runtime's
    optimizer writes a transformer layer's feed-forward part; with another ``custom_domain`` the
    fused ops belong to a domain nobody knows."""
    rng = np.random.default_rng(0)

    def weight(name, *shape, scale=None):
        values = rng.standard_normal(shape) * (scale if scale is not None else 1 / np.sqrt(shape[0]))
        return numpy_helper.from_array(values.astype(np.float32), name)

    initializers = [weight("w0", HIDDEN, HIDDEN), weight("w1", HIDDEN, HIDDEN), weight("w2", HIDDEN, HIDDEN),
                    weight("gamma", HIDDEN, scale=0.1), weight("beta", HIDDEN, scale=0.1),
                    weight("bias", HIDDEN, scale=0.1)]
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["h0"], name="fc0"),
        helper.make_node("SkipLayerNormalization", ["h0", "x", "gamma", "beta"], ["n0"], name="skip_ln",
                         domain=custom_domain, epsilon=1e-5),
        helper.make_node("MatMul", ["n0", "w1"], ["h1"], name="fc1"),
        helper.make_node("FastGelu", ["h1", "bias"], ["g1"], name="gelu", domain=custom_domain),
        helper.make_node("MatMul", ["g1", "w2"], ["y"], name="fc2"),
    ]
    graph = helper.make_graph(nodes, "fused", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", HIDDEN])], initializers)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(custom_domain, 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def _cosine(a, b):
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


def _samples(count=4):
    rng = np.random.default_rng(1)
    return [rng.standard_normal((8, HIDDEN)).astype(np.float32) for _ in range(count)]


def test_values_after_contrib_ops_get_types_and_shapes():
    model = import_onnx(_fused_block()).model
    result = infer_shapes(model, PassContext())
    values = {value.name: value for node in model.graph for value in node.outputs}
    for name in ("n0", "h1", "g1", "y"):
        assert values[name].dtype is not None and values[name].dtype.name == "FLOAT", name
    assert [str(d) for d in values["g1"].shape] == ["N", str(HIDDEN)]
    assert result.counts["values_typed_after_contrib_ops"] == 3  # y is declared as a graph output


def test_ops_of_an_unknown_domain_stay_untyped():
    model = import_onnx(_fused_block("example.custom")).model
    infer_shapes(model, PassContext())
    values = {value.name: value for node in model.graph for value in node.outputs}
    assert values["h0"].dtype is not None
    assert all(values[name].dtype is None for name in ("n0", "h1", "g1"))


def test_int8_dynamic_quantizes_the_matmuls_after_fused_ops(tmp_path):
    float_path, int8_path = tmp_path / "float.lite", tmp_path / "int8.lite"
    converter.convert(_fused_block(), float_path)
    report = converter.convert(_fused_block(), int8_path, quant="int8-dynamic")
    assert sorted(report.quantization.quantized_nodes) == ["fc0", "fc1", "fc2"]
    assert not report.quantization.warnings
    assert int8_path.stat().st_size < 0.5 * float_path.stat().st_size
    x = _samples(1)[0]
    expected = lite.Model.load(float_path, device="cpu", cache_dir=None)(x)
    got = lite.Model.load(int8_path, device="cpu", cache_dir=None)(x)
    assert _cosine(expected, got) >= 0.99


def test_static_int8_quantizes_the_matmuls_after_fused_ops(tmp_path):
    report = converter.convert(_fused_block(), tmp_path / "int8.lite", quant="int8", calibration_data=_samples())
    assert {"fc1", "fc2"} <= set(report.quantization.quantized_nodes)
    x = _samples(1)[0]
    expected = lite.Model.load(_convert_float(tmp_path), device="cpu", cache_dir=None)(x)
    got = lite.Model.load(tmp_path / "int8.lite", device="cpu", cache_dir=None)(x)
    assert _cosine(expected, got) >= 0.99


def _convert_float(tmp_path):
    path = tmp_path / "float.lite"
    converter.convert(_fused_block(), path)
    return path


def _untyped_matmul():
    """A MatMul reading a custom op's output, whose type nothing can know: int8 declines it."""
    nodes = [helper.make_node("Scramble", ["x"], ["t"], name="scramble", domain="example.custom"),
             helper.make_node("MatMul", ["t", "w"], ["y"], name="fc")]
    w = numpy_helper.from_array(np.ones((HIDDEN, HIDDEN), np.float32), "w")
    graph = helper.make_graph(nodes, "untyped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", HIDDEN])], [w])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("example.custom", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_a_quantization_that_quantizes_nothing_warns_with_the_reasons(tmp_path):
    report = converter.convert(_untyped_matmul(), tmp_path / "q.lite", quant="int8-dynamic", allow_custom=True,
                               verify=False)
    (warning,) = [w for w in report.quantization.warnings if "quantized no node" in w]
    assert "MatMul 'fc': input A is not a float32 activation" in warning
    assert "no smaller" in warning
    assert warning in report.to_dict()["quantization"]["warnings"]
    assert "quantized no node" in report.table()


def test_the_cli_prints_the_nothing_quantized_warning_even_when_quiet(tmp_path):
    source = tmp_path / "m.onnx"
    source.write_bytes(_untyped_matmul().SerializeToString())
    completed = subprocess.run(
        [sys.executable, "-m", "lite.cli", "convert", str(source), "-o", str(tmp_path / "q.lite"),
         "--quant", "int8-dynamic", "--allow-custom", "--no-verify", "-q"],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == ""
    assert "lite convert: warning: --quant int8-dynamic quantized no node" in completed.stderr
