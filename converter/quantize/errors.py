"""Typed errors of quantization; every one is a :class:`converter.errors.ConverterError`.

Messages name the option, file, node or tensor involved and say what to do.
"""

from __future__ import annotations

from converter.errors import ConverterError, InvalidOptionError, VerificationError


class QuantizationOptionError(InvalidOptionError):
    """A quantization option is malformed or contradicts the model (``--quant``, ``--calib``...)."""


class CalibrationDataError(ConverterError, ValueError):
    """Calibration or evaluation data cannot be read or does not fit the model's inputs."""


class QuantizationError(ConverterError, RuntimeError):
    """The graph could not be quantized (e.g. a calibrated tensor never received a value)."""


class AccuracyBudgetError(QuantizationOptionError):
    """``max_accuracy_drop`` needs evaluation data (``--eval``) to be checked: an option error
    (the CLI exits 2 for it, as for every bad option)."""


class QuantizedModelRejectedError(VerificationError):
    """ONNX Runtime refuses to load the quantized model though it runs the float one: a defect of
    the quantization, not of the model, so the file is not written (the CLI exits 4, as for a
    failed verification)."""
