"""MatMulNBits (com.microsoft): MatMul with a weight quantized blockwise to 2, 4 or 8 bits, as
ONNX Runtime's MatMulNBitsQuantizer writes LLM weights (``--quant`` q4 exports, onnxruntime-genai).

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.MatMulNBits

``Y = A @ W^T (+ bias)``, W of shape (N, K) stored column block by column block::

    B            uint8 (N, blocks, block_size * bits / 8): each byte holds 8/bits values, the
                 lowest bits first; blocks = ceil(K / block_size), the last block padded
    scales       (N * blocks) or (N, blocks), A's float type
    zero_points  optional: uint8 packed like B, ceil(blocks * bits / 8) bytes a column, or A's
                 float type (N, blocks); absent, 2^(bits - 1) (8 for 4 bits)
    W[n, k]      = (q[n, k] - zero_point[n, k // block_size]) * scale[n, k // block_size]

The weight is dequantized to float32 once, at load, when B, scales and zero points are
constants. ONNX Runtime computes the same product in float32 with ``accuracy_level`` 0 to 3;
with 4 it quantizes A to int8 first (on CPUs that support it), which this kernel does not:
there the two differ by A's int8 rounding. ``g_idx`` (act-order) is not supported.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops.registry import kernel

_OP = "MatMulNBits"


def _unpack(packed: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The first ``count`` ``bits``-wide values of each row of uint8 ``packed`` (lowest bits first)."""
    if bits == 8:
        return packed[..., :count]
    shifts = np.arange(0, 8, bits, dtype=np.uint8)
    values = (packed[..., None] >> shifts) & np.uint8((1 << bits) - 1)
    return values.reshape(*packed.shape[:-1], -1)[..., :count]


def dequantize(B, scales, zero_points, *, K: int, N: int, bits: int, block_size: int) -> np.ndarray:
    """W^T, float32 (K, N)."""
    if bits not in (2, 4, 8):
        raise UnsupportedOpError(f"{_OP}: bits={bits} is not supported (expected 2, 4 or 8); device='cpu' runs "
                                 "what ONNX Runtime supports")
    blocks = -(-K // block_size)
    B = np.asarray(B)
    if B.dtype != np.uint8 or B.size != N * blocks * block_size * bits // 8:
        raise KernelError(f"{_OP}: B must be uint8 of shape ({N}, {blocks}, {block_size * bits // 8}) for K={K}, "
                          f"N={N}, bits={bits}, block_size={block_size}; got {B.dtype} {B.shape}")
    q = _unpack(B.reshape(N, blocks, -1), bits, block_size).astype(np.float32)  # (N, blocks, block_size)
    scale = np.asarray(scales, np.float32).reshape(N, blocks, 1)
    if zero_points is None:
        zero = np.float32(1 << (bits - 1))
    elif np.asarray(zero_points).dtype == np.uint8:
        packed = np.asarray(zero_points).reshape(N, -1)
        zero = _unpack(packed, bits, blocks).astype(np.float32).reshape(N, blocks, 1)
    else:
        zero = np.asarray(zero_points, np.float32).reshape(N, blocks, 1)
    weight = ((q - zero) * scale).reshape(N, blocks * block_size)[:, :K]
    return np.ascontiguousarray(weight.T)


class DequantizedWeight:
    """W^T of constant B, scales and zero points (known by identity, read only)."""

    def __init__(self, B, scales, zero_points, weight: np.ndarray) -> None:
        self.sources = (B, scales, zero_points)
        self.weight = weight

    def serves(self, B, scales, zero_points) -> bool:
        return all(given is source for given, source in zip((B, scales, zero_points), self.sources))


def prepare_mat_mul_n_bits(constants, shapes, *, K, N, bits=4, block_size, **_):
    """Load-time work: the dequantized weight, when B and scales are constants (zero points too,
    or omitted)."""
    _, B, scales, zero_points, g_idx = (list(constants) + [None] * 5)[:5]
    if B is None or scales is None or g_idx is not None:
        return None
    weight = dequantize(B, scales, zero_points, K=K, N=N, bits=bits, block_size=block_size)
    weight.flags.writeable = False
    return DequantizedWeight(B, scales, zero_points, weight)


@kernel(_OP, since=1, domain="com.microsoft", prepare=prepare_mat_mul_n_bits)
def MatMulNBits(A, B, scales, zero_points=None, g_idx=None, bias=None, *, K, N, bits=4, block_size,
                accuracy_level=0, prepared=None):
    if g_idx is not None:
        raise UnsupportedOpError(f"{_OP}: g_idx (act-order) is not supported by the numpy engine; device='cpu' "
                                 "runs it (ONNX Runtime)")
    if prepared is not None and prepared.serves(B, scales, zero_points):
        weight = prepared.weight
    else:
        weight = dequantize(B, scales, zero_points, K=K, N=N, bits=bits, block_size=block_size)
    A = np.asarray(A)
    y = np.matmul(A.astype(np.float32, copy=False), weight)
    if bias is not None:
        y += np.asarray(bias, np.float32)
    return y.astype(A.dtype, copy=False)
