"""Quantization options, validated in one place (``lite convert --quant ...``, ``convert(quant=...)``).

Modes (see docs/quantization.md):

``int8``          static post-training quantization: calibrated activations and weights in int8,
                  written as QuantizeLinear/DequantizeLinear (QDQ) pairs that ONNX Runtime fuses
                  into integer kernels.
``int8-dynamic``  MatMul/Gemm weights int8; activations quantized at run time
                  (DynamicQuantizeLinear + MatMulInteger); no calibration data.
``int8-weight``   weights stored int8 and dequantized when the model runs; activations float.
``fp16``          weights stored float16 (the converter's ``store_weights_fp16`` pass).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from converter.quantize.errors import QuantizationOptionError

MODES = ("int8", "int8-dynamic", "int8-weight", "fp16")
CALIBRATION_METHODS = ("minmax", "percentile", "entropy")
ACTIVATION_TYPES = ("uint8", "int8")


@dataclass
class QuantConfig:
    """Every quantization option. ``activation_type`` uint8 is the default on x86: ONNX Runtime's
    U8S8 kernels were measured 3x faster than S8S8 for ResNet-18 on our CPUs."""

    mode: str = "int8"
    calibration_method: str = "minmax"
    calibration_size: int = 256  # samples read from the calibration data at most
    per_channel: bool = True
    activation_type: str = "uint8"
    percentile: float = 99.99  # the percentile method keeps this share of each tensor's values
    max_accuracy_drop: float | None = None  # percentage points; needs evaluation data
    eval_size: int = 1000  # evaluation samples read at most
    sensitivity_size: int = 256  # samples of the evaluation data used for per-layer sensitivity
    exclude: tuple[str, ...] = ()  # node names kept in float by the user
    batch_size: int = 16  # calibration/evaluation batch, when the model's batch is not fixed
    quantize_outputs: bool = False  # also quantize float graph outputs of MatMul/Gemm
    # Every calibration/evaluation array is one sample, fed as given: for inputs without a batch
    # axis (a [time, features] sequence), whose rows are no samples.
    whole_samples: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise QuantizationOptionError(f"quant mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.calibration_method not in CALIBRATION_METHODS:
            raise QuantizationOptionError(
                f"calibration method {self.calibration_method!r} is not one of {', '.join(CALIBRATION_METHODS)}"
            )
        if self.activation_type not in ACTIVATION_TYPES:
            raise QuantizationOptionError(f"activation type {self.activation_type!r} is not uint8 or int8")
        for name in ("calibration_size", "eval_size", "sensitivity_size", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise QuantizationOptionError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        if not 50.0 < self.percentile <= 100.0:
            raise QuantizationOptionError(f"percentile must be in (50, 100], got {self.percentile}")
        if self.max_accuracy_drop is not None and self.max_accuracy_drop < 0:
            raise QuantizationOptionError(f"max accuracy drop must be >= 0 percentage points, got {self.max_accuracy_drop}")
        self.exclude = tuple(self.exclude)

    @property
    def needs_calibration(self) -> bool:
        return self.mode == "int8"

    def to_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "calibration_method": self.calibration_method,
            "calibration_size": self.calibration_size,
            "per_channel": self.per_channel,
            "activation_type": self.activation_type,
            "max_accuracy_drop": self.max_accuracy_drop,
            "exclude": list(self.exclude),
            "whole_samples": self.whole_samples,
        }
