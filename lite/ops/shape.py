"""Shape and Size: a tensor's dimensions and element count, as int64.

Specs: https://onnx.ai/onnx/operators/onnx__Shape.html, onnx__Size.html. Shape's
``start``/``end`` (opset 15) select a range of dimensions; out-of-range values are clamped,
negative ones count from the back.
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


@kernel("Shape", since=1)
def Shape(data, *, start=0, end=None):
    # Python slicing clamps and wraps exactly as the spec describes.
    return np.array(np.shape(data)[start:end], dtype=np.int64)


@kernel("Size", since=1)
def Size(data):
    return np.asarray(np.size(data), dtype=np.int64)
