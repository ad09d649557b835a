"""Quantized digits networks in the compact .lite form (format 2.x, ``lite.format.qdq``): every QDQ
group the quantizer makes is stored as one tensor, every int32 bias without its scales (2.1,
``lite.format.implied_scale``), and the file reads back as the quantizer's graph."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import onnx
import pytest

import converter
import lite
from converter.quantize.calibrate import collect_stats, ranges
from converter.quantize.config import QuantConfig
from converter.quantize.static import quantize_static
from lite.format import load, to_bytes
from lite.format.dtypes import DataType
from tests.format.models import canonical, implied_scale_tensors, implied_tensors, stored_ops


def _quantized(path: str, calibration: np.ndarray):
    model = converter.convert_model(onnx.load(path))
    config = QuantConfig()
    stats, _ = collect_stats(model, [calibration], config)
    return quantize_static(model, ranges(stats, config), config).model


@pytest.mark.parametrize("network", ["lenet", "resnet"])
def test_every_qdq_group_is_stored_compactly_and_read_back_exactly(network, request, digits32, digits16):
    (x, _), (xt, _) = digits32 if network == "lenet" else digits16
    explicit = _quantized(request.getfixturevalue(f"{network}_onnx"), x[:64])
    data = to_bytes(explicit)
    assert not {"QuantizeLinear", "DequantizeLinear"} & set(stored_ops(data))
    groups = sum(n.op_type == "QuantizeLinear" for n in explicit.main.nodes)
    groups += sum(n.op_type == "DequantizeLinear" and explicit.main.tensors[n.inputs[0]].data is not None
                  for n in explicit.main.nodes)
    assert len(implied_tensors(data)) == groups
    biases = [n for n in explicit.main.nodes if n.op_type == "DequantizeLinear"
              and explicit.main.tensors[n.inputs[0]].dtype == DataType.INT32]
    assert biases and len(implied_scale_tensors(data)) == len(biases)
    read = load(data)
    assert canonical(read.main) == canonical(explicit.main)
    assert [n.name for n in read.main.nodes] == [n.name for n in explicit.main.nodes]
    assert to_bytes(read) == data


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("network", ["lenet", "resnet"])
def test_outputs_equal_the_explicit_files_bit_for_bit(network, device, request, digits32, digits16):
    if device == "cpu":
        pytest.importorskip("onnxruntime")
    (x, _), (xt, _) = digits32 if network == "lenet" else digits16
    explicit = _quantized(request.getfixturevalue(f"{network}_onnx"), x[:64])
    compact = to_bytes(explicit)
    uncompacted = to_bytes(dataclasses.replace(explicit, version=(1, 0)))  # format 1.0 stores every node
    assert "QuantizeLinear" in stored_ops(uncompacted)
    # int8 kernels on both sides: int8_compute="auto" times them against the float form at each
    # load, and on a busy machine two loads may choose differently.
    options = {"int8_compute": "int8"} if device == "cpu" else {}
    expected = lite.Model.load(uncompacted, device=device, **options)(xt[:100])
    got = lite.Model.load(compact, device=device, **options)(xt[:100])
    assert got.tobytes() == expected.tobytes()


def test_int8_weight_mode_is_stored_compactly(lenet_onnx, tmp_path):
    path = tmp_path / "weights.lite"
    converter.convert(lenet_onnx, path, quant="int8-weight")
    data = path.read_bytes()
    assert "DequantizeLinear" not in stored_ops(data)
    assert set(implied_tensors(data).values()) == {"DEQUANTIZE"}
    float_path = tmp_path / "float.lite"
    converter.convert(lenet_onnx, float_path)
    assert os.path.getsize(float_path) / len(data) > 3.5
