"""Acceptance: ResNet-18 and MobileNetV2 in each exporter's shape convert cleanly.

After conversion no BatchNormalization, Identity, Dropout or Shape→Expand bias chain remains,
and outputs match ONNX Runtime on the original within 1e-4 (relative to the output's scale).
The graphs come from ``models.py`` (no torch needed).
"""

from __future__ import annotations

import onnx
import pytest
from models import BUILDERS, STYLES

import converter
from converter.reference_session import onnxruntime_available

pytestmark = pytest.mark.skipif(not onnxruntime_available(), reason="needs onnxruntime for the reference outputs")

GONE = {"BatchNormalization", "Identity", "Dropout", "Shape", "Expand", "CastLike", "Constant"}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("network", sorted(BUILDERS))
def test_exporter_shapes_convert_to_onnx(network, style, tmp_path):
    original = BUILDERS[network](style)
    output = tmp_path / f"{network}.onnx"
    report = converter.convert(original, output, verify=True, rtol=1e-4)
    converted = onnx.load(output)
    remaining = {node.op_type for node in converted.graph.node}
    assert not remaining & GONE, remaining & GONE
    assert converted.ir_version <= 11 and converted.opset_import[0].version <= 26
    assert report.verification.passed
    assert max(o.max_rel for o in report.verification.outputs) <= 1e-4
    assert report.after.ops["Conv"] == report.before.ops["Conv"]


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("network", sorted(BUILDERS))
def test_exporter_shapes_convert_to_lite(network, style, tmp_path):
    from lite.format import load

    original = BUILDERS[network](style)
    output = tmp_path / f"{network}.lite"
    report = converter.convert(original, output, verify=True, rtol=1e-4)
    model = load(output)
    remaining = {node.op_type for graph in model.graphs for node in graph.nodes}
    assert not remaining & GONE, remaining & GONE
    fused = [n for n in model.main.nodes if "fused_activation" in n.attributes]
    assert fused, "ReLU / ReLU6 after Conv should be fused"
    assert report.verification.passed and report.verification.engine.startswith("lite.Model")
    assert model.metadata["source_sha256"] == report.source_sha256
