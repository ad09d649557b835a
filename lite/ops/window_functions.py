"""HannWindow, HammingWindow, BlackmanWindow: the classic tapering windows of length ``size``.

https://onnx.ai/onnx/operators/onnx__HannWindow.html
https://onnx.ai/onnx/operators/onnx__HammingWindow.html
https://onnx.ai/onnx/operators/onnx__BlackmanWindow.html

With ``N = size`` when ``periodic`` (the first ``size`` points of a window of ``size + 1``)
and ``N = size - 1`` when symmetric, for ``n`` in ``[0, size)``:

- Hann: ``0.5 - 0.5 cos(2 pi n / N)``
- Hamming: ``a0 - (1 - a0) cos(2 pi n / N)``, ``a0 = 25/46`` (the exact Hamming coefficient)
- Blackman: ``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``

Values are computed in double and cast to ``output_datatype`` (default 1, float).
"""

from __future__ import annotations

import numpy as np

from lite.ops._helpers import numpy_dtype, scalar_int
from lite.ops.registry import kernel


def _phase(op_type: str, size, periodic: int) -> np.ndarray:
    """``2 pi n / N`` for each of the ``size`` points."""
    count = scalar_int(op_type, "size", size)
    period = count if periodic else count - 1
    return 2 * np.pi * np.arange(count, dtype=np.float64) / max(period, 1)


@kernel("HannWindow", since=17)
def HannWindow(size, *, output_datatype=1, periodic=1):
    phase = _phase("HannWindow", size, periodic)
    return (0.5 - 0.5 * np.cos(phase)).astype(numpy_dtype("HannWindow", output_datatype))


@kernel("HammingWindow", since=17)
def HammingWindow(size, *, output_datatype=1, periodic=1):
    alpha = 25.0 / 46.0
    phase = _phase("HammingWindow", size, periodic)
    return (alpha - (1 - alpha) * np.cos(phase)).astype(numpy_dtype("HammingWindow", output_datatype))


@kernel("BlackmanWindow", since=17)
def BlackmanWindow(size, *, output_datatype=1, periodic=1):
    phase = _phase("BlackmanWindow", size, periodic)
    window = 0.42 - 0.5 * np.cos(phase) + 0.08 * np.cos(2 * phase)
    return window.astype(numpy_dtype("BlackmanWindow", output_datatype))
