"""DFT: discrete Fourier transform along one axis of a real or complex signal.

https://onnx.ai/onnx/operators/onnx__DFT.html

Complex values travel as a trailing axis of size 2 (real, imaginary); a real signal has a
trailing axis of size 1. ``dft_length`` zero-pads or truncates the signal axis. ``onesided=1``
forward keeps the ``n//2 + 1`` non-redundant bins of a real signal (RFFT); ``onesided=1``
inverse reads such bins and returns the full real signal of length ``dft_length`` (default
``2 * (bins - 1)``; IRFFT). The inverse transform divides by the length. The axis is an
attribute (default 1) up to opset 19 and an optional input (default -2) from opset 20.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import scalar_int
from lite.ops.registry import kernel


def as_complex(op_type: str, signal: np.ndarray) -> np.ndarray:
    """(..., 1) real or (..., 2) real/imaginary -> complex without the trailing axis.

    float32 (and narrower) signals become complex64 so the transform runs in single precision,
    as the backend test data was produced; float64 becomes complex128.
    """
    signal = np.asarray(signal)
    if signal.ndim < 2 or signal.shape[-1] not in (1, 2):
        raise KernelError(
            f"{op_type}: the last axis must hold 1 (real) or 2 (real, imaginary) values, got shape {signal.shape}"
        )
    dtype = np.complex128 if signal.dtype == np.float64 else np.complex64
    values = signal[..., 0].astype(dtype)
    if signal.shape[-1] == 2:
        values.imag = signal[..., 1]
    return values


def as_pairs(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """complex -> (..., 2) real/imaginary of ``dtype``."""
    return np.stack((values.real, values.imag), axis=-1).astype(dtype)


def _dft(input, dft_length, axis: int, inverse: int, onesided: int) -> np.ndarray:
    input = np.asarray(input)
    rank = input.ndim
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise KernelError(f"DFT: axis {axis} is outside [-{rank}, -2] U [0, {rank - 2}] for rank {rank}")
    axis = axis % rank
    signal = as_complex("DFT", input)
    if dft_length is not None:
        length = scalar_int("DFT", "dft_length", dft_length)
    elif inverse and onesided:
        length = 2 * (signal.shape[axis] - 1)
    else:
        length = signal.shape[axis]
    if length < 1:
        raise KernelError(f"DFT: dft_length must be positive, got {length}")
    if inverse and onesided:
        real = np.fft.irfft(signal, n=length, axis=axis)
        return real[..., np.newaxis].astype(input.dtype)
    if inverse:
        return as_pairs(np.fft.ifft(signal, n=length, axis=axis), input.dtype)
    spectrum = np.fft.fft(signal, n=length, axis=axis)
    if onesided:
        spectrum = np.take(spectrum, np.arange(length // 2 + 1), axis=axis)
    return as_pairs(spectrum, input.dtype)


@kernel("DFT", since=20)
def DFT(input, dft_length=None, axis=None, *, inverse=0, onesided=0):
    chosen_axis = -2 if axis is None else scalar_int("DFT", "axis", axis)
    return _dft(input, dft_length, chosen_axis, inverse, onesided)


@kernel("DFT", since=17)
def DFT_17(input, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return _dft(input, dft_length, axis, inverse, onesided)
