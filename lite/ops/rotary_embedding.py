"""RotaryEmbedding: rotate pairs of features by position-dependent angles (RoPE).

https://onnx.ai/onnx/operators/onnx__RotaryEmbedding.html

X is ``(batch, heads, sequence, head_size)`` or ``(batch, sequence, heads*head_size)`` (then
``num_heads`` splits it). The first ``rotary_embedding_dim`` features of each head (all when 0)
form pairs ``(x1, x2)`` -- the two halves, or even/odd features when ``interleaved`` -- rotated
as ``(cos*x1 - sin*x2, sin*x1 + cos*x2)``; the remaining features pass through. The caches are
``(batch, sequence, dim/2)``, or ``(max_position + 1, dim/2)`` indexed by ``position_ids``.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


def _to_heads_last(X: np.ndarray, num_heads: int) -> np.ndarray:
    """X as (batch, sequence, heads, head_size)."""
    if X.ndim == 4:
        return X.transpose(0, 2, 1, 3)
    if X.ndim != 3:
        raise KernelError(f"RotaryEmbedding: X must be 3-D or 4-D, got shape {X.shape}")
    if num_heads <= 0 or X.shape[2] % num_heads:
        raise KernelError(
            f"RotaryEmbedding: a 3-D X needs num_heads dividing its hidden size {X.shape[2]}, got {num_heads}"
        )
    return X.reshape(X.shape[0], X.shape[1], num_heads, X.shape[2] // num_heads)


@kernel("RotaryEmbedding", since=23)
def RotaryEmbedding(X, cos_cache, sin_cache, position_ids=None, *, interleaved=0,
                    num_heads=0, rotary_embedding_dim=0):
    X = np.asarray(X)
    x = _to_heads_last(X, num_heads)
    head_size = x.shape[3]
    rotated_size = rotary_embedding_dim or head_size
    if rotated_size % 2 or rotated_size > head_size:
        raise KernelError(
            f"RotaryEmbedding: rotary_embedding_dim {rotated_size} must be even and at most head_size {head_size}"
        )
    cos, sin = np.asarray(cos_cache), np.asarray(sin_cache)
    if position_ids is not None:
        positions = np.asarray(position_ids).astype(np.int64, copy=False)
        cos, sin = cos[positions], sin[positions]
    if cos.shape[-1] != rotated_size // 2 or sin.shape[-1] != rotated_size // 2:
        raise KernelError(
            f"RotaryEmbedding: the caches' last dimension must be {rotated_size // 2}, "
            f"got {cos.shape[-1]} and {sin.shape[-1]}"
        )
    # (batch, sequence, half) -> (batch, sequence, 1, half): one angle per pair, shared by heads.
    cos, sin = cos[:, :, np.newaxis, :], sin[:, :, np.newaxis, :]
    rotate = x[..., :rotated_size]
    if interleaved:
        first, second = rotate[..., 0::2], rotate[..., 1::2]
    else:
        first, second = rotate[..., : rotated_size // 2], rotate[..., rotated_size // 2 :]
    real = cos * first - sin * second
    imaginary = sin * first + cos * second
    if interleaved:
        rotated = np.stack((real, imaginary), axis=-1).reshape(rotate.shape)
    else:
        rotated = np.concatenate((real, imaginary), axis=-1)
    y = np.concatenate((rotated.astype(X.dtype, copy=False), x[..., rotated_size:]), axis=-1)
    return y.transpose(0, 2, 1, 3) if X.ndim == 4 else y.reshape(X.shape)
