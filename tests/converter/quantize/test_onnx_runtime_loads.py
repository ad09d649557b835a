"""Static int8 files that ONNX Runtime (device='cpu') loads: node names unique against the
source's own (ONNX Runtime's quantizer names its nodes '<tensor>_QuantizeLinear' too), and a
quantized model ONNX Runtime refuses where it runs the float one fails the conversion. A model with
no float32 value (float64 features) has nothing to calibrate: the float model is written, with a warning."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite
from converter.quantize import pipeline
from converter.quantize.errors import QuantizedModelRejectedError
from lite.format import ir, load

ort = pytest.importorskip("onnxruntime")


def _conv_relu_conv():
    """Conv → Relu → Conv whose first node bears the name lite gives the QuantizeLinear of its output."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1"),
               numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], name="a_QuantizeLinear", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["b"], name="relu"),
             helper.make_node("Conv", ["b", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _samples(count: int = 4) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.random((1, 3, 16, 16), dtype=np.float32) for _ in range(count)]


def test_qdq_nodes_avoid_the_names_of_the_sources_nodes(tmp_path):
    out = tmp_path / "q.lite"
    report = converter.convert(_conv_relu_conv(), out, quant="int8", calibration_data=_samples())
    assert not [w for w in report.quantization.warnings if "could not be checked" in w]
    names = Counter(node.name for node in load(out).main.nodes)
    assert names["a_QuantizeLinear"] == 1 and max(names.values()) == 1
    x = _samples(1)[0]
    expected = ort.InferenceSession(_conv_relu_conv().SerializeToString()).run(None, {"x": x})[0]
    got = lite.Model.load(out, device="cpu", cache_dir=None).predict({"x": x})["y"]
    assert np.corrcoef(got.reshape(-1), expected.reshape(-1))[0, 1] > 0.99


def _refused_by_onnx_runtime(quantize_static):
    """quantize_static whose result gives its last node an attribute its op does not have: ONNX
    Runtime refuses to load that (the numpy engine ignores it)."""

    def quantize(*args, **keywords):
        result = quantize_static(*args, **keywords)
        main = result.model.main
        last = main.nodes[-1]
        attributes = {**last.attributes, "not_an_attribute": ir.Attribute(ir.AttributeType.INT, 1)}
        nodes = [*main.nodes[:-1], dataclasses.replace(last, attributes=attributes)]
        graphs = [dataclasses.replace(main, nodes=nodes), *result.model.graphs[1:]]
        result.model = dataclasses.replace(result.model, graphs=graphs)
        return result

    return quantize


def test_a_quantized_model_onnx_runtime_refuses_fails_the_conversion(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "quantize_static", _refused_by_onnx_runtime(pipeline.quantize_static))
    out = tmp_path / "q.lite"
    with pytest.raises(QuantizedModelRejectedError, match="refuses the quantized one.*not_an_attribute"):
        converter.convert(_conv_relu_conv(), out, quant="int8", calibration_data=_samples())
    assert not out.exists()


def test_the_cli_exits_4_when_onnx_runtime_refuses_the_quantized_model(tmp_path, monkeypatch):
    """In process (the defect is simulated): the exit status of a failed verification."""
    from converter.cli import main

    monkeypatch.setattr(pipeline, "quantize_static", _refused_by_onnx_runtime(pipeline.quantize_static))
    source, calibration = tmp_path / "m.onnx", tmp_path / "calib"
    source.write_bytes(_conv_relu_conv().SerializeToString())
    calibration.mkdir()
    for index, sample in enumerate(_samples()):
        np.save(calibration / f"{index}.npy", sample)
    status = main(["convert", str(source), "-o", str(tmp_path / "q.lite"), "--quant", "int8", "--calib",
                   str(calibration), "-q"])
    assert status == 4


def _float64_affine():
    """Y = X * w + b in float64 (as tree ensembles exported from LightGBM read their features):
    no float32 value to calibrate or quantize."""
    nodes = [helper.make_node("Mul", ["X", "w"], ["m"], name="scale"), helper.make_node("Add", ["m", "b"], ["Y"], name="shift")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, ["N", 3])],
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, ["N", 3])],
                              [numpy_helper.from_array(np.array([1.0, 2.0, 3.0]), "w"),
                               numpy_helper.from_array(np.array([0.5, 0.5, 0.5]), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_int8_of_a_model_with_no_float32_value_writes_the_float_model_with_a_warning(tmp_path):
    out = tmp_path / "q.lite"
    x = np.random.default_rng(0).random((4, 3))
    report = converter.convert(_float64_affine(), out, quant="int8", calibration_data=[x])
    (warning,) = [w for w in report.quantization.warnings if "quantized no node" in w]
    assert "--quant int8 quantized no node" in warning and "DOUBLE, not float32" in warning
    assert report.quantization.calibration_samples == 0 and report.quantization.evaluation is None
    got = lite.Model.load(out, device="cpu", cache_dir=None).predict({"X": x})["Y"]
    np.testing.assert_allclose(got, x * [1.0, 2.0, 3.0] + 0.5)


def test_the_cli_writes_the_float_model_for_int8_of_a_float64_model(tmp_path):
    source, calibration = tmp_path / "m.onnx", tmp_path / "calib"
    source.write_bytes(_float64_affine().SerializeToString())
    calibration.mkdir()
    np.savez(calibration / "0.npz", X=np.random.default_rng(0).random((4, 3)))
    completed = subprocess.run(
        [sys.executable, "-m", "lite.cli", "convert", str(source), "-o", str(tmp_path / "q.lite"),
         "--quant", "int8", "--calib", str(calibration), "-q"],
        capture_output=True, text=True, timeout=300,
    )
    assert completed.returncode == 0, completed.stderr
    assert "lite convert: warning: --quant int8 quantized no node" in completed.stderr
