"""EmbedLayerNormalization (com.microsoft): a BERT embedding layer and its layer norm in one node.

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.EmbedLayerNormalization

::

    embedding_sum = word_embedding[input_ids] + position_embedding[position_ids]
                    (+ segment_embedding[segment_ids])
    output        = LayerNorm(embedding_sum; gamma, beta, epsilon)   over the hidden axis
    mask_index    = the number of ones in each row of ``mask`` (int32, (batch,)), 0 without a mask

``position_ids`` default to 0..S-1 for every row; given, they are (batch, S) or (1, S).
ONNX Runtime's transformer optimizer writes this node with the attention's mask as ``mask`` and
its mask_index output feeding the Attention nodes as 1-D key lengths.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel
from lite.ops.skip_layer_normalization import _layer_norm

_OP = "EmbedLayerNormalization"


def _rows(table, ids, name: str) -> np.ndarray:
    """``table[ids]``, naming an id out of range instead of numpy's IndexError."""
    table = np.asarray(table)
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise KernelError(f"{_OP}: {name} must lie in [0, {table.shape[0]}), got values "
                          f"{int(ids.min())}..{int(ids.max())}")
    return table[ids]


@kernel(_OP, since=1, domain="com.microsoft")
def EmbedLayerNormalization(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding=None,
                            gamma=None, beta=None, mask=None, position_ids=None, *, epsilon=1e-12,
                            mask_index_type=1):
    input_ids = np.asarray(input_ids)
    batch, sequence = input_ids.shape
    if position_ids is None:
        position_ids = np.arange(sequence).reshape(1, sequence)
    positions = np.broadcast_to(_rows(position_embedding, position_ids, "position_ids"),
                                (batch, sequence, np.shape(position_embedding)[-1]))
    total = _rows(word_embedding, input_ids, "input_ids").astype(np.float32) + positions
    if segment_ids is not None and segment_embedding is not None:
        total += _rows(segment_embedding, segment_ids, "segment_ids")
    y, _, _ = _layer_norm(total, gamma, beta, epsilon)
    if mask is None:
        mask_index = np.zeros(batch, np.int32)
    else:
        mask_index = np.count_nonzero(np.asarray(mask) == 1, axis=-1).astype(np.int32)
    dtype = np.asarray(word_embedding).dtype
    return y.astype(dtype, copy=False), mask_index, total.astype(dtype, copy=False)
