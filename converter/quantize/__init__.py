"""Post-training quantization of .lite models: int8 static (QDQ), int8 dynamic, int8 weights, fp16.

Entry points: :func:`quantize_model` (a lowered .lite in-memory model in, quantized model and a
:class:`QuantizationReport` out), used by ``converter.convert(quant=...)`` and
``lite convert --quant``. See docs/quantization.md.
"""
