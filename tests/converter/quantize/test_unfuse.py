"""int8 for layers whose fused activation no integer kernel applies (HardSwish, SiLU, Sigmoid...):
the layer runs in int8 with the activation in float between its DequantizeLinear and the next
QuantizeLinear, as in MobileNetV3 and EfficientNet; before, each such layer stayed in float."""

from __future__ import annotations

import numpy as np
import pytest
from passtools import make_model, rng

import converter
import lite
from converter.quantize.unfuse import unfuse_activations

pytest.importorskip("onnxruntime")


def _mobile_block():
    r = rng()

    def weight(*shape):
        return (r.normal(size=shape) * 0.3).astype(np.float32)

    return make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, 32, 32] input) => (float[N, 10] output) {
            c1 = Conv <pads: ints = [1, 1, 1, 1]> (input, w1, b1)
            h1 = HardSwish (c1)
            c2 = Conv <pads: ints = [1, 1, 1, 1], group: int = 16> (h1, w2, b2)
            g2 = Sigmoid (c2)
            h2 = Mul (c2, g2)
            c3 = Conv (h2, w3, b3)
            h3 = HardSwish (c3)
            p = GlobalAveragePool (h3)
            f = Flatten (p)
            output = Gemm <transB: int = 1> (f, w4, b4)
        }""",
        w1=weight(16, 3, 3, 3), b1=weight(16), w2=weight(16, 1, 3, 3), b2=weight(16),
        w3=weight(32, 16, 1, 1), b3=weight(32), w4=weight(10, 32), b4=weight(10),
    )


def test_layers_with_hardswish_and_silu_run_in_int8(tmp_path):
    x = rng().normal(size=(64, 3, 32, 32)).astype(np.float32)
    converter.convert(_mobile_block(), tmp_path / "float.lite")
    report = converter.convert(_mobile_block(), tmp_path / "int8.lite", quant="int8", calibration_data=[x])
    assert not [d for d in report.quantization.declined if "fused activation" in d[2]], report.quantization.declined
    model = lite.Model.load(tmp_path / "int8.lite", device="numpy").ir
    ops = [node.op_type for node in model.main.nodes]
    assert ops.count("HardSwish") == 2 and "Sigmoid" in ops  # written out, in float between Q/DQ pairs
    weights = [t for t in model.main.tensors if t.data is not None and t.dtype.name == "INT8" and t.data.ndim >= 2]
    assert len(weights) == 4  # the three convolutions and the Gemm
    test = rng().normal(size=(8, 3, 32, 32)).astype(np.float32)
    reference = lite.Model.load(tmp_path / "float.lite", device="numpy")(test)
    for device in ("numpy", "cpu"):
        options = {} if device == "numpy" else {"cache_dir": None}
        got = lite.Model.load(tmp_path / "int8.lite", device=device, **options)(test)
        cosine = float(np.sum(reference * got) / np.linalg.norm(reference) / np.linalg.norm(got))
        assert cosine >= 0.99, (device, cosine)


def test_clamping_activations_stay_fused():
    model = converter.convert_model(make_model(
        """<ir_version: 8, opset_import: ["" : 17]>
        g (float[N, 3, 8, 8] input) => (float[N, 4, 8, 8] output) {
            c = Conv <pads: ints = [1, 1, 1, 1]> (input, w)
            output = Relu (c)
        }""", w=rng().normal(size=(4, 3, 3, 3)).astype(np.float32)))
    unfused, rewritten = unfuse_activations(model)
    assert rewritten == [] and unfused is model
