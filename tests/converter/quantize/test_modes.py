"""int8-dynamic, int8-weight and fp16 modes, and the command line."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite
from converter.quantize.errors import AccuracyBudgetError, QuantizationOptionError

pytest.importorskip("onnxruntime")


def _mlp():
    """A MatMul/Gemm-heavy network: Gemm+Relu → MatMul+Add+Relu → Gemm (216 k parameters)."""
    rng = np.random.default_rng(0)

    def weight(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)

    initializers = [weight("w1", 256, 64), weight("b1", 256), weight("w2", 256, 512), weight("b2", 512),
                    weight("w3", 10, 512)]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], name="fc1", transB=1),
        helper.make_node("Relu", ["h1"], ["r1"], name="relu1"),
        helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="fc2"),
        helper.make_node("Add", ["m2", "b2"], ["h2"], name="bias2"),
        helper.make_node("Relu", ["h2"], ["r2"], name="relu2"),
        helper.make_node("Gemm", ["r2", "w3"], ["y"], name="fc3", transB=1),
    ]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _outputs(path, x, device):
    return lite.Model.load(str(path), device=device)(x)


@pytest.fixture(scope="module")
def mlp_float(tmp_path_factory):
    path = tmp_path_factory.mktemp("mlp") / "float.lite"
    converter.convert(_mlp(), path)
    return path


def _cosine(a, b):
    return float(np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_int8_dynamic_quantizes_matmul_and_gemm_at_run_time(mlp_float, tmp_path):
    x = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    path = tmp_path / "dynamic.lite"
    report = converter.convert(_mlp(), path, quant="int8-dynamic", eval_data=[x])
    assert sorted(report.quantization.quantized_nodes) == ["fc1", "fc2", "fc3"]
    ops = [n.op_type for n in lite.Model.load(str(path), device="numpy").ir.main.nodes]
    assert ops.count("DynamicQuantizeLinear") == 3 and ops.count("MatMulInteger") == 3
    reference = _outputs(mlp_float, x, "cpu")
    on_ort, on_numpy = _outputs(path, x, "cpu"), _outputs(path, x, "numpy")
    assert _cosine(reference, on_ort) > 0.999
    np.testing.assert_allclose(on_numpy, on_ort, atol=1e-4 * np.ptp(on_ort))
    assert os.path.getsize(mlp_float) / os.path.getsize(path) > 3.5


def test_int8_weight_stores_a_quarter_of_the_bytes(mlp_float, tmp_path):
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    path = tmp_path / "weights.lite"
    converter.convert(_mlp(), path, quant="int8-weight")
    ratio = os.path.getsize(mlp_float) / os.path.getsize(path)
    # ≈4x: the float biases and the per-channel parameters (scales, int64 zero points in the
    # QuantParams table) are what keeps it from exactly 4
    assert ratio > 3.5
    assert _cosine(_outputs(mlp_float, x, "numpy"), _outputs(path, x, "numpy")) > 0.9999
    weights = [t for t in lite.Model.load(str(path), device="numpy").ir.main.tensors if t.quant is not None]
    assert len(weights) == 3 and all(t.quant.axis == 0 or t.quant.axis == 1 for t in weights)


def test_fp16_halves_the_file(mlp_float, tmp_path):
    path = tmp_path / "half.lite"
    converter.convert(_mlp(), path, quant="fp16")
    assert 1.9 < os.path.getsize(mlp_float) / os.path.getsize(path) < 2.1


def test_option_errors_say_what_to_do(tmp_path):
    with pytest.raises(QuantizationOptionError, match="needs calibration data: pass --calib"):
        converter.convert(_mlp(), tmp_path / "a.lite", quant="int8")
    with pytest.raises(AccuracyBudgetError, match="needs evaluation data"):
        converter.convert(_mlp(), tmp_path / "a.lite", quant="int8-dynamic", max_accuracy_drop=1.0)
    assert not (tmp_path / "a.lite").exists()


def test_cli_quantizes_with_calibration_folder_and_stores_preprocessing(lenet_onnx, digits32, tmp_path, capsys):
    from converter.cli import main

    (x, _), (xt, yt) = digits32
    (tmp_path / "calib").mkdir()
    np.save(tmp_path / "calib" / "part0.npy", x[:64])
    (tmp_path / "eval").mkdir()
    np.savez(tmp_path / "eval" / "test.npz", input=xt[:100], label=yt[:100])
    spec = json.dumps({"resize": 32, "crop": 32, "color": "L", "mean": [0.0], "std": [1.0]})
    output = tmp_path / "lenet_int8.lite"
    code = main(["convert", lenet_onnx, "-o", str(output), "--quant", "int8", "--calib", str(tmp_path / "calib"),
                 "--calib-method", "percentile", "--eval", str(tmp_path / "eval"), "--max-accuracy-drop", "0.5",
                 "--preprocess", spec, "--report", str(tmp_path / "report.json")])
    assert code == 0
    printed = capsys.readouterr()
    assert "quantization: int8" in printed.out and "calibrating (samples): 64/64" in printed.err
    model = lite.Model.load(str(output), device="numpy")
    assert json.loads(model.metadata["preprocessing"])["crop"] == 32
    report = json.loads((tmp_path / "report.json").read_text())["quantization"]
    assert report["options"]["calibration_method"] == "percentile" and report["budget_met"]
    assert main(["convert", lenet_onnx, "-o", str(tmp_path / "x.lite"), "--quant", "int8"]) == 2


def _image_folder(folder, images) -> None:
    from PIL import Image

    folder.mkdir()
    for index, image in enumerate(images[:16]):
        Image.fromarray((image[0] * 255).clip(0, 255).astype(np.uint8)).save(folder / f"{index}.png")


def test_calibration_images_without_preprocessing_are_refused(lenet_onnx, digits32, tmp_path):
    """Raw pixels (0-255) calibrate a model trained on normalized inputs into a much worse one,
    silently: an image folder needs --preprocess or the model's own preprocessing metadata."""
    from converter.quantize.errors import CalibrationDataError

    (x, _), _ = digits32
    _image_folder(tmp_path / "images", x)
    with pytest.raises(CalibrationDataError, match="--preprocess"):
        converter.convert(lenet_onnx, tmp_path / "q.lite", quant="int8", calibration_data=str(tmp_path / "images"))
    assert not (tmp_path / "q.lite").exists()


def test_calibration_images_take_the_models_preprocessing_metadata(lenet_onnx, digits32, tmp_path):
    from converter.quantize.config import QuantConfig
    from converter.quantize.pipeline import quantize_model

    (x, _), _ = digits32
    _image_folder(tmp_path / "images", x)
    model = converter.convert_model(lenet_onnx)
    model.metadata["preprocessing"] = json.dumps({"resize": 32, "crop": 32, "color": "L", "mean": [0.0],
                                                  "std": [1.0]})
    _, report = quantize_model(model, QuantConfig(calibration_size=16), calibration_data=str(tmp_path / "images"))
    assert any("'preprocessing' metadata" in warning for warning in report.warnings)
