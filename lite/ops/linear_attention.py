"""LinearAttention: recurrent (linear, gated, delta, gated delta) attention over a state matrix.

https://onnx.ai/onnx/operators/onnx__LinearAttention.html

Per KV head the state ``S`` is a ``(d_k, d_v)`` matrix (``past_state``, else zeros). For each
token ``t``, with decay ``g_t`` (log space) and update rate ``beta_t``::

    linear:       S = S + k_t v_t^T
    gated:        S = exp(g_t) S + k_t v_t^T
    delta:        S = S + beta_t k_t (v_t - S^T k_t)^T
    gated_delta:  S = exp(g_t) S + beta_t k_t (v_t - exp(g_t) S^T k_t)^T
    o_t = scale * S^T q_t

Q, K, V, decay and beta are packed ``(B, T, heads * dim)``; decay is per key dimension
``(B, T, H_kv * d_k)`` or per head ``(B, T, H_kv)``, beta ``(B, T, H_kv)`` or ``(B, T, 1)``. With
fewer KV heads than query heads, each KV head's state serves ``H_q / H_kv`` consecutive query
heads. ``chunk_size`` only tunes chunked implementations; this one runs the recurrence token by
token in float32. ``present_state`` has past_state's type (query's when absent).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._float_compute import FloatCompute
from lite.ops.registry import kernel

_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads(value: np.ndarray, heads: int, name: str) -> np.ndarray:
    """(B, T, heads*dim) -> (B, T, heads, dim)."""
    if value.ndim != 3 or value.shape[2] % heads:
        raise KernelError(
            f"LinearAttention: {name} must be (B, T, {heads} * dim), got shape {value.shape}"
        )
    return value.reshape(value.shape[0], value.shape[1], heads, value.shape[2] // heads)


def _check_gates(update_rule: str, decay, beta) -> tuple[bool, bool]:
    if update_rule not in _RULES:
        raise KernelError(f"LinearAttention: update_rule must be one of {_RULES}, got {update_rule!r}")
    gated = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gated != (decay is not None):
        raise KernelError(f"LinearAttention: update_rule {update_rule!r} {'needs' if gated else 'takes no'} decay")
    if delta != (beta is not None):
        raise KernelError(f"LinearAttention: update_rule {update_rule!r} {'needs' if delta else 'takes no'} beta")
    return gated, delta


@kernel("LinearAttention", since=27)
def LinearAttention(query, key, value, past_state=None, decay=None, beta=None, *, chunk_size=64,
                    kv_num_heads=None, q_num_heads=None, scale=0.0, update_rule="gated_delta"):
    if not q_num_heads or not kv_num_heads or q_num_heads % kv_num_heads:
        raise KernelError(
            f"LinearAttention: q_num_heads ({q_num_heads}) must be a positive multiple of kv_num_heads ({kv_num_heads})"
        )
    gated, delta = _check_gates(update_rule, decay, beta)
    precision = FloatCompute("LinearAttention", np.asarray(query).dtype)
    q = _heads(precision.widen(query), q_num_heads, "query")  # (B, T, Hq, dk)
    k = _heads(precision.widen(key), kv_num_heads, "key")  # (B, T, Hkv, dk)
    v = _heads(precision.widen(value), kv_num_heads, "value")  # (B, T, Hkv, dv)
    batch, steps, _, key_size = k.shape
    value_size = v.shape[3]
    if decay is not None:
        decay = precision.widen(decay)
        width = decay.shape[-1] if decay.ndim == 3 else -1
        if width not in (kv_num_heads, kv_num_heads * key_size):
            raise KernelError(f"LinearAttention: decay must be (B, T, H_kv) or (B, T, H_kv * d_k), got {decay.shape}")
        # (B, T, Hkv, dk or 1): scales the rows of each head's state.
        decay = decay.reshape(batch, steps, kv_num_heads, -1)
    if beta is not None:
        beta = precision.widen(beta)
        if beta.ndim != 3 or beta.shape[-1] not in (kv_num_heads, 1):
            raise KernelError(f"LinearAttention: beta must be (B, T, H_kv) or (B, T, 1), got {np.shape(beta)}")
    state_dtype = np.asarray(past_state if past_state is not None else query).dtype
    state_shape = (batch, kv_num_heads, key_size, value_size)
    if past_state is None:
        state = np.zeros(state_shape, dtype=precision.compute)
    elif tuple(np.shape(past_state)) != state_shape:
        raise KernelError(f"LinearAttention: past_state must have shape {state_shape}, got {np.shape(past_state)}")
    else:
        state = FloatCompute("LinearAttention", state_dtype).widen(past_state).astype(precision.compute)
    factor = scale if scale else 1.0 / np.sqrt(q.shape[3])
    group = q_num_heads // kv_num_heads
    output = np.empty((batch, steps, q_num_heads, value_size), dtype=precision.compute)
    for t in range(steps):
        k_t, v_t = k[:, t], v[:, t]  # (B, Hkv, dk), (B, Hkv, dv)
        if gated:
            state = state * np.exp(decay[:, t])[..., np.newaxis]
        if delta:
            # The value the state already predicts for k_t; only the error is written.
            predicted = np.einsum("bhkv,bhk->bhv", state, k_t)
            v_t = beta[:, t][..., np.newaxis] * (v_t - predicted)
        state = state + k_t[..., :, np.newaxis] * v_t[..., np.newaxis, :]
        shared = np.repeat(state, group, axis=1) if group > 1 else state
        output[:, t] = factor * np.einsum("bhk,bhkv->bhv", q[:, t], shared)
    packed = output.reshape(batch, steps, q_num_heads * value_size)
    return precision.narrow(packed), FloatCompute("LinearAttention", state_dtype).narrow(state)
