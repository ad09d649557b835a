"""ONNX Runtime's fused attention (com.microsoft): Attention (the QKV projection included) and
MultiHeadAttention (projected Q, K, V).

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.Attention
https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.MultiHeadAttention

Both compute, per head, on (batch, heads, sequence, head_size) views::

    softmax(Q @ K^T * scale + mask + attention_bias) @ V  -> (batch, sequence, heads * v_head_size)

``scale`` 0 means 1/sqrt(head_size). The mask is additive, as ONNX Runtime's CPU kernels build
it: a key a mask excludes gets ``mask_filter_value`` (-10000 by default, not -inf: a row masked
whole attends its keys evenly). With ``unidirectional`` the softmax of a query runs over the keys
up to its position (past length + query index) alone, as ONNX Runtime's does: later keys get
probability 0 whatever the mask says of the earlier ones. Mask formats (Attention's ``mask_index``,
MultiHeadAttention's ``key_padding_mask``):

- (batch,): key lengths, keys at or after ``mask[b]`` excluded (EmbedLayerNormalization's output);
- (2 * batch,): end positions, then start positions; keys outside [start, end) excluded;
- (batch, 1) or (1, 1): a placeholder the optimizer writes, excluding nothing;
- (batch, total_length): 1 attends, 0 does not; (batch, sequence, total_length): per query.

``past`` (Attention: (2, batch, heads, past, head_size)) and ``past_key``/``past_value``
(MultiHeadAttention: (batch, heads, past, head_size)) go in front of K and V; the
concatenations are the ``present`` outputs.
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops.registry import kernel

_MICROSOFT = "com.microsoft"


def _split_heads(value: np.ndarray, heads: int, name: str, op_type: str) -> np.ndarray:
    """(batch, sequence, heads*size) -> (batch, heads, sequence, size)."""
    batch, sequence, hidden = value.shape
    if hidden % heads:
        raise KernelError(f"{op_type}: {name}'s hidden size {hidden} is not divisible by num_heads={heads}")
    return value.reshape(batch, sequence, heads, hidden // heads).transpose(0, 2, 1, 3)


def additive_mask(op_type: str, mask, batch: int, sequence: int, past: int, total: int, unidirectional: int,
                  mask_filter_value: float) -> np.ndarray | None:
    """The mask and causal rule as one float32 (batch or 1, 1, sequence or 1, total) addend, or None."""
    keys = np.arange(total)
    excluded = None
    if mask is not None:
        mask = np.asarray(mask)
        if mask.ndim == 1 and mask.shape[0] == batch:
            excluded = keys[None, :] >= mask[:, None]
        elif mask.ndim == 1 and mask.shape[0] == 2 * batch:
            excluded = (keys[None, :] >= mask[:batch, None]) | (keys[None, :] < mask[batch:, None])
        elif mask.ndim == 2 and mask.shape[1] == 1 and mask.shape[0] in (1, batch):
            excluded = None
        elif mask.ndim == 2 and mask.shape == (batch, total):
            excluded = mask <= 0
        elif mask.ndim == 3 and mask.shape == (batch, sequence, total):
            excluded = (mask <= 0)[:, None]
        else:
            raise UnsupportedOpError(
                f"{op_type}: a mask of shape {mask.shape} is not supported for batch {batch}, sequence "
                f"{sequence} and total length {total} (expected ({batch},), ({2 * batch},), ({batch}, 1), "
                f"({batch}, {total}) or ({batch}, {sequence}, {total})); device='cpu' runs every form")
        if excluded is not None and excluded.ndim == 2:
            excluded = excluded[:, None, None, :]
    addend = None
    filter_value = np.float32(mask_filter_value)
    if excluded is not None:
        addend = np.where(excluded, filter_value, np.float32(0))
    if unidirectional:
        later = keys[None, :] > (past + np.arange(sequence))[:, None]
        causal = np.where(later, np.float32(-np.inf), np.float32(0))[None, None]
        addend = causal if addend is None else addend + causal
    return addend


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float, addend: np.ndarray | None,
           attention_bias) -> np.ndarray:
    """softmax(q k^T * scale + addend + attention_bias) v on (batch, heads, length, size) float32
    arrays, merged to (batch, q length, heads * v size)."""
    if not scale:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scores = np.matmul(q, k.swapaxes(-1, -2))
    scores *= np.float32(scale)
    if addend is not None:
        scores += addend
    if attention_bias is not None:
        scores += np.asarray(attention_bias, np.float32)
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    y = np.matmul(scores, v)
    batch, heads, sequence, size = y.shape
    return y.transpose(0, 2, 1, 3).reshape(batch, sequence, heads * size)


@kernel("Attention", since=1, domain=_MICROSOFT)
def Attention(input, weights, bias=None, mask_index=None, past=None, attention_bias=None, past_sequence_length=None,
              *, num_heads, unidirectional=0, qkv_hidden_sizes=None, mask_filter_value=-10000.0, scale=0.0,
              do_rotary=0, rotary_embedding_dim=0, past_present_share_buffer=0, output_count=1):
    if do_rotary or past_present_share_buffer:
        raise UnsupportedOpError("Attention: do_rotary and past_present_share_buffer are not supported by the "
                                 "numpy engine; device='cpu' runs them (ONNX Runtime)")
    x = np.asarray(input)
    projected = np.matmul(x.astype(np.float32, copy=False), np.asarray(weights, np.float32))
    if bias is not None:
        projected += np.asarray(bias, np.float32)
    sizes = list(qkv_hidden_sizes) if qkv_hidden_sizes else [projected.shape[-1] // 3] * 3
    if len(sizes) != 3 or sum(sizes) != projected.shape[-1] or sizes[0] != sizes[1]:
        raise KernelError(f"Attention: qkv_hidden_sizes {sizes} do not split the weights' "
                          f"{projected.shape[-1]} columns into Q, K (of one size) and V")
    key_start, value_start = sizes[0], sizes[0] + sizes[1]
    parts = (projected[..., :key_start], projected[..., key_start:value_start], projected[..., value_start:])
    q, k, v = (_split_heads(part, num_heads, name, "Attention") for part, name in zip(parts, "QKV"))
    past_length = 0
    if past is not None:
        past = np.asarray(past, np.float32)
        past_length = past.shape[3]
        k = np.concatenate([past[0], k], axis=2)
        v = np.concatenate([past[1], v], axis=2)
    batch, sequence = x.shape[:2]
    addend = additive_mask("Attention", mask_index, batch, sequence, past_length, k.shape[2], unidirectional,
                           mask_filter_value)
    y = attend(q, k, v, scale, addend, attention_bias).astype(x.dtype, copy=False)
    if output_count == 1:
        return y
    return y, np.stack([k, v]).astype(x.dtype, copy=False)


def _mha_inputs(query, key, value, bias, num_heads: int):
    """Q, K, V as (batch, heads, length, size) float32, from the forms MultiHeadAttention takes
    on CPUs: Q with K and V already split into heads (batch, heads, L, size), which take no
    bias; or Q, K, V of (batch, length, hidden). ``bias`` (Q, K and V hidden sizes end to end) is added before
    the split."""
    query = np.asarray(query, np.float32)
    if query.ndim != 3:
        raise UnsupportedOpError(f"MultiHeadAttention: a query of shape {query.shape} (packed QKV) is not "
                                 "supported, as ONNX Runtime's CPU kernel does not support it: expected "
                                 "(batch, sequence, hidden)")
    if key is not None and np.ndim(key) == 4:
        if bias is not None:
            query = query + np.asarray(bias, np.float32)[:query.shape[-1]]
        return (_split_heads(query, num_heads, "query", "MultiHeadAttention"), np.asarray(key, np.float32),
                np.asarray(value, np.float32))
    if key is None or value is None or np.ndim(key) != 3 or np.ndim(value) != 3:
        raise UnsupportedOpError(
            f"MultiHeadAttention: key {np.shape(key) if key is not None else None} and value "
            f"{np.shape(value) if value is not None else None} are not supported (packed KV is not, as ONNX "
            "Runtime's CPU kernel does not support it): expected both (batch, length, hidden) or both "
            "(batch, heads, length, head_size)")
    parts = [query, np.asarray(key, np.float32), np.asarray(value, np.float32)]
    if bias is not None:
        bias = np.asarray(bias, np.float32)
        ends = np.cumsum([part.shape[-1] for part in parts])
        parts = [part + bias[end - part.shape[-1]:end] for part, end in zip(parts, ends)]
    return tuple(_split_heads(part, num_heads, name, "MultiHeadAttention") for part, name in zip(parts, "QKV"))


@kernel("MultiHeadAttention", since=1, domain=_MICROSOFT)
def MultiHeadAttention(query, key=None, value=None, bias=None, key_padding_mask=None, attention_bias=None,
                       past_key=None, past_value=None, past_sequence_length=None, cache_indirection=None, *,
                       num_heads, mask_filter_value=-10000.0, scale=0.0, unidirectional=0):
    if cache_indirection is not None:
        raise UnsupportedOpError("MultiHeadAttention: cache_indirection (beam search) is not supported by the "
                                 "numpy engine; device='cpu' runs it (ONNX Runtime)")
    q, k, v = _mha_inputs(query, key, value, bias, num_heads)
    past_length = 0
    if past_key is not None and past_value is not None:
        past_length = np.shape(past_key)[2]
        k = np.concatenate([np.asarray(past_key, np.float32), k], axis=2)
        v = np.concatenate([np.asarray(past_value, np.float32), v], axis=2)
    batch, sequence = q.shape[0], q.shape[2]
    addend = additive_mask("MultiHeadAttention", key_padding_mask, batch, sequence, past_length, k.shape[2],
                           unidirectional, mask_filter_value)
    dtype = np.asarray(query).dtype
    y = attend(q, k, v, scale, addend, attention_bias).astype(dtype, copy=False)
    return y, k.astype(dtype, copy=False), v.astype(dtype, copy=False)
