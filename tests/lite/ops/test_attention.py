"""Attention-family kernels against onnx.reference: Attention, FlexAttention, LinearAttention,
CausalConvWithState, RMSNormalization, RotaryEmbedding, SwiGLU, TensorScatter."""

from __future__ import annotations

import numpy as np
import pytest

from lite.format.dtypes import bfloat16_to_float32, float32_to_bfloat16
from tests.lite.ops._checks_domains import check, normal, rng, run_kernel


def attention_inputs(batch=2, q_heads=4, kv_heads=4, q_len=3, kv_len=5, head=8, v_head=8, four_d=True):
    if four_d:
        return [normal(batch, q_heads, q_len, head), normal(batch, kv_heads, kv_len, head),
                normal(batch, kv_heads, kv_len, v_head)]
    return [normal(batch, q_len, q_heads * head), normal(batch, kv_len, kv_heads * head),
            normal(batch, kv_len, kv_heads * v_head)]


@pytest.mark.parametrize("opset", [23, 24, 25])
@pytest.mark.parametrize("attributes", [
    {},
    {"is_causal": 1},
    {"scale": 0.2},
    {"softcap": 2.0},
    {"qk_matmul_output_mode": 1, "softcap": 1.5},
    {"qk_matmul_output_mode": 2, "is_causal": 1},
    {"qk_matmul_output_mode": 3},
    {"softmax_precision": 11},
])
def test_attention_4d(opset, attributes):
    # onnx.reference returns the soft-capped scores for mode 0; the spec says mode 0 is the raw
    # QK product (test_attention_debug_output_mode_0_is_raw), so that output is not compared then.
    raw_with_softcap = attributes.get("softcap") and not attributes.get("qk_matmul_output_mode")
    check("Attention", attention_inputs(), attributes, opset=opset, output_count=3 if raw_with_softcap else 4)


def test_attention_debug_output_mode_0_is_raw():
    inputs = attention_inputs()
    *_, raw = run_kernel("Attention", inputs, {"softcap": 0.5}, opset=23, output_count=4)
    expected = inputs[0] @ np.swapaxes(inputs[1], -1, -2) / np.sqrt(inputs[0].shape[-1])
    np.testing.assert_allclose(raw, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_attention_3d_grouped_heads(kv_heads):
    inputs = attention_inputs(q_heads=4, kv_heads=kv_heads, v_head=6, four_d=False)
    check("Attention", inputs, {"q_num_heads": 4, "kv_num_heads": kv_heads, "is_causal": 1}, opset=23,
          output_count=4)


@pytest.mark.parametrize("mask", [
    rng.random((3, 5)) > 0.3,
    rng.random((2, 4, 3, 5)) > 0.3,
    normal(3, 5),
    normal(4, 3, 5),
    normal(3, 4),  # shorter than the keys: padded with -inf
])
@pytest.mark.parametrize("is_causal", [0, 1])
def test_attention_masks(mask, is_causal):
    check("Attention", attention_inputs() + [mask], {"is_causal": is_causal}, opset=23, output_count=4)


def test_attention_past_and_present():
    inputs = attention_inputs(kv_heads=2, q_len=2, kv_len=3) + [None, normal(2, 2, 4, 8), normal(2, 2, 4, 8)]
    check("Attention", inputs, {"is_causal": 1, "qk_matmul_output_mode": 3}, opset=23, output_count=4)


def test_attention_fully_masked_row_is_zero():
    mask = np.array([[True, True, False, False, False], [False] * 5, [True] * 5])
    y, _, _, probabilities = run_kernel("Attention", attention_inputs() + [mask],
                                        {"qk_matmul_output_mode": 3}, opset=24, output_count=4)
    assert np.all(y[:, :, 1] == 0) and np.all(probabilities[:, :, 1] == 0)
    assert not np.isnan(y).any()


@pytest.mark.parametrize("attributes", [{}, {"is_causal": 1}])
def test_attention_nonpad_kv_seqlen(attributes):
    inputs = attention_inputs(q_len=2, kv_len=6) + [None, None, None, np.array([4, 6], dtype=np.int64)]
    check("Attention", inputs, attributes, opset=24, output_count=1)


@pytest.mark.parametrize("window", [(2, 0), (1, 1), (-1, 0), (0, -1)])
def test_attention_sliding_window(window):
    left, right = window
    check("Attention", attention_inputs(q_len=4, kv_len=6),
          {"left_window_size": left, "right_window_size": right}, opset=25)


def test_attention_float16_rounds_back():
    inputs = [x.astype(np.float16) for x in attention_inputs()]
    check("Attention", inputs, {"is_causal": 1}, opset=23, rtol=2e-3, atol=2e-3)


def test_attention_bfloat16_words():
    # The numpy engine holds bfloat16 as uint16 words: compare with the float32 result, rounded.
    inputs = attention_inputs()
    words = [float32_to_bfloat16(x) for x in inputs]
    (y,) = run_kernel("Attention", words, {"is_causal": 1}, opset=23)
    (expected,) = run_kernel("Attention", [bfloat16_to_float32(w) for w in words], {"is_causal": 1}, opset=23)
    assert y.dtype == np.uint16
    np.testing.assert_allclose(bfloat16_to_float32(y), expected, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("attributes", [{}, {"scale": 0.3}])
@pytest.mark.parametrize("kv_heads", [4, 2])
def test_flex_attention(attributes, kv_heads):
    inputs = attention_inputs(kv_heads=kv_heads, v_head=5)
    check("FlexAttention", inputs, attributes, opset=1, domain="ai.onnx.preview")


def test_flex_attention_hooks():
    def score_mod(scores):
        return [scores + 1.0]

    def prob_mod(probs):
        return [probs * 2.0]

    inputs = attention_inputs()
    (plain,) = run_kernel("FlexAttention", inputs, {}, opset=1, domain="ai.onnx.preview")
    (hooked,) = run_kernel("FlexAttention", inputs, {"score_mod": score_mod, "prob_mod": prob_mod}, opset=1,
                           domain="ai.onnx.preview")
    # A constant added to every score leaves the softmax unchanged; doubling the probabilities doubles Y.
    np.testing.assert_allclose(hooked, 2 * plain, rtol=1e-5, atol=1e-6)


def linear_attention_inputs(rule, q_heads=4, kv_heads=2, steps=5, key=4, value=3, per_head_decay=False,
                            past=False):
    batch = 2
    query = normal(batch, steps, q_heads * key)
    keys = normal(batch, steps, kv_heads * key)
    keys /= np.linalg.norm(keys.reshape(batch, steps, kv_heads, key), axis=-1).repeat(key, axis=-1)
    inputs = [query, keys, normal(batch, steps, kv_heads * value),
              normal(batch, kv_heads, key, value) if past else None]
    decay_width = kv_heads if per_head_decay else kv_heads * key
    decay = -rng.random((batch, steps, decay_width)).astype(np.float32) if "gated" in rule else None
    beta = rng.random((batch, steps, kv_heads)).astype(np.float32) if "delta" in rule else None
    return inputs + [decay, beta]


@pytest.mark.parametrize("rule", ["linear", "gated", "delta", "gated_delta"])
@pytest.mark.parametrize("past", [False, True])
def test_linear_attention(rule, past):
    inputs = linear_attention_inputs(rule, past=past)
    check("LinearAttention", inputs, {"q_num_heads": 4, "kv_num_heads": 2, "update_rule": rule}, opset=27,
          output_count=2, rtol=1e-4, atol=1e-5)


def test_linear_attention_per_head_decay_and_scale():
    inputs = linear_attention_inputs("gated_delta", per_head_decay=True)
    check("LinearAttention", inputs, {"q_num_heads": 4, "kv_num_heads": 2, "scale": 0.25}, opset=27,
          output_count=2, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["none", "silu"])
@pytest.mark.parametrize("with_bias,with_past", [(False, False), (True, True), (False, True)])
@pytest.mark.parametrize("length", [1, 6])
def test_causal_conv_with_state(activation, with_bias, with_past, length):
    inputs = [normal(2, 3, length), normal(3, 1, 4), normal(3) if with_bias else None,
              normal(2, 3, 3) if with_past else None]
    check("CausalConvWithState", inputs, {"activation": activation}, opset=27, output_count=2)


@pytest.mark.parametrize("axis", [-1, 1])
@pytest.mark.parametrize("scale_shape", [(6,), (1, 6)])
def test_rms_normalization(axis, scale_shape):
    shape = (2, 4, 6)
    scale = normal(*shape[axis:]) if axis == 1 else normal(*scale_shape)
    check("RMSNormalization", [normal(*shape), scale], {"axis": axis, "epsilon": 1e-3}, opset=23)


@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_embedding_dim", [0, 4])
@pytest.mark.parametrize("with_positions", [False, True])
def test_rotary_embedding_4d(interleaved, rotary_embedding_dim, with_positions):
    batch, heads, length, head = 2, 3, 5, 8
    half = (rotary_embedding_dim or head) // 2
    if with_positions:
        cache_shape, extra = (10, half), [rng.integers(0, 10, (batch, length)).astype(np.int64)]
    else:
        cache_shape, extra = (batch, length, half), []
    inputs = [normal(batch, heads, length, head), normal(*cache_shape), normal(*cache_shape)] + extra
    check("RotaryEmbedding", inputs, {"interleaved": interleaved, "rotary_embedding_dim": rotary_embedding_dim},
          opset=23)


def test_rotary_embedding_3d():
    inputs = [normal(2, 5, 3 * 8), normal(2, 5, 4), normal(2, 5, 4)]
    check("RotaryEmbedding", inputs, {"num_heads": 3}, opset=23)


@pytest.mark.parametrize("alpha", [1.0, 1.702])
def test_swiglu(alpha):
    a = normal(3, 7) * 10
    check("SwiGLU", [a, normal(3, 7)], {"alpha": alpha}, opset=28)


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("axis", [-2, 2])
def test_tensor_scatter(mode, axis):
    past = normal(2, 3, 6, 4)
    update = normal(2, 3, 2, 4)
    indices = np.array([1, 5 if mode == "circular" else 4], dtype=np.int64)
    check("TensorScatter", [past, update, indices], {"mode": mode, "axis": axis}, opset=24)
    check("TensorScatter", [past, update], {"mode": mode, "axis": axis}, opset=24)
