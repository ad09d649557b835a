"""lite's converter: ONNX in, optimized graph out, as .lite (or .onnx for ONNX Runtime).

Pipeline: ``importer`` (ONNX → onnx_ir) → ``passes`` (ordered, each reporting what it did) →
``lower`` (onnx_ir → ``lite.format.ir.Model``) → ``lite.format.save``; or ``onnx_export`` for
.onnx output. ``verify`` compares against ONNX Runtime on the original.
"""

from converter.api import convert, convert_model, converter_version, optimize_model
from converter.errors import (
    ConverterError,
    ExportError,
    InvalidOptionError,
    ModelImportError,
    PassError,
    UnsupportedOpsError,
    VerificationError,
)
from converter.report import ConversionReport

__version__ = converter_version()

__all__ = [
    "ConversionReport",
    "ConverterError",
    "ExportError",
    "InvalidOptionError",
    "ModelImportError",
    "PassError",
    "UnsupportedOpsError",
    "VerificationError",
    "convert",
    "convert_model",
    "converter_version",
    "optimize_model",
]
