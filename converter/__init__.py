"""lite's converter: ONNX in, optimized graph out, as .lite (or .onnx for ONNX Runtime).

Pipeline: ``importer`` (ONNX → onnx_ir) → ``passes`` (ordered, each reporting what it did) →
``lower`` (onnx_ir → ``lite.format.ir.Model``) → ``lite.format.save``; or ``onnx_export`` for
.onnx output. ``verify`` compares against ONNX Runtime on the original.
"""

from converter.errors import (
    ConverterError,
    ExportError,
    InvalidOptionError,
    ModelImportError,
    PassError,
    UnsupportedOpsError,
    VerificationError,
)

# The pipeline imports onnx and onnx_ir (with sympy): loaded on first use, so that the `lite`
# command and code that only needs the errors do not pay for it.
_LAZY = {"convert": "converter.api", "convert_model": "converter.api", "converter_version": "converter.output",
         "optimize_model": "converter.api", "ConversionReport": "converter.report",
         "ConvertOptions": "converter.options", "GraphOptions": "converter.options",
         "QuantizeOptions": "converter.options", "SourceOptions": "converter.options",
         "VerifyOptions": "converter.options"}


def __getattr__(name: str):
    if name == "__version__":
        from converter.output import converter_version

        return converter_version()
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'converter' has no attribute {name!r}")


__all__ = [
    "ConversionReport",
    "ConvertOptions",
    "ConverterError",
    "ExportError",
    "GraphOptions",
    "InvalidOptionError",
    "ModelImportError",
    "PassError",
    "QuantizeOptions",
    "SourceOptions",
    "UnsupportedOpsError",
    "VerificationError",
    "VerifyOptions",
    "convert",
    "convert_model",
    "converter_version",
    "optimize_model",
]
