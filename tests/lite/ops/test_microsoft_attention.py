"""ONNX Runtime's attention ops (com.microsoft Attention, MultiHeadAttention, GroupQueryAttention and
RotaryEmbedding) against ONNX Runtime: one-node graphs, every mask form, caches and rotary."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops.registry import KERNELS
from tests.lite.ops._microsoft import LENGTHS, MICROSOFT, B, H, N, S, check, normal, padding_mask, rng

DIN = 12
MASKS = {
    "none": None,
    "lengths": LENGTHS,
    "a-row-masked-whole": np.array([5, 0], np.int32),
    "end-start": np.array([5, 3, 0, 1], np.int32),
    "placeholder": np.ones((B, 1), np.int32),
    "key-padding": padding_mask(LENGTHS, S),
    "3-D": (rng.random((B, S, S)) > 0.3).astype(np.int32),
}


@pytest.mark.parametrize("mask", list(MASKS))
@pytest.mark.parametrize("unidirectional", [0, 1], ids=["bidirectional", "causal"])
def test_attention_masks(mask, unidirectional):
    inputs = [("x", normal(B, S, DIN)), ("weights", normal(DIN, 3 * H, scale=0.3)), ("bias", normal(3 * H)),
              ("mask_index", MASKS[mask])]
    check("Attention", inputs, ["y"], constants=("weights", "bias"), num_heads=N, unidirectional=unidirectional)


def test_attention_bias_scale_and_hidden_sizes():
    inputs = [("x", normal(B, S, DIN)), ("weights", normal(DIN, 2 * H + 8, scale=0.3)), ("bias", normal(2 * H + 8)),
              ("mask_index", None), ("past", None), ("attention_bias", normal(B, N, S, S))]
    check("Attention", inputs, ["y"], constants=("weights", "bias"), num_heads=N, qkv_hidden_sizes=[H, H, 8],
          scale=0.3)


def test_attention_past_and_present():
    inputs = [("x", normal(B, S, DIN)), ("weights", normal(DIN, 3 * H, scale=0.3)), ("bias", normal(3 * H)),
              ("mask_index", padding_mask([S + 3, S + 1], S + 3)), ("past", normal(2, B, N, 3, H // N))]
    check("Attention", inputs, ["y", "present"], constants=("weights", "bias"), num_heads=N, unidirectional=1)


KEYS = 7


@pytest.mark.parametrize("mask", ["none", "lengths", "key-padding"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_multi_head_attention(mask, bias):
    masks = {"none": None, "lengths": np.array([KEYS, 4], np.int32), "key-padding": padding_mask([KEYS, 4], KEYS)}
    inputs = [("q", normal(B, S, H)), ("k", normal(B, KEYS, H)), ("v", normal(B, KEYS, H)),
              ("bias", normal(3 * H) if bias else None), ("key_padding_mask", masks[mask])]
    check("MultiHeadAttention", inputs, ["y"], constants=("bias",), num_heads=N)


def test_multi_head_attention_bias_and_scale():
    inputs = [("q", normal(B, S, H)), ("k", normal(B, KEYS, H)), ("v", normal(B, KEYS, H)), ("bias", None),
              ("key_padding_mask", None), ("attention_bias", normal(1, N, S, KEYS))]
    check("MultiHeadAttention", inputs, ["y"], num_heads=N, scale=0.2)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_multi_head_attention_keys_split_into_heads(bias):
    inputs = [("q", normal(B, S, H)), ("k", normal(B, N, KEYS, H // N)), ("v", normal(B, N, KEYS, H // N)),
              ("bias", normal(3 * H) if bias else None)]
    check("MultiHeadAttention", inputs, ["y"], num_heads=N)


@pytest.mark.parametrize("unidirectional", [0, 1], ids=["bidirectional", "causal"])
def test_multi_head_attention_past_and_present(unidirectional):
    inputs = [("q", normal(B, S, H)), ("k", normal(B, S, H)), ("v", normal(B, S, H)), ("bias", normal(3 * H)),
              ("key_padding_mask", None), ("attention_bias", None), ("past_key", normal(B, N, 3, H // N)),
              ("past_value", normal(B, N, 3, H // N))]
    check("MultiHeadAttention", inputs, ["y", "present_key", "present_value"], num_heads=N,
          unidirectional=unidirectional)


def test_packed_forms_onnxruntime_cpu_refuses_are_named():
    from lite.errors import UnsupportedOpError

    chosen = KERNELS.select("MultiHeadAttention", MICROSOFT, 1)
    with pytest.raises(UnsupportedOpError, match="packed QKV"):
        chosen.fn(normal(B, S, N, 3, H // N), num_heads=N)
    with pytest.raises(UnsupportedOpError, match="packed KV"):
        chosen.fn(normal(B, S, H), normal(B, KEYS, N, 2, H // N), num_heads=N)


MAX_POSITIONS = 32


@pytest.mark.parametrize("layout", ["3-D", "4-D"])
@pytest.mark.parametrize("interleaved", [0, 1], ids=["halves", "interleaved"])
@pytest.mark.parametrize("positions", ["indices", "offset"])
@pytest.mark.parametrize("rotary_embedding_dim", [0, 4], ids=["whole-head", "partial"])
def test_microsoft_rotary_embedding(layout, interleaved, positions, rotary_embedding_dim):
    head_size = 8
    rotated = rotary_embedding_dim or head_size
    x = normal(B, S, N * head_size) if layout == "3-D" else normal(B, N, S, head_size)
    position_ids = (rng.integers(0, MAX_POSITIONS, (B, S)) if positions == "indices" else np.array([7])).astype(np.int64)
    angles = rng.random((MAX_POSITIONS, rotated // 2)) * 6
    inputs = [("x", x), ("position_ids", position_ids), ("cos", np.cos(angles).astype(np.float32)),
              ("sin", np.sin(angles).astype(np.float32))]
    attributes = {"interleaved": interleaved}
    if layout == "3-D":
        attributes["num_heads"] = N
    if rotary_embedding_dim:
        attributes.update(rotary_embedding_dim=rotary_embedding_dim, num_heads=N)
    check("RotaryEmbedding", inputs, ["y"], constants=("cos", "sin"), **attributes)


KV_HEADS = 2
GQA_CASES = {  # sequence, past buffer rows, each row's total length, head size, attributes
    "prompt": (5, 0, [5, 5], 8, {}),
    "padded-prompt": (5, 0, [5, 3], 8, {}),
    "decoding": (1, 8, [5, 3], 8, {}),
    "decoding-full-buffer": (1, 4, [5, 5], 8, {}),
    "subsequent-prompt": (3, 8, [7], 8, {}),
    "rotary-prompt": (5, 0, [5, 5], 16, {"do_rotary": 1}),
    "rotary-decoding": (1, 8, [5, 3], 16, {"do_rotary": 1}),
    "rotary-interleaved": (1, 8, [5, 3], 16, {"do_rotary": 1, "rotary_interleaved": 1}),
    "window-prompt": (5, 0, [5, 5], 8, {"local_window_size": 2}),
    "window-decoding": (3, 8, [7], 8, {"local_window_size": 3}),
    "softcap": (1, 8, [5, 3], 8, {"softcap": 2.0}),
    "scale": (5, 0, [5, 5], 8, {"scale": 0.3}),
}


@pytest.mark.parametrize("case", list(GQA_CASES))
def test_group_query_attention(case):
    sequence, buffer, lengths, head_size, attributes = GQA_CASES[case]
    batch = len(lengths)
    inputs = [("query", normal(batch, sequence, N * head_size)), ("key", normal(batch, sequence, KV_HEADS * head_size)),
              ("value", normal(batch, sequence, KV_HEADS * head_size)),
              ("past_key", normal(batch, KV_HEADS, buffer, head_size) if buffer else None),
              ("past_value", normal(batch, KV_HEADS, buffer, head_size) if buffer else None),
              ("seqlens_k", np.array(lengths, np.int32) - 1), ("total_sequence_length", np.array(max(lengths), np.int32))]
    if attributes.get("do_rotary"):
        angles = rng.random((MAX_POSITIONS, head_size // 2)) * 6
        inputs += [("cos", np.cos(angles).astype(np.float32)), ("sin", np.sin(angles).astype(np.float32))]
    check("GroupQueryAttention", inputs, ["y", "present_key", "present_value"], constants=("cos", "sin"),
          num_heads=N, kv_num_heads=KV_HEADS, **attributes)
