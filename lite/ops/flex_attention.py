"""FlexAttention (ai.onnx.preview): scaled dot-product attention with score and probability hooks.

https://onnx.ai/onnx/operators/onnx_aionnx_preview_FlexAttention.html

On rank-4 ``(batch, heads, sequence, size)`` Q, K, V::

    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T      scale defaults to 1/sqrt(head_size)
    scores = score_mod(scores)                            GRAPH attribute, optional
    probs = softmax(scores)
    probs = prob_mod(probs)                               GRAPH attribute, optional
    Y = probs @ V

With fewer KV heads than query heads, query head ``h`` uses KV head ``h // group``. Scores,
softmax and the final product run in ``softmax_precision`` (float32 unless the inputs are
double); the hooks see tensors of that type.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._float_compute import FloatCompute, round_to_precision
from lite.ops.registry import kernel


def _apply_hook(hook, values: np.ndarray, name: str) -> np.ndarray:
    if hook is None:
        return values
    results = hook(values)
    if len(results) != 1 or np.shape(results[0]) != values.shape:
        raise KernelError(f"FlexAttention: {name} must return one tensor of shape {values.shape}")
    return np.asarray(results[0]).astype(values.dtype, copy=False)


@kernel("FlexAttention", since=1, domain="ai.onnx.preview")
def FlexAttention(Q, K, V, *, prob_mod=None, scale=None, score_mod=None, softmax_precision=None):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    if not Q.ndim == K.ndim == V.ndim == 4:
        raise KernelError(f"FlexAttention: Q, K and V must be rank 4, got {Q.shape}, {K.shape}, {V.shape}")
    q_heads, kv_heads = Q.shape[1], K.shape[1]
    if V.shape[1] != kv_heads or V.shape[2] != K.shape[2] or K.shape[3] != Q.shape[3] or q_heads % kv_heads:
        raise KernelError(f"FlexAttention: incompatible shapes Q {Q.shape}, K {K.shape}, V {V.shape}")
    precision = FloatCompute("FlexAttention", Q.dtype)
    group = q_heads // kv_heads
    key = np.repeat(precision.widen(K), group, axis=1)
    value = np.repeat(precision.widen(V), group, axis=1)
    if scale is None:
        scale = 1.0 / np.sqrt(Q.shape[3])
    root_scale = precision.compute.type(np.sqrt(scale))
    scores = np.matmul(precision.widen(Q) * root_scale, np.swapaxes(key * root_scale, -1, -2))
    scores = round_to_precision(scores, softmax_precision, "FlexAttention")
    scores = _apply_hook(score_mod, scores, "score_mod")
    top = np.max(scores, axis=-1, keepdims=True)
    exponent = np.exp(scores - np.where(np.isneginf(top), 0, top))
    probs = exponent / np.sum(exponent, axis=-1, keepdims=True)
    probs = _apply_hook(prob_mod, probs, "prob_mod")
    return precision.narrow(np.matmul(probs, value.astype(probs.dtype, copy=False)))
