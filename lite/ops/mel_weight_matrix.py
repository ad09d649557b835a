"""MelWeightMatrix: triangular filters mapping one-sided DFT bins to mel bands.

https://onnx.ai/onnx/operators/onnx__MelWeightMatrix.html

``mel(f) = 2595 * log10(1 + f / 700)``. The band edges are ``num_mel_bins + 2`` points spaced
by ``(mel(upper) - mel(lower)) / (num_mel_bins + 2)`` from ``mel(lower)``, mapped back to hertz
and to DFT bins ``floor((dft_length + 1) * f / sample_rate)``, as in the ONNX reference and
ONNX Runtime. Band ``i`` rises linearly from edge ``i`` to a peak of 1 at edge ``i + 1`` and
falls to 0 at edge ``i + 2``. The output is ``(dft_length // 2 + 1, num_mel_bins)``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import numpy_dtype, scalar_int
from lite.ops.registry import kernel


def _mel(hertz: float) -> float:
    return 2595.0 * np.log10(1.0 + hertz / 700.0)


def _hertz(mel: np.ndarray) -> np.ndarray:
    return 700.0 * (np.power(10.0, mel / 2595.0) - 1.0)


@kernel("MelWeightMatrix", since=17)
def MelWeightMatrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                    output_datatype=1):
    bands = scalar_int("MelWeightMatrix", "num_mel_bins", num_mel_bins)
    length = scalar_int("MelWeightMatrix", "dft_length", dft_length)
    rate = scalar_int("MelWeightMatrix", "sample_rate", sample_rate)
    lower = float(np.asarray(lower_edge_hertz).reshape(()))
    upper = float(np.asarray(upper_edge_hertz).reshape(()))
    if bands < 1 or length < 1 or rate < 1 or not 0 <= lower < upper:
        raise KernelError(
            f"MelWeightMatrix: need positive num_mel_bins, dft_length, sample_rate and 0 <= lower < upper, "
            f"got {bands}, {length}, {rate}, {lower}, {upper}"
        )
    step = (_mel(upper) - _mel(lower)) / (bands + 2)
    edges_hertz = _hertz(_mel(lower) + step * np.arange(bands + 2))
    edges = np.floor((length + 1) * edges_hertz / rate).astype(np.int64)
    spectrum_bins = length // 2 + 1
    if edges[-1] > spectrum_bins:
        raise KernelError(f"MelWeightMatrix: upper_edge_hertz {upper} lies above the Nyquist frequency")
    output = np.zeros((spectrum_bins, bands), dtype=np.float64)
    for band in range(bands):
        left, center, right = edges[band : band + 3]
        if center > left:
            rising = np.arange(left, center + 1)
            output[rising, band] = (rising - left) / (center - left)
        else:
            output[center, band] = 1.0
        if right > center:
            falling = np.arange(center, right)
            output[falling, band] = (right - falling) / (right - center)
    return output.astype(numpy_dtype("MelWeightMatrix", output_datatype))
