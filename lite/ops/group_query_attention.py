"""GroupQueryAttention (com.microsoft): ONNX Runtime's attention for decoder LLMs with grouped KV
heads and a KV cache (onnxruntime-genai's models, its transformer optimizer's LLaMA/Mistral/Phi).

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.GroupQueryAttention

Per batch row ``b``, with ``total = seqlens_k[b] + 1`` valid keys and ``past = total - S`` of
them cached (0 on the first prompt, when S equals ``total_sequence_length``)::

    present[b] = past_key[b, :, :past] ++ K[b]     (zeros after ``total``, a buffer of
                                                    max(total_sequence_length, past buffer) rows)
    query s attends keys j <= past + s (and j > past + s - local_window_size with a window)
    softmax(Q K^T * scale (softcapped) + attention_bias) V, each query head n reading KV head
    n // (num_heads / kv_num_heads)

``do_rotary`` rotates Q and the new K first (positions ``past + s``, or ``position_ids``).
Packed QKV, smooth_softmax and head_sink are not supported here (device='cpu' runs them).
"""

from __future__ import annotations

import math

import numpy as np

from lite.errors import KernelError, UnsupportedOpError
from lite.ops.microsoft_rotary_embedding import RotaryEmbedding
from lite.ops.registry import kernel

_OP = "GroupQueryAttention"


def _heads(value: np.ndarray, heads: int) -> np.ndarray:
    batch, sequence, hidden = value.shape
    return value.reshape(batch, sequence, heads, hidden // heads).transpose(0, 2, 1, 3)


def _unsupported(what: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"{_OP}: {what} is not supported by the numpy engine; device='cpu' runs it "
                              "(ONNX Runtime)")


def _present(past, new: np.ndarray, pasts: np.ndarray, length: int) -> np.ndarray:
    """(batch, kv heads, length, size): each row's ``pasts[b]`` cached rows, then its new ones."""
    batch, heads, sequence, size = new.shape
    present = np.zeros((batch, heads, length, size), np.float32)
    for row in range(batch):
        start = int(pasts[row])
        if start:
            present[row, :, :start] = np.asarray(past, np.float32)[row, :, :start]
        present[row, :, start:start + sequence] = new[row, :, :length - start]
    return present


def _allowed(pasts: np.ndarray, lengths: np.ndarray, sequence: int, keys: int, window: int) -> np.ndarray:
    """Bool (batch, 1, sequence, keys): the keys each query attends."""
    query_position = pasts[:, None, None, None] + np.arange(sequence)[None, None, :, None]
    key = np.arange(keys)[None, None, None, :]
    allowed = (key <= query_position) & (key < lengths[:, None, None, None])
    if window > 0:
        allowed &= key > query_position - window
    return allowed


@kernel(_OP, since=1, domain="com.microsoft")
def GroupQueryAttention(query, key=None, value=None, past_key=None, past_value=None, seqlens_k=None,
                        total_sequence_length=None, cos_cache=None, sin_cache=None, position_ids=None,
                        attention_bias=None, head_sink=None, *, num_heads, kv_num_heads, scale=0.0, softcap=0.0,
                        local_window_size=-1, do_rotary=0, rotary_interleaved=0, smooth_softmax=0, qk_output=0):
    if key is None or value is None:
        raise _unsupported("packed QKV (a query without key and value)")
    if smooth_softmax or head_sink is not None or qk_output:
        raise _unsupported("smooth_softmax, head_sink or qk_output")
    if num_heads % kv_num_heads:
        raise KernelError(f"{_OP}: num_heads {num_heads} is not a multiple of kv_num_heads {kv_num_heads}")
    dtype = np.asarray(query).dtype
    q, k, v = (np.asarray(x, np.float32) for x in (query, key, value))
    batch, sequence, _ = q.shape
    lengths = np.asarray(seqlens_k).reshape(-1).astype(np.int64) + 1
    total_length = int(np.asarray(total_sequence_length).reshape(()))
    pasts = np.zeros(batch, np.int64) if sequence == total_length else lengths - sequence
    if do_rotary:
        positions = position_ids if position_ids is not None else pasts[:, None] + np.arange(sequence)
        q = RotaryEmbedding(q, positions, cos_cache, sin_cache, interleaved=rotary_interleaved, num_heads=num_heads)
        k = RotaryEmbedding(k, positions, cos_cache, sin_cache, interleaved=rotary_interleaved,
                            num_heads=kv_num_heads)
    length = max(total_length, np.shape(past_key)[2] if past_key is not None else 0)
    present_key = _present(past_key, _heads(k, kv_num_heads), pasts, length)
    present_value = _present(past_value, _heads(v, kv_num_heads), pasts, length)
    group = num_heads // kv_num_heads
    qh = _heads(q, num_heads)
    scores = np.matmul(qh, np.repeat(present_key, group, axis=1).swapaxes(-1, -2))
    scores *= np.float32(scale or 1.0 / math.sqrt(qh.shape[-1]))
    if softcap > 0:
        scores = np.float32(softcap) * np.tanh(scores / np.float32(softcap))
    if attention_bias is not None:
        bias = np.asarray(attention_bias, np.float32)
        scores[..., :bias.shape[-1]] += bias
    allowed = _allowed(pasts, lengths, sequence, length, local_window_size)
    scores = np.where(allowed, scores, np.float32(-np.inf))
    peak = np.max(scores, axis=-1, keepdims=True)
    weights = np.exp(scores - np.where(np.isfinite(peak), peak, 0))
    total = weights.sum(axis=-1, keepdims=True)
    weights /= np.where(total > 0, total, 1)
    y = np.matmul(weights, np.repeat(present_value, group, axis=1))
    y = y.transpose(0, 2, 1, 3).reshape(batch, sequence, -1)
    return y.astype(dtype, copy=False), present_key.astype(dtype, copy=False), present_value.astype(dtype, copy=False)
