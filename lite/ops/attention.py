"""Attention: scaled dot-product attention with masks, KV cache, grouped heads and soft capping.

https://onnx.ai/onnx/operators/onnx__Attention.html

The computation, on 4-D ``(batch, heads, sequence, head_size)`` views::

    Q*sqrt(scale) @ (K*sqrt(scale))^T -> softcap -> + bias -> softmax -> @ V -> Y

3-D inputs ``(batch, sequence, heads*head_size)`` are split into heads with ``q_num_heads`` /
``kv_num_heads`` and Y is merged back. ``past_key``/``past_value`` are concatenated in front of
K/V (the concatenations are ``present_key``/``present_value``). With fewer KV heads than query
heads (GQA/MQA) each KV head serves ``q_heads / kv_heads`` consecutive query heads.

The additive bias combines, each as 0 (attend) or -inf (do not):

- ``attn_mask``: a bool mask (True attends) or a float mask added as is; a last axis shorter
  than the total key length is padded with "do not attend".
- ``is_causal``: query ``i`` attends key ``j`` iff ``j <= i + offset`` (bottom-right aligned),
  ``offset`` being the past length, or ``nonpad_kv_seqlen[b] - q_len`` for an external cache.
- ``left_window_size``/``right_window_size`` (opset 25): ``p - left <= j <= p + right`` with
  ``p = offset + i``; -1 leaves a side open.
- ``nonpad_kv_seqlen`` (opset 24): keys at or after ``nonpad_kv_seqlen[b]`` are padding.

A query row whose bias is -inf everywhere attends nothing: its probabilities and its Y row are
zero, not NaN. float16 and bfloat16 (stored as uint16 words, see ``lite.format.dtypes``) are
computed in float32 and rounded back to the input type.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._float_compute import FloatCompute, round_to_precision
from lite.ops.registry import kernel

_OUTPUT_RAW, _OUTPUT_SOFTCAPPED, _OUTPUT_WITH_BIAS, _OUTPUT_SOFTMAX = 0, 1, 2, 3


def _split_heads(value: np.ndarray, heads: int | None, name: str) -> np.ndarray:
    """(batch, sequence, heads*size) -> (batch, heads, sequence, size)."""
    if heads is None or heads <= 0:
        raise KernelError(f"Attention: 3-D inputs need a positive '{name}' attribute")
    batch, sequence, hidden = value.shape
    if hidden % heads:
        raise KernelError(f"Attention: hidden size {hidden} is not divisible by {name}={heads}")
    return value.reshape(batch, sequence, heads, hidden // heads).transpose(0, 2, 1, 3)


def _allowed_by_position(q_length: int, kv_length: int, offset: np.ndarray, is_causal: int,
                         left_window_size: int, right_window_size: int) -> np.ndarray | None:
    """Bool (batch or 1, 1, q, kv): positions the causal rule and the window allow."""
    if not is_causal and left_window_size < 0 and right_window_size < 0:
        return None
    query = np.arange(q_length).reshape(1, 1, q_length, 1) + offset.reshape(-1, 1, 1, 1)
    key = np.arange(kv_length).reshape(1, 1, 1, kv_length)
    allowed = np.ones(np.broadcast_shapes(query.shape, key.shape), dtype=bool)
    if is_causal:
        allowed &= key <= query
    if left_window_size >= 0:
        allowed &= query - key <= left_window_size
    if right_window_size >= 0:
        allowed &= key - query <= right_window_size
    return allowed


def _bias(attn_mask, precision: FloatCompute, q_length: int, kv_length: int, past_length: int,
          nonpad_kv_seqlen, is_causal: int, left_window_size: int, right_window_size: int) -> np.ndarray:
    """The additive bias, broadcastable to (batch, heads, q, kv)."""
    neg_inf = precision.compute.type(-np.inf)
    zero = precision.compute.type(0)
    bias = np.zeros((q_length, kv_length), dtype=precision.compute)
    if attn_mask is not None:
        mask = np.asarray(attn_mask)
        short = kv_length - mask.shape[-1]
        if mask.dtype == np.bool_:
            if short > 0:
                mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, short)], constant_values=False)
            mask = np.where(mask, zero, neg_inf)
        else:
            mask = precision.widen(mask)
            if short > 0:
                mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, short)], constant_values=neg_inf)
        bias = bias + mask
    if nonpad_kv_seqlen is not None:
        valid = np.asarray(nonpad_kv_seqlen, dtype=np.int64).reshape(-1)
        offset = valid - q_length
        padding = np.arange(kv_length).reshape(1, kv_length) < valid.reshape(-1, 1)
        bias = bias + np.where(padding, zero, neg_inf).reshape(-1, 1, 1, kv_length)
    else:
        offset = np.array([past_length])
    allowed = _allowed_by_position(q_length, kv_length, offset, is_causal, left_window_size, right_window_size)
    if allowed is not None:
        bias = bias + np.where(allowed, zero, neg_inf)
    return bias


def _softmax_attended(logits: np.ndarray, row_masked: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; rows that attend nothing (``row_masked``) are zero."""
    top = np.max(logits, axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), 0, top)
    exponent = np.exp(logits - top)
    total = np.sum(exponent, axis=-1, keepdims=True)
    probabilities = exponent / np.where(total == 0, 1, total)
    return np.where(row_masked, 0, probabilities).astype(logits.dtype, copy=False)


def _attention(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen, *, scale, is_causal,
               q_num_heads, kv_num_heads, softmax_precision, softcap, qk_matmul_output_mode,
               left_window_size=-1, right_window_size=-1):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    if not Q.ndim == K.ndim == V.ndim or Q.ndim not in (3, 4):
        raise KernelError(f"Attention: Q, K and V must all be 3-D or all 4-D, got {Q.shape}, {K.shape}, {V.shape}")
    if (past_key is None) != (past_value is None):
        raise KernelError("Attention: past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise KernelError("Attention: nonpad_kv_seqlen cannot be combined with past_key/past_value")
    if left_window_size < -1 or right_window_size < -1:
        raise KernelError(
            f"Attention: window sizes must be -1 or nonnegative, got left={left_window_size}, right={right_window_size}"
        )
    precision = FloatCompute("Attention", Q.dtype)
    merge_heads = Q.ndim == 3
    if merge_heads:
        Q = _split_heads(Q, q_num_heads, "q_num_heads")
        K = _split_heads(K, kv_num_heads, "kv_num_heads")
        V = _split_heads(V, kv_num_heads, "kv_num_heads")
    # The caches are concatenated in the input type: present_* are exact copies.
    present_key = K if past_key is None else np.concatenate((past_key, K), axis=2)
    present_value = V if past_value is None else np.concatenate((past_value, V), axis=2)
    past_length = 0 if past_key is None else past_key.shape[2]

    q_heads, kv_heads = Q.shape[1], present_key.shape[1]
    if q_heads % kv_heads:
        raise KernelError(f"Attention: {q_heads} query heads are not a multiple of {kv_heads} key/value heads")
    query = precision.widen(Q)
    key = np.repeat(precision.widen(present_key), q_heads // kv_heads, axis=1)
    value = np.repeat(precision.widen(present_value), q_heads // kv_heads, axis=1)

    if scale is None:
        scale = 1.0 / np.sqrt(Q.shape[3])
    root_scale = precision.compute.type(np.sqrt(scale))
    scores = np.matmul(query * root_scale, np.swapaxes(key * root_scale, -1, -2))
    raw_scores = scores
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    bias = _bias(attn_mask, precision, Q.shape[2], key.shape[2], past_length, nonpad_kv_seqlen,
                 is_causal, left_window_size, right_window_size)
    biased = scores + bias
    row_masked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    probabilities = _softmax_attended(round_to_precision(biased, softmax_precision, "Attention"), row_masked)
    probabilities = probabilities.astype(precision.compute, copy=False)

    output = np.matmul(probabilities, value)
    if merge_heads:
        batch, heads, length, width = output.shape  # all four named: -1 cannot be inferred for a batch of 0
        output = output.transpose(0, 2, 1, 3).reshape(batch, length, heads * width)
    debug = {_OUTPUT_RAW: raw_scores, _OUTPUT_SOFTCAPPED: scores, _OUTPUT_WITH_BIAS: biased,
             _OUTPUT_SOFTMAX: probabilities}.get(qk_matmul_output_mode)
    if debug is None:
        raise KernelError(f"Attention: qk_matmul_output_mode must be 0, 1, 2 or 3, got {qk_matmul_output_mode}")
    debug = np.broadcast_to(debug, biased.shape)
    return precision.narrow(output), present_key, present_value, precision.narrow(np.ascontiguousarray(debug))


@kernel("Attention", since=25)
def Attention(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
              is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
              softcap=0.0, softmax_precision=None, left_window_size=-1, right_window_size=-1):
    if np.ndim(Q) == 4 and (q_num_heads is not None or kv_num_heads is not None):
        raise KernelError("Attention: q_num_heads and kv_num_heads must not be given for 4-D inputs")
    return _attention(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen, scale=scale,
                      is_causal=is_causal, q_num_heads=q_num_heads, kv_num_heads=kv_num_heads,
                      softmax_precision=softmax_precision, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode, left_window_size=left_window_size,
                      right_window_size=right_window_size)


@kernel("Attention", since=24)
def Attention_24(Q, K, V, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *,
                 is_causal=0, kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None,
                 softcap=0.0, softmax_precision=None):
    return _attention(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen, scale=scale,
                      is_causal=is_causal, q_num_heads=q_num_heads, kv_num_heads=kv_num_heads,
                      softmax_precision=softmax_precision, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode)


@kernel("Attention", since=23)
def Attention_23(Q, K, V, attn_mask=None, past_key=None, past_value=None, *, is_causal=0,
                 kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
                 softmax_precision=None):
    return _attention(Q, K, V, attn_mask, past_key, past_value, None, scale=scale,
                      is_causal=is_causal, q_num_heads=q_num_heads, kv_num_heads=kv_num_heads,
                      softmax_precision=softmax_precision, softcap=softcap,
                      qk_matmul_output_mode=qk_matmul_output_mode)
