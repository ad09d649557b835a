"""DynamicQuantizeLinear: quantize float32 to uint8 with a scale and zero point from the data.

https://onnx.ai/onnx/operators/onnx__DynamicQuantizeLinear.html

The range always includes 0: scale = (max(0, max x) - min(0, min x)) / 255,
zero_point = saturate(round(-min / scale)), y = saturate(round(x / scale) + zero_point).
"""

from __future__ import annotations

import numpy as np

from lite.ops.registry import kernel


@kernel("DynamicQuantizeLinear", since=11)
def DynamicQuantizeLinear(x):
    x = np.asarray(x, dtype=np.float32)
    high = np.float32(max(0.0, float(np.max(x)))) if x.size else np.float32(0)
    low = np.float32(min(0.0, float(np.min(x)))) if x.size else np.float32(0)
    span = np.float32(1.0) if high == low else high - low
    scale = np.float32(span / np.float32(255))
    zero_point = np.rint(np.clip(np.float32(0) - low / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zero_point, 0, 255).astype(np.uint8)
    return y, np.array(scale, dtype=np.float32), np.array(zero_point, dtype=np.uint8)
