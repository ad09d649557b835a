"""Batch normalization with MindSpore's moving-statistics convention.

``moving = momentum * moving + (1 - momentum) * batch`` (``nn.BatchNorm2d`` docs; the layer
hands ``1 - momentum`` to ``ops.BatchNorm``). Training normalizes with the biased batch
variance and folds the unbiased one into ``moving_variance``, as cuDNN-backed kernels do.
"""

from __future__ import annotations

import numpy as np

from train import _trace
from train.autograd import make_result
from train.errors import ShapeError
from train.tensor import Parameter, Tensor


def batch_norm(
    x: Tensor,
    gamma: Tensor,
    beta: Tensor,
    moving_mean: Parameter,
    moving_variance: Parameter,
    training: bool,
    momentum: float = 0.9,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize (N, C) or (N, C, H, W) per channel C."""
    if x.ndim not in (2, 4) or x.shape[1] != gamma.shape[0]:
        raise ShapeError(
            f"batch_norm: expected (N, {gamma.shape[0]}) or (N, {gamma.shape[0]}, H, W), got {x.shape}"
        )
    axes = (0,) if x.ndim == 2 else (0, 2, 3)
    view = (1, -1) if x.ndim == 2 else (1, -1, 1, 1)
    count = x.size // x.shape[1]
    if training:
        mean = x.data.mean(axis=axes)
        centered = x.data - mean.reshape(view)
        var = np.mean(centered * centered, axis=axes)
        unbiased = var * (count / max(count - 1, 1))
        moving_mean.data = (momentum * moving_mean.data + (1 - momentum) * mean).astype(moving_mean.dtype)
        moving_variance.data = (momentum * moving_variance.data + (1 - momentum) * unbiased).astype(
            moving_variance.dtype
        )
    else:
        mean = moving_mean.data
        var = moving_variance.data
        centered = x.data - mean.reshape(view)
    inv_std = (1.0 / np.sqrt(var + eps)).astype(x.dtype)
    x_hat = centered * inv_std.reshape(view)
    result = x_hat * gamma.data.reshape(view) + beta.data.reshape(view)

    def backward(grad: np.ndarray) -> tuple:
        d_gamma = (grad * x_hat).sum(axis=axes) if gamma.requires_grad else None
        d_beta = grad.sum(axis=axes) if beta.requires_grad else None
        d_x = None
        if x.requires_grad:
            scale = (gamma.data * inv_std).reshape(view)
            if training:
                sum_g = grad.sum(axis=axes).reshape(view)
                sum_gx = (d_gamma if d_gamma is not None else (grad * x_hat).sum(axis=axes)).reshape(view)
                d_x = scale * (grad - (sum_g + x_hat * sum_gx) / count)
            else:
                d_x = grad * scale
        return (d_x, d_gamma, d_beta)

    out = make_result(result, (x, gamma, beta), backward)
    _trace.record(
        "BatchNormalization",
        [x, gamma, beta, moving_mean, moving_variance],
        out,
        epsilon=float(eps),
        momentum=float(momentum),
    )
    return out
