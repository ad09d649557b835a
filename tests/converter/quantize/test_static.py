"""Static int8 (QDQ): graph structure, explicit quantization parameters, engines agreeing."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
from converter.quantize.calibrate import collect_stats, ranges
from converter.quantize.config import QuantConfig
from converter.quantize.errors import CalibrationDataError
from converter.quantize.runner import with_outputs
from converter.quantize.static import quantize_static
from lite.engines.numpy_engine import NumpyEngine
from lite.format import load
from lite.format.dtypes import DataType

ort = pytest.importorskip("onnxruntime")


def test_qdq_structure_and_explicit_params(lenet_onnx, digits32, tmp_path):
    (x, _), _ = digits32
    out = tmp_path / "q.lite"
    converter.convert(lenet_onnx, out, quant="int8", calibration_data=[x[:64]])
    model = load(out)
    graph = model.main
    tensors = graph.tensors
    producers = {o: n for n in graph.nodes for o in n.outputs}
    layers = [n for n in graph.nodes if n.op_type in ("Conv", "Gemm")]
    assert len(layers) == 5
    for node in layers:
        for index in node.inputs[:3]:
            assert producers[index].op_type == "DequantizeLinear", (node.name, tensors[index].name)
    weights = [t for t in tensors if t.data is not None and t.dtype == DataType.INT8 and t.quant is not None]
    assert len(weights) == 5 and all(t.quant.axis == 0 and t.quant.symmetric and t.quant.bits == 8 for t in weights)
    biases = [t for t in tensors if t.data is not None and t.dtype == DataType.INT32 and t.quant is not None]
    assert len(biases) == 3 and all(t.quant.bits == 32 for t in biases)  # the Dense layers (LeNet convs have no bias)
    activations = [t for t in tensors if t.data is None and t.dtype == DataType.UINT8]
    assert activations and all(t.quant is not None and t.quant.axis is None and not t.quant.signed for t in activations)
    assert not [t for t in tensors if t.data is not None and t.dtype == DataType.FLOAT and t.data.ndim > 1]  # no float weights left
    assert "quantization" in model.metadata


def test_unknown_ops_stay_float_and_removable_relu_goes():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "c"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r"], name="relu"),
        helper.make_node("Erf", ["r"], ["y"], name="erf"),
    ]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = converter.convert_model(proto)
    config = QuantConfig()
    data = [rng.standard_normal((4, 3, 8, 8)).astype(np.float32)]
    stats, _ = collect_stats(model, data, config)
    result = quantize_static(model, ranges(stats, config), config)
    assert result.removed == ["relu"]
    assert set(result.quantized) == {"conv", "add"}
    ops = [n.op_type for n in result.model.main.nodes]
    assert "Relu" not in ops and "Erf" in ops
    feeds = {"x": data[0][:1]}
    reference = NumpyEngine(model).run(feeds)["y"]
    quantized = NumpyEngine(result.model).run(feeds)["y"]
    assert np.all(quantized >= 0) and np.corrcoef(reference.ravel(), quantized.ravel())[0, 1] > 0.999


def _both_engines(model, feeds):
    from lite.engines.ort.engine import OrtEngine
    from lite.engines.ort.sessions import SessionConfig

    on_ort = OrtEngine(model, "cpu", options=SessionConfig(cache_dir=None)).run(feeds)
    return NumpyEngine(model).run(feeds), on_ort


def _quantized_names(model):
    return [t.name for t in model.main.tensors if t.data is None and t.quant is not None]


def test_numpy_engine_matches_onnxruntime_within_one_step(resnet_onnx, digits16):
    """Each integer layer, fed the same input on both engines: |q_numpy − q_ort| <= 1 everywhere.

    Run end to end, one-step differences compound: a later QLinearAdd reads one through both of
    its inputs, a Conv sums several, and a few elements per million end two or three steps apart.
    """
    (x, _), (xt, _) = digits16
    model = converter.convert_model(resnet_onnx)
    config = QuantConfig()
    stats, _ = collect_stats(model, [x[:128]], config)
    calibrated = ranges(stats, config)
    full = quantize_static(model, calibrated, config)
    feeds = {"input": xt[:64]}
    layers = [name for name in full.quantized if name.split("_")[0] in ("Conv", "Add", "Gemm", "GlobalAveragePool")]
    assert len(layers) >= 10
    for layer in layers:
        alone = quantize_static(model, calibrated, config, include={layer}).model
        names = _quantized_names(alone)
        on_numpy, on_ort = _both_engines(with_outputs(alone, names), feeds)
        for name in names:
            difference = np.abs(on_numpy[name].astype(np.int32) - on_ort[name].astype(np.int32))
            assert difference.max() <= 1, f"{layer}: tensor {name} differs by {difference.max()} steps"

    names = _quantized_names(full.model) + [full.model.main.tensors[i].name for i in full.model.main.outputs]
    on_numpy, on_ort = _both_engines(with_outputs(full.model, names), feeds)
    steps = np.concatenate([np.abs(on_numpy[n].astype(np.int32) - on_ort[n].astype(np.int32)).ravel() for n in names[:-1]])
    assert steps.max() <= 4 and np.mean(steps <= 1) >= 0.9999 and np.mean(steps <= 2) >= 0.99999
    logits_numpy, logits_ort = on_numpy[names[-1]], on_ort[names[-1]]
    assert np.mean(logits_numpy.argmax(1) == logits_ort.argmax(1)) >= 0.98


@pytest.mark.parametrize("engine", ["numpy", "ort"])
def test_calibration_runs_one_sample_at_a_time_when_the_model_rejects_batches(tmp_path, engine, monkeypatch):
    """An export that declares a symbolic batch but reshapes to batch 1 (torch.export did so with
    LeViT) still calibrates, and the report says why it ran sample by sample."""
    from onnx import TensorProto, helper, numpy_helper

    import converter
    import lite

    if engine == "ort":
        pytest.importorskip("onnxruntime")
    else:
        monkeypatch.setattr("converter.quantize.pipeline.onnxruntime_available", lambda: False)
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    shape = numpy_helper.from_array(np.array([1, 4 * 6 * 6], np.int64), "shape")
    dense = numpy_helper.from_array(rng.standard_normal((4 * 6 * 6, 5)).astype(np.float32), "dense")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "shape"], ["f"]), helper.make_node("MatMul", ["f", "dense"], ["y"])]
    graph = helper.make_graph(nodes, "batch_one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])], [weight, shape, dense])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calibration = [rng.standard_normal((3, 8, 8)).astype(np.float32) for _ in range(20)]
    report = converter.convert(model, tmp_path / "q.lite", quant="int8", calibration_data=calibration, verify=False)
    assert report.quantization.calibration_engine == engine
    assert report.quantization.calibration_samples == 20
    assert any("batch 16" in warning and "one at a time" in warning for warning in report.quantization.warnings), \
        report.quantization.warnings
    x = calibration[0][None]
    assert lite.Model.load(tmp_path / "q.lite", device="numpy").predict({"x": x})["y"].shape == (1, 5)


def test_a_rank_0_activation_is_calibrated_whole(tmp_path):
    # A quality model's score: MatMul -> ReduceMean(keepdims=0) -> Mul, a scalar with no batch
    # axis to trim; calibration indexed it as a batch and failed with a traceback.
    rng = np.random.default_rng(0)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("ReduceMean", ["m"], ["s"], keepdims=0),
         helper.make_node("Mul", ["s", "k"], ["y"])], "score",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array(2.0, np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    calibration = [{"x": rng.standard_normal((1, 8)).astype(np.float32)} for _ in range(4)]
    converter.convert(model, tmp_path / "q.lite", quant="int8", calibration_data=calibration)
    assert load(tmp_path / "q.lite").main.nodes


def test_an_opset_11_model_is_raised_to_13_for_per_channel_weights(tmp_path):
    # paddle2onnx and keras2onnx write opset 11-12, which has no per-axis DequantizeLinear; per
    # tensor, their OCR models kept a cosine of 0.66-0.82 to their float outputs. The Squeeze's
    # axes move from an attribute to an input at 13: the version converter rewrites it.
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * np.array([1, 10, 0.1, 5, 1, 2, 0.5, 3],
                                                                              np.float32)[:, None, None, None]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c"], ["p"]),
             helper.make_node("Squeeze", ["p"], ["y"], axes=[2, 3])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    calibration = [rng.standard_normal((3, 8, 8)).astype(np.float32) for _ in range(8)]
    report = converter.convert(model, tmp_path / "q.lite", quant="int8", calibration_data=calibration)
    assert any("opset 11 raised to 13" in warning for warning in report.warnings), report.warnings
    loaded = load(tmp_path / "q.lite")
    weights = [t for t in loaded.main.tensors if t.data is not None and t.dtype == DataType.INT8 and t.quant is not None]
    assert weights and all(t.quant.axis == 0 for t in weights)
    x = calibration[0][None]
    import lite

    got = lite.Model.load(tmp_path / "q.lite", device="numpy").predict({"x": x})["y"]
    converter.convert(model, tmp_path / "f.lite", verify=False)
    want = lite.Model.load(tmp_path / "f.lite", device="numpy").predict({"x": x})["y"]
    cosine = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
    assert got.shape == (1, 8) and cosine > 0.99


def test_int8_dynamic_raises_an_opset_9_model_to_one_with_dynamic_quantization(tmp_path):
    # DynamicQuantizeLinear came with opset 11: on an opset-9 model (a PyTorch 1.9 export) the
    # converter refused the nodes it had inserted itself.
    weight = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
                              [numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    report = converter.convert(model, tmp_path / "q.lite", quant="int8-dynamic")
    assert any("opset 9 raised to 13" in warning for warning in report.warnings), report.warnings
    import lite

    x = np.random.default_rng(1).standard_normal((2, 64)).astype(np.float32)
    got = lite.Model.load(tmp_path / "q.lite", device="numpy").predict({"x": x})["y"]
    assert np.abs(got - x @ weight).max() < 0.05 * np.abs(x @ weight).max()


def test_an_activation_whose_first_axis_is_not_the_batch_is_calibrated_whole(tmp_path):
    """(16, N) after a Transpose: ranged from its first rows only, the int8 model clamped at 6 of 30."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Add", ["t", "t"], ["s"]),
        helper.make_node("Transpose", ["s"], ["y"], perm=[1, 0]),
    ]
    graph = helper.make_graph(nodes, "features_first", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rng = np.random.default_rng(0)
    samples = [np.arange(16, dtype=np.float32) + rng.uniform(0, 0.1, 16).astype(np.float32) for _ in range(4)]
    converter.convert(proto, tmp_path / "q.lite", quant="int8", calibration_data=samples)
    x = samples[0][None]
    got = NumpyEngine(load(tmp_path / "q.lite")).run({"x": x})["y"]
    np.testing.assert_allclose(got, 2 * x, atol=0.2)


def _sequence_conv():
    """``input [T, 4]`` (frames, features, no batch axis) -> a temporal convolution of width 3:
    one frame is too short for it."""
    w = numpy_helper.from_array(np.random.default_rng(5).standard_normal((6, 4, 3)).astype(np.float32), "w")
    axes = numpy_helper.from_array(np.array([0], np.int64), "zero")
    nodes = [helper.make_node("Unsqueeze", ["input", "zero"], ["batched"]),  # [1, T, 4]
             helper.make_node("Transpose", ["batched"], ["channels"], perm=[0, 2, 1]),  # [1, 4, T]
             helper.make_node("Conv", ["channels", "w"], ["y"])]
    graph = helper.make_graph(nodes, "frames", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["T", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, "T2"])], [w, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_sequences_without_a_batch_axis_calibrate_whole_with_calib_whole(tmp_path):
    """madmom's form: read as rows, each frame was a sample the Conv refused; fed whole, it runs."""
    rng = np.random.default_rng(6)
    folder = tmp_path / "calib"
    folder.mkdir()
    for index, frames in enumerate((33, 48, 16)):  # 97 rows in batches of 16 leave one frame at the end
        np.save(folder / f"{index}.npy", rng.standard_normal((frames, 4)).astype(np.float32))
    with pytest.raises(CalibrationDataError, match="pass --calib-whole"):
        converter.convert(_sequence_conv(), tmp_path / "rows.lite", quant="int8", calibration_data=str(folder))
    report = converter.convert(_sequence_conv(), tmp_path / "q.lite", quant="int8", calibration_data=str(folder),
                               quant_options={"whole_samples": True})
    assert report.quantization.evaluation is not None, report.quantization.warnings
    assert report.quantization.calibration_samples == 3 and report.quantization.evaluation.samples == 3
    assert report.quantization.evaluation.outputs[0].cosine > 0.99
