"""MaxRoiPool: max-pool each region of interest into a fixed ``pooled_shape`` grid.

https://onnx.ai/onnx/operators/onnx__MaxRoiPool.html

rois are ``[batch_index, x1, y1, x2, y2]`` in input coordinates times ``spatial_scale``,
rounded to whole cells (Caffe's RoIPooling); empty bins give 0.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel


@kernel("MaxRoiPool", since=1)
def MaxRoiPool(X, rois, *, pooled_shape=None, spatial_scale=1.0):
    if not pooled_shape or len(pooled_shape) != 2:
        raise UnsupportedOpError("MaxRoiPool: pooled_shape must be [height, width]")
    x = np.asarray(X)
    height, width = x.shape[2:]
    pooled_h, pooled_w = (int(v) for v in pooled_shape)
    y = np.zeros((len(rois), x.shape[1], pooled_h, pooled_w), dtype=x.dtype)
    for r, roi in enumerate(np.asarray(rois)):
        batch = int(roi[0])
        x1, y1, x2, y2 = (int(np.round(v * spatial_scale)) for v in roi[1:5])
        roi_h = max(y2 - y1 + 1, 1)
        roi_w = max(x2 - x1 + 1, 1)
        for ph in range(pooled_h):
            h0 = min(max(y1 + math.floor(ph * roi_h / pooled_h), 0), height)
            h1 = min(max(y1 + math.ceil((ph + 1) * roi_h / pooled_h), 0), height)
            for pw in range(pooled_w):
                w0 = min(max(x1 + math.floor(pw * roi_w / pooled_w), 0), width)
                w1 = min(max(x1 + math.ceil((pw + 1) * roi_w / pooled_w), 0), width)
                if h1 > h0 and w1 > w0:
                    y[r, :, ph, pw] = x[batch, :, h0:h1, w0:w1].max(axis=(1, 2))
    return y
