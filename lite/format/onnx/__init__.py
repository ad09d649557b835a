""".lite models as ONNX models: the one lowering, shared by every engine and tool that needs ONNX.

The ONNX Runtime engine, the OpenVINO engine and the converter's ``.onnx`` output all run or
write what :mod:`lite.format.onnx.lower` produces, so a model behaves the same through each.

- :mod:`lite.format.onnx.lower`: the lowering itself (imports onnx);
- :mod:`lite.format.onnx.graph`: graph facts the lowering and its users share without importing
  onnx (node names, the lowering's fingerprint for caches), so a warm
  start from an engine's cache never imports onnx.

This package's ``__init__`` imports nothing, for the same reason.
"""
