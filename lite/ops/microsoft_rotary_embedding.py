"""RotaryEmbedding (com.microsoft): ONNX Runtime's RoPE, which ONNX adopted at opset 23.

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.RotaryEmbedding

The same rotation as ONNX's RotaryEmbedding (lite.ops.rotary_embedding), with the inputs in
another order (``input, position_ids, cos_cache, sin_cache``) and ``position_ids`` either
(batch, sequence) indices into the caches or a single offset: position ``offset + s`` for the
sequence's ``s``-th token, in every row (ONNX Runtime's decoding step).
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel
from lite.ops.rotary_embedding import RotaryEmbedding as onnx_rotary_embedding


@kernel("RotaryEmbedding", since=1, domain="com.microsoft")
def RotaryEmbedding(input, position_ids, cos_cache, sin_cache, *, interleaved=0, num_heads=0,
                    rotary_embedding_dim=0, scale=1.0, is_packed_batching=0):
    if is_packed_batching:
        raise UnsupportedOpError("RotaryEmbedding: is_packed_batching is not supported by the numpy engine; "
                                 "device='cpu' runs it (ONNX Runtime)")
    input = np.asarray(input)
    batch, sequence = input.shape[0], input.shape[2 if input.ndim == 4 else 1]
    positions = np.asarray(position_ids)
    if positions.size == 1:
        positions = positions.reshape(1, 1) + np.arange(sequence, dtype=positions.dtype)
    positions = np.broadcast_to(positions, (batch, sequence))
    return onnx_rotary_embedding(input, cos_cache, sin_cache, positions, interleaved=interleaved,
                                 num_heads=num_heads, rotary_embedding_dim=rotary_embedding_dim)
