"""STFT: short-time Fourier transform, a DFT of each windowed frame of the signal.

https://onnx.ai/onnx/operators/onnx__STFT.html

``signal`` is ``(batch, length, 1)`` real or ``(batch, length, 2)`` complex (``(batch, length)``
is taken as real, as ONNX Runtime takes it). Frame ``f``
covers ``[f * frame_step, f * frame_step + frame_length)``; there are
``(length - frame_length) // frame_step + 1`` frames. ``frame_length`` defaults to the window's
length, else the signal's; the window defaults to all ones. The output is
``(batch, frames, bins, 2)`` with ``bins = frame_length // 2 + 1`` when ``onesided`` (real
input only), ``frame_length`` otherwise.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import scalar_int
from lite.ops.dft import as_complex, as_pairs
from lite.ops.registry import kernel


@kernel("STFT", since=17)
def STFT(signal, frame_step, window=None, frame_length=None, *, onesided=1):
    signal = np.asarray(signal)
    if signal.ndim == 2:
        # (batch, length): a real signal without its trailing axis. The spec asks for the axis;
        # ONNX Runtime accepts it absent, and onnxscript's mel-spectrogram front ends (onnx-asr's)
        # rely on that.
        signal = signal[..., np.newaxis]
    if signal.ndim != 3:
        raise KernelError(f"STFT: signal must be (batch, length, 1 or 2) or (batch, length), got shape {signal.shape}")
    values = as_complex("STFT", signal)  # (batch, length)
    length = values.shape[1]
    step = scalar_int("STFT", "frame_step", frame_step)
    if frame_length is not None:
        size = scalar_int("STFT", "frame_length", frame_length)
    else:
        size = length if window is None else np.shape(window)[0]
    real_dtype = values.real.dtype
    weights = np.ones(size, real_dtype) if window is None else np.asarray(window).astype(real_dtype).reshape(-1)
    if weights.shape[0] != size:
        raise KernelError(f"STFT: the window has {weights.shape[0]} values but frame_length is {size}")
    if step < 1 or not 0 < size <= length:
        raise KernelError(f"STFT: need frame_step >= 1 and 0 < frame_length <= {length}, got {step} and {size}")
    if onesided and signal.shape[-1] == 2:
        raise KernelError("STFT: a one-sided transform needs a real signal")
    count = (length - size) // step + 1
    starts = np.arange(count) * step
    frames = values[:, starts[:, np.newaxis] + np.arange(size)]  # (batch, frames, size)
    spectrum = np.fft.fft(frames * weights, axis=-1)
    if onesided:
        spectrum = spectrum[..., : size // 2 + 1]
    return as_pairs(spectrum, signal.dtype)
