"""The default domain's version a conversion needs before it inserts standard ops.

- A model that imports only other domains (onnxmltools' XGBoost and LightGBM graphs: ai.onnx.ml
  alone) gets one where ``--fp16``, ``--fp16-io`` or int8 will insert Casts or QuantizeLinear
  nodes; none of the model's own nodes depends on which.
- A model below opset 13 is raised to 13 by onnx's version converter for int8: per-axis
  QuantizeLinear/DequantizeLinear, which per-channel weights need, came with 13, and
  DynamicQuantizeLinear, which int8-dynamic inserts, with 11. Per tensor, paddle2onnx's opset-11
  and 12 OCR recognizers kept a cosine of 0.66-0.82 to their float outputs (0.98-0.995 per
  channel), and an opset-9 model was refused under int8-dynamic, the converter's own nodes blamed.
  Where onnx's converter fails, the model stays as it was and the quantizer falls back to
  per-tensor weights (it says so).
"""

from __future__ import annotations

from typing import Protocol

import onnx_ir as ir

PER_AXIS_OPSET = 13


class _HoldsModel(Protocol):
    model: ir.Model


def prepare_source_opset(imported: _HoldsModel, *, inserts_standard_ops: bool, raise_for_int8: bool) -> list[str]:
    """Give ``imported.model`` the default-domain version the conversion needs (see the module
    docstring), replacing the model where it is raised; return notes for the report."""
    model = imported.model
    if inserts_standard_ops and "" not in model.opset_imports and "ai.onnx" not in model.opset_imports:
        model.opset_imports[""] = PER_AXIS_OPSET
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx"))
    if not raise_for_int8 or opset is None or opset >= PER_AXIS_OPSET:
        return []
    try:
        import onnx.version_converter

        raised = onnx.version_converter.convert_version(ir.to_proto(model), PER_AXIS_OPSET)
        imported.model = ir.from_proto(raised)
    except Exception as err:  # noqa: BLE001 - onnx's converter raises anything; the model stays as it was
        first = str(err).splitlines()[0][:200] if str(err) else ""
        return [f"opset {opset} could not be raised to {PER_AXIS_OPSET} for int8 ({type(err).__name__}: {first})"]
    return [f"opset {opset} raised to {PER_AXIS_OPSET} (onnx.version_converter) for int8"]
