"""Static int8 (QDQ): the tensors quantization leaves in float, and why, each with the accuracy it
saves: those a Log magnifies (and not a layer norm's input, whose divisor is a row mean), tensors
empty on every calibration sample, a Concat of box coordinates and scores, and an output int8
would ruin, reported after a check on the calibration samples."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.quantize.calibrate import collect_stats, ranges
from converter.quantize.config import QuantConfig
from converter.quantize.static import quantize_static
from lite.engines.numpy_engine import NumpyEngine
from lite.format import load

ort = pytest.importorskip("onnxruntime")


def _log_power_spectrum() -> tuple:
    """A speech model's front end: two strided Convs (an STFT's real and imaginary bases), the
    power |X|^2, a floor, Log, then a learned Conv."""
    rng = np.random.default_rng(1)
    frame, bins = 64, 17
    angles = 2 * np.pi * np.outer(np.arange(bins), np.arange(frame)) / frame
    window = np.hanning(frame)
    initializers = [
        numpy_helper.from_array((np.cos(angles) * window)[:, None, :].astype(np.float32), "real_basis"),
        numpy_helper.from_array((-np.sin(angles) * window)[:, None, :].astype(np.float32), "imag_basis"),
        numpy_helper.from_array(np.array(1e-10, np.float32), "floor"),
        numpy_helper.from_array(rng.standard_normal((8, bins, 3)).astype(np.float32) * 0.2, "w"),
    ]
    nodes = [
        helper.make_node("Conv", ["audio", "real_basis"], ["real"], name="stft_real", strides=[16]),
        helper.make_node("Conv", ["audio", "imag_basis"], ["imag"], name="stft_imag", strides=[16]),
        helper.make_node("Mul", ["real", "real"], ["real2"], name="square_real"),
        helper.make_node("Mul", ["imag", "imag"], ["imag2"], name="square_imag"),
        helper.make_node("Add", ["real2", "imag2"], ["power"], name="power"),
        helper.make_node("Max", ["power", "floor"], ["floored"], name="floor"),
        helper.make_node("Log", ["floored"], ["log_power"], name="log"),
        helper.make_node("Conv", ["log_power", "w"], ["y"], name="learned", pads=[1, 1]),
    ]
    graph = helper.make_graph(nodes, "log_power", [helper.make_tensor_value_info("audio", TensorProto.FLOAT, [1, 1, 1024])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # Speech: loud and near-silent stretches, so the spectrum spans many decades.
    loudness = np.repeat(rng.choice([1.0, 1e-3], size=(8, 1, 16)), 64, axis=2)
    return proto, (rng.standard_normal((8, 1, 1024)) * loudness).astype(np.float32)


def test_tensors_a_log_magnifies_stay_float_and_the_spectrum_survives():
    proto, audio = _log_power_spectrum()
    model = converter.convert_model(proto)
    config = QuantConfig()
    stats, _ = collect_stats(model, [audio], config)
    result = quantize_static(model, ranges(stats, config), config)
    declined = {name: reason for name, _, reason in result.declined}
    for name in ("stft_real", "stft_imag", "square_real", "square_imag", "power"):
        assert "reaches Log node 'log'" in declined[name], (name, declined.get(name))
    assert "learned" in result.quantized
    feeds = {"audio": audio[:1]}
    reference = NumpyEngine(model).run(feeds)["y"]
    quantized = NumpyEngine(result.model).run(feeds)["y"]
    error = np.abs(quantized - reference).max() / np.abs(reference).max()
    assert error < 0.05, error


def test_a_layer_norm_written_out_keeps_its_input_quantized():
    """Its divisor, sqrt(mean((x - mean)^2) + eps), is a mean over the row, not a small value."""
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32), "w")
    constants = [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("two", 2.0), ("eps", 1e-5))]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="dense"),
        helper.make_node("Add", ["h", "x"], ["residual"], name="residual"),
        helper.make_node("ReduceMean", ["residual"], ["mean"], name="mean", axes=[-1]),
        helper.make_node("Sub", ["residual", "mean"], ["centered"], name="center"),
        helper.make_node("Pow", ["centered", "two"], ["squared"], name="square"),
        helper.make_node("ReduceMean", ["squared"], ["variance"], name="variance", axes=[-1]),
        helper.make_node("Add", ["variance", "eps"], ["padded"], name="pad"),
        helper.make_node("Sqrt", ["padded"], ["std"], name="std"),
        helper.make_node("Div", ["centered", "std"], ["y"], name="normalize"),
    ]
    graph = helper.make_graph(nodes, "layer_norm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 16])], [w, *constants])
    proto = onnx.shape_inference.infer_shapes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    model = converter.convert_model(proto, optimize=False)  # as written: no LayerNormalization fused
    config = QuantConfig()
    stats, _ = collect_stats(model, [rng.standard_normal((4, 16)).astype(np.float32)], config)
    result = quantize_static(model, ranges(stats, config), config)
    assert {"dense", "residual"} <= set(result.quantized), result.declined
    assert not [reason for _, _, reason in result.declined if "magnifies" in reason]


def test_a_tensor_empty_on_every_calibration_sample_stays_float(tmp_path):
    """A detector's regions on a pyramid level no sample used: the node reading them stays float."""
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, 4)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Compress", ["x", "keep"], ["rows"], axis=0),
        helper.make_node("MatMul", ["rows", "w"], ["y"], name="rows_layer"),
        helper.make_node("MatMul", ["x", "w"], ["z"], name="dense"),
    ]
    graph = helper.make_graph(nodes, "regions", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 4]),
                                                 helper.make_tensor_value_info("keep", TensorProto.BOOL, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["K", 4]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [8, 4])], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(4)
    samples = [{"x": rng.random((8, 4), dtype=np.float32), "keep": np.zeros(8, bool)} for _ in range(4)]
    report = converter.convert(proto, tmp_path / "q.lite", quant="int8", calibration_data=samples)
    declined = {name: reason for name, _, reason in report.quantization.declined}
    assert "held no value in any calibration sample" in declined["rows_layer"]
    assert "dense" in report.quantization.quantized_nodes
    x, keep = rng.random((8, 4), dtype=np.float32), np.arange(8) % 3 == 0
    got = NumpyEngine(load(tmp_path / "q.lite")).run({"x": x, "keep": keep})
    np.testing.assert_allclose(got["y"], x[keep] @ numpy_helper.to_array(w), rtol=0.05, atol=0.05)


def _detector_head():
    """Box coordinates (Sigmoid x 640) and class scores (Sigmoid, 0 to 1) concatenated, then a
    Reshape: a detector's output."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float32), name)
               for name in ("wb", "ws")]
    constants = [numpy_helper.from_array(np.array(640, np.float32), "scale"),
                 numpy_helper.from_array(np.array([1, 8, 1024], np.int64), "shape")]
    nodes = [
        helper.make_node("Conv", ["x", "wb"], ["b0"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["b0"], ["b1"]),
        helper.make_node("Mul", ["b1", "scale"], ["boxes"]),
        helper.make_node("Conv", ["x", "ws"], ["s0"], pads=[1, 1, 1, 1]), helper.make_node("Sigmoid", ["s0"], ["scores"]),
        helper.make_node("Concat", ["boxes", "scores"], ["both"], axis=1, name="head"),
        helper.make_node("Reshape", ["both", "shape"], ["y"], name="flatten"),
    ]
    graph = helper.make_graph(nodes, "head", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 1024])], weights + constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_concat_of_coordinates_and_scores_stays_float_and_the_scores_survive(tmp_path):
    """One int8 scale for 0..640 and 0..1 rounded every score to 0 (a step of 2.5)."""
    rng = np.random.default_rng(1)
    samples = [rng.random((1, 3, 32, 32), dtype=np.float32) for _ in range(4)]
    report = converter.convert(_detector_head(), tmp_path / "q.lite", quant="int8", calibration_data=samples)
    declined = {name: reason for name, _, reason in report.quantization.declined}
    assert "one int8 scale would leave it" in declined["head"] and "Concat 'head'" in declined["flatten"]
    x = rng.random((1, 3, 32, 32), dtype=np.float32)
    expected = ort.InferenceSession(_detector_head().SerializeToString()).run(None, {"x": x})[0]
    got = NumpyEngine(load(tmp_path / "q.lite")).run({"x": x})["y"]
    np.testing.assert_allclose(got[0, 4:], expected[0, 4:], atol=0.05)  # the scores
    assert report.quantization.evaluation is not None, report.quantization.warnings
    assert report.quantization.evaluated_on == "calibration" and report.quantization.evaluation.outputs[0].cosine > 0.99


def test_an_output_int8_ruins_is_reported_after_a_check_on_calibration_samples(tmp_path, monkeypatch):
    from converter.quantize import kept_float

    monkeypatch.setattr(kept_float, "DISPARITY", 10**9)  # the shared scale the rule above prevents
    rng = np.random.default_rng(1)
    samples = [rng.random((1, 3, 32, 32), dtype=np.float32) for _ in range(4)]
    report = converter.convert(_detector_head(), tmp_path / "q.lite", quant="int8", calibration_data=samples)
    (warning,) = [w for w in report.quantization.warnings if "against the float model" in w]
    assert "int8 output 'y' (index 4 of axis 1) has cosine" in warning and "on 4 calibration samples" in warning
