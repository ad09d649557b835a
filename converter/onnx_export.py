"""Write the optimized graph as an ONNX model that ONNX Runtime loads.

This is the runtime's own lowering (``lite.format.onnx.lower``), so ``lite convert -o m.onnx``
writes exactly what the ONNX Runtime engine runs. Two things differ from the graph the passes
leave:

- fused activations are expanded back into their own nodes (``Conv → Relu`` ...), since
  ``fused_activation`` is a .lite attribute no ONNX schema has; ORT fuses them again itself;
- the model is stamped IR ≤ 11 and default-domain opset ≤ 26 (what ONNX Runtime 1.31 and 1.32 accept). Lowering
  the opset stamp is only done when no op in the model changed between the two versions (so the
  stamp is the only difference); otherwise ``onnx.version_converter`` converts it, and if that
  fails the export stops with a clear error.
"""

from __future__ import annotations

import onnx
import onnx_ir as ir

from converter.errors import ExportError
from converter.lower import lower_model
from lite.errors import UnsupportedOpError
from lite.format.onnx.lower import lower_model as lower_for_onnx_runtime
from lite.format.onnx.lower import make_ort_compatible

__all__ = ["make_ort_compatible", "serialize", "to_onnx"]

_PROTOBUF_LIMIT = 2**31 - 1


def to_onnx(model: ir.Model) -> onnx.ModelProto:
    """An ONNX Runtime-loadable ModelProto of ``model``."""
    try:
        return lower_for_onnx_runtime(lower_model(model), external_weights=False).model
    except UnsupportedOpError as err:
        raise ExportError(str(err)) from err


def serialize(proto: onnx.ModelProto) -> bytes:
    if proto.ByteSize() > _PROTOBUF_LIMIT:
        raise ExportError(
            "the optimized model exceeds protobuf's 2 GB limit as a single .onnx file; write .lite instead"
        )
    return proto.SerializeToString()
