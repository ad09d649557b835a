"""The int8 scheme: how a float range or a weight becomes integers and quantization parameters.

Follows the TFLite int8 quantization specification
(tensorflow/lite/g3doc/performance/quantization_spec.md) with ONNX's affine mapping
(https://onnx.ai/onnx/operators/onnx__QuantizeLinear.html): ``real = scale * (q - zero_point)``,
``q = saturate(round_half_even(real / scale) + zero_point)``.

- Activations: per tensor, asymmetric. The range always contains 0, so that 0.0 (padding, ReLU)
  is exact. uint8 [0, 255] by default (x86: ONNX Runtime's U8S8 kernels), int8 [-128, 127] on
  request.
- Weights: int8, symmetric (zero point 0), narrow range [-127, 127], one scale per output channel
  (``per_channel``) or per tensor.
- Bias: int32, zero point 0, ``scale = input_scale * weight_scale[c]``, so the integer kernel adds
  it to the int32 accumulator directly. Where the bias would not fit int32 at that scale (a
  near-constant input, range 1e-9, and a class-prior bias of -11.5) the channel's weight scale is
  raised until it does (:func:`bias_fitting_scale`), as TFLite's and ONNX Runtime's quantizers do.
"""

from __future__ import annotations

import numpy as np

from lite.format import ir as lite_ir

_TINY = 1e-12
_INT32 = np.iinfo(np.int32)


def activation_bounds(activation_type: str) -> tuple[int, int]:
    return (0, 255) if activation_type == "uint8" else (-128, 127)


def activation_params(low: float, high: float, activation_type: str = "uint8") -> lite_ir.QuantParams:
    """Per-tensor asymmetric parameters covering [low, high] ∪ {0}."""
    qmin, qmax = activation_bounds(activation_type)
    low, high = min(float(low), 0.0), max(float(high), 0.0)
    if not np.isfinite(low) or not np.isfinite(high):
        raise ValueError(f"range [{low}, {high}] is not finite")
    span = high - low
    scale = np.float32(span / (qmax - qmin)) if span > _TINY else np.float32(1.0)
    if scale <= 0 or not np.isfinite(scale):
        scale = np.float32(1.0)
    zero_point = int(np.clip(np.rint(qmin - low / float(scale)), qmin, qmax))
    return lite_ir.QuantParams(
        scale=np.array([scale], np.float32),
        zero_point=np.array([zero_point]),
        axis=None,
        bits=8,
        signed=activation_type == "int8",
        symmetric=False,
    )


def quantize_weight(weight: np.ndarray, axis: int | None,
                    scale: np.ndarray | None = None) -> tuple[np.ndarray, lite_ir.QuantParams]:
    """Symmetric int8 with narrow range; one scale per index of ``axis`` (None: per tensor).

    A channel of zeros gets scale 1 (any positive scale represents it exactly). ``scale``: use
    these scales instead of the weights' peaks (raised so a bias fits, :func:`bias_fitting_scale`).
    """
    weight = np.asarray(weight, dtype=np.float32)
    if axis is not None:
        axis = axis % weight.ndim
    if scale is None:
        scale = weight_scale(weight, axis)
    scale_b = scale if axis is None else scale.reshape([-1 if a == axis else 1 for a in range(weight.ndim)])
    values = np.clip(np.rint(weight / scale_b), -127, 127).astype(np.int8)
    params = lite_ir.QuantParams(scale=scale, zero_point=np.zeros(scale.size, np.int64), axis=axis,
                                 bits=8, signed=True, symmetric=True)
    return values, params


def weight_scale(weight: np.ndarray, axis: int | None) -> np.ndarray:
    """Peak / 127 per index of ``axis`` (None: one for the tensor); 1 for a channel of zeros."""
    if axis is None:
        peak = np.array([np.max(np.abs(weight))]) if weight.size else np.zeros(1)
    else:
        reduce = tuple(a for a in range(weight.ndim) if a != axis)
        peak = np.max(np.abs(weight), axis=reduce) if weight.size else np.zeros(weight.shape[axis])
    scale = (peak / 127.0).astype(np.float32)
    scale[scale <= _TINY] = 1.0
    return scale


def bias_fitting_scale(bias: np.ndarray, input_scale: float, weight_scale: np.ndarray) -> np.ndarray:
    """``weight_scale``, raised where ``bias / (input_scale * weight_scale)`` would not fit int32.

    Clipping that bias would move it: on a detector's class head (input range 1e-9, bias -11.5)
    it became -0.0016 and every score 0.5. Raising the weight scale instead costs the weights'
    contribution at most half a weight step times the input's range, per term: about
    128 · |bias| / 2^31 each, far below the bias it keeps exact. (TFLite and ONNX Runtime's
    quantizers do the same.) One scale per tensor fits the largest bias.
    """
    bias = np.abs(np.asarray(bias, np.float64).reshape(-1))
    scale = np.asarray(weight_scale, np.float32).reshape(-1)
    if scale.size == 1:
        bias = bias.max(initial=0.0, keepdims=True)
    needed = 1.0001 * bias / (float(_INT32.max) * max(float(input_scale), _TINY))  # margin for float32 rounding
    return np.maximum(scale, needed).astype(np.float32)


def quantize_bias(bias: np.ndarray, input_scale: float, weight_scale: np.ndarray) -> tuple[np.ndarray, lite_ir.QuantParams]:
    """int32 bias with ``scale = input_scale * weight_scale`` (float32, as the kernels compute it).

    Per tensor (axis None) when the weights are: below opset 13 DequantizeLinear has no ``axis``.
    """
    bias = np.asarray(bias, dtype=np.float32).reshape(-1)
    scale = (np.float32(input_scale) * np.asarray(weight_scale, np.float32).reshape(-1)).astype(np.float32)
    scale[scale <= 0] = np.float32(1e-30)
    values = np.clip(np.rint(bias.astype(np.float64) / scale.astype(np.float64)), _INT32.min, _INT32.max)
    params = lite_ir.QuantParams(scale=scale, zero_point=np.zeros(scale.size, np.int64),
                                 axis=0 if scale.size > 1 else None, bits=32, signed=True, symmetric=True)
    return values.astype(np.int32), params


def step(params: lite_ir.QuantParams) -> float:
    """The largest quantization step of ``params`` (one unit of q in real terms)."""
    return float(np.max(params.scale))
