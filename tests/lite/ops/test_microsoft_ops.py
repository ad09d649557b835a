"""ONNX Runtime's fused norms, activations, matrix products and convolutions (com.microsoft, and its
default-domain SimplifiedLayerNormalization and LayerNormalization) against ONNX Runtime, one
node at a time and through the converter and the numpy engine."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import converter
import lite
from lite.ops.registry import KERNELS
from tests.lite.ops._microsoft import (
    LENGTHS,
    MICROSOFT,
    B,
    H,
    N,
    S,
    check,
    normal,
    one_node_model,
    onnxruntime_outputs,
    padding_mask,
    relative_error,
    rng,
)


@pytest.mark.parametrize("skip_shape", [(B, S, H), (1, S, H), (S, H)], ids=["full", "broadcast-batch", "2-D"])
@pytest.mark.parametrize("outputs", [["y", "mean", "inv", "sum"], ["y", "", "", "sum"], ["y"]],
                         ids=["all", "with-sum", "y"])
def test_skip_layer_normalization(skip_shape, outputs):
    inputs = [("x", normal(B, S, H)), ("skip", normal(*skip_shape)), ("gamma", normal(H)), ("beta", normal(H)),
              ("bias", normal(H))]
    check("SkipLayerNormalization", inputs, outputs, constants=("gamma", "beta", "bias"), epsilon=1e-5)


def test_skip_layer_normalization_without_beta_and_bias_takes_the_schema_epsilon():
    check("SkipLayerNormalization", [("x", normal(B, S, H)), ("skip", normal(B, S, H)), ("gamma", normal(H))],
          ["y", "", "", "sum"])


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_skip_simplified_layer_normalization(bias):
    inputs = [("x", normal(B, S, H)), ("skip", normal(B, S, H)), ("gamma", normal(H)),
              ("bias", normal(H) if bias else None)]
    check("SkipSimplifiedLayerNormalization", inputs, ["y", "", "inv", "sum"], epsilon=1e-6)


@pytest.mark.parametrize(("axis", "scale_shape"), [(-1, (H,)), (1, (S, H))], ids=["last-axis", "two-axes"])
def test_simplified_layer_normalization_in_the_default_domain(axis, scale_shape):
    check("SimplifiedLayerNormalization", [("x", normal(B, S, H, scale=3)), ("scale", normal(*scale_shape))],
          ["y", "inv"], domain="", constants=("scale",), axis=axis, epsilon=1e-6)


@pytest.mark.parametrize(("op_type", "bias"), [("Gelu", False), ("BiasGelu", True), ("FastGelu", True),
                                               ("FastGelu", False), ("QuickGelu", False)])
def test_gelu_variants(op_type, bias):
    inputs = [("x", normal(B, S, H, scale=3))] + ([("bias", normal(H))] if bias else [])
    check(op_type, inputs, ["y"], constants=("bias",))


def test_quick_gelu_alpha():
    check("QuickGelu", [("x", normal(B, S, H, scale=3))], ["y"], alpha=1.1)


@pytest.mark.parametrize(("a", "b", "attributes"), [
    ((3, 4, 5), (3, 5, 6), {}),
    ((3, 5, 4), (3, 6, 5), {"transA": 1, "transB": 1, "alpha": 0.5}),
    ((4, 5), (6, 5), {"transB": 1, "alpha": 3.0}),
    ((3, 2, 4), (2, 4, 5), {"transBatchA": 1}),
    ((4, 2, 3), (2, 4, 5), {"transBatchA": 1, "transA": 1, "alpha": 0.7}),
    ((2, 3, 4), (4, 2, 5), {"transBatchB": 1}),
    ((2, 3, 4), (5, 2, 4), {"transBatchB": 1, "transB": 1}),
    ((4, 3, 2, 5), (3, 2, 5, 6), {"transBatchA": 1}),
    ((3, 2, 4, 5), (6, 3, 2, 5), {"transBatchB": 1, "transB": 1}),
], ids=["plain", "transposed", "2-D", "batchA", "batchA-transA", "batchB", "batchB-transB", "4-D-batchA",
        "4-D-batchB-transB"])
def test_fused_mat_mul(a, b, attributes):
    check("FusedMatMul", [("A", normal(*a)), ("B", normal(*b))], ["y"], **attributes)


VOCABULARY, POSITIONS, SEGMENTS = 30, 12, 2


def embedding_inputs(*, segments=True, mask=True, position_ids=False):
    inputs = [
        ("ids", rng.integers(0, VOCABULARY, (B, S)).astype(np.int32)),
        ("segment_ids", rng.integers(0, SEGMENTS, (B, S)).astype(np.int32) if segments else None),
        ("word", normal(VOCABULARY, H)), ("position", normal(POSITIONS, H)),
        ("segment", normal(SEGMENTS, H) if segments else None),
        ("gamma", normal(H)), ("beta", normal(H)),
        ("mask", padding_mask(LENGTHS, S) if mask else None),
    ]
    if position_ids:
        inputs.append(("position_ids", rng.integers(0, POSITIONS, (B, S)).astype(np.int32)))
    return inputs


@pytest.mark.parametrize("form", ["bert", "distilbert", "position-ids"])
def test_embed_layer_normalization(form):
    inputs = embedding_inputs(segments=form != "distilbert", mask=form != "distilbert",
                              position_ids=form == "position-ids")
    got = check("EmbedLayerNormalization", inputs, ["y", "mask_index", "sum"],
                constants=("word", "position", "segment", "gamma", "beta"), epsilon=1e-12)
    assert got[1].tolist() == ([0, 0] if form == "distilbert" else LENGTHS.tolist())


def encoder_block_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A BERT-like block as ONNX Runtime's transformer optimizer writes it, with a T5-style
    default-domain SimplifiedLayerNormalization at the end::

        EmbedLayerNormalization -> Attention (mask_index) -> SkipLayerNormalization (sum output)
        -> FusedMatMul -> BiasGelu -> MultiHeadAttention -> SkipSimplifiedLayerNormalization
        -> SimplifiedLayerNormalization
    """
    ids = rng.integers(0, VOCABULARY, (B, S)).astype(np.int32)
    mask = padding_mask(LENGTHS, S)
    weights = {
        "word": normal(VOCABULARY, H), "position": normal(POSITIONS, H), "segment": normal(SEGMENTS, H),
        "gamma": normal(H), "beta": normal(H), "qkv": normal(H, 3 * H, scale=0.3), "qkv_bias": normal(3 * H),
        "up": normal(H, H, scale=0.3), "up_bias": normal(H), "rms_scale": normal(H),
        "segment_ids": np.zeros((B, S), np.int32),
    }
    microsoft = {"domain": MICROSOFT}
    nodes = [
        helper.make_node("EmbedLayerNormalization", ["ids", "segment_ids", "word", "position", "segment", "gamma",
                                                     "beta", "mask"], ["embedded", "mask_index"], epsilon=1e-12,
                         **microsoft),
        helper.make_node("Attention", ["embedded", "qkv", "qkv_bias", "mask_index"], ["attended"], num_heads=N,
                         **microsoft),
        helper.make_node("SkipLayerNormalization", ["attended", "embedded", "gamma", "beta"],
                         ["normed", "", "", "residual"], epsilon=1e-12, **microsoft),
        helper.make_node("FusedMatMul", ["normed", "up"], ["up_out"], alpha=0.5, transB=1, **microsoft),
        helper.make_node("BiasGelu", ["up_out", "up_bias"], ["activated"], **microsoft),
        helper.make_node("MultiHeadAttention", ["activated", "residual", "normed", "", "mask"], ["mixed"],
                         num_heads=N, **microsoft),
        helper.make_node("SkipSimplifiedLayerNormalization", ["mixed", "residual", "rms_scale"], ["rms"],
                         epsilon=1e-6, **microsoft),
        helper.make_node("SimplifiedLayerNormalization", ["rms", "rms_scale"], ["y"], epsilon=1e-6),
    ]
    graph = helper.make_graph(
        nodes, "encoder_block",
        [helper.make_tensor_value_info("ids", onnx.TensorProto.INT32, [B, S]),
         helper.make_tensor_value_info("mask", onnx.TensorProto.INT32, [B, S])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [B, S, H])],
        [numpy_helper.from_array(value, name) for name, value in weights.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])
    model.ir_version = 10
    return model, {"ids": ids, "mask": mask}


def test_the_numpy_engine_runs_an_optimized_encoder_converted_by_the_converter(tmp_path):
    """The converter keeps the nodes (the default-domain SimplifiedLayerNormalization too), verifies
    the file on the numpy engine, and lite.Model runs it there as ONNX Runtime runs the original."""
    model, feeds = encoder_block_model()
    onnx.save(model, tmp_path / "block.onnx")
    report = converter.convert(tmp_path / "block.onnx", tmp_path / "block.lite")
    assert report.verification.status == "passed" and "numpy" in report.verification.engine
    assert not report.custom_ops
    got = lite.Model.load(tmp_path / "block.lite", device="numpy").predict(feeds)["y"]
    assert relative_error(got, onnxruntime_outputs(model, feeds)[0]) <= 1e-5


def float16_encoder(layers: int = 2, width: int = 32) -> onnx.ModelProto:
    """BERT layers with float16 weights, as ONNX Runtime's optimizer writes them with
    float16=True, the output cast to float32::

        Attention -> MatMul -> SkipLayerNormalization -> MatMul -> BiasGelu -> MatMul
        -> SkipLayerNormalization

    ONNX Runtime runs the norms with its float16 kernels and the rest in float32 between Casts;
    the numpy engine runs it all in float32."""
    nodes, weights, previous = [], {}, "x"
    for layer in range(layers):
        names = {key: f"{key}{layer}" for key in ("qkv", "qkv_bias", "out", "gamma", "beta", "up", "up_bias", "down")}
        weights.update({
            names["qkv"]: normal(width, 3 * width, scale=0.3), names["qkv_bias"]: normal(3 * width, scale=0.1),
            names["out"]: normal(width, width, scale=0.3), names["gamma"]: 1 + normal(width, scale=0.1),
            names["beta"]: normal(width, scale=0.1), names["up"]: normal(width, 2 * width, scale=0.3),
            names["up_bias"]: normal(2 * width, scale=0.1), names["down"]: normal(2 * width, width, scale=0.3),
        })
        norm = ["gamma", "beta"]
        nodes += [
            helper.make_node("Attention", [previous, names["qkv"], names["qkv_bias"]], [f"attended{layer}"],
                             domain=MICROSOFT, num_heads=N),
            helper.make_node("MatMul", [f"attended{layer}", names["out"]], [f"projected{layer}"]),
            helper.make_node("SkipLayerNormalization", [f"projected{layer}", previous] + [names[k] for k in norm],
                             [f"normed{layer}"], domain=MICROSOFT, epsilon=1e-5),
            helper.make_node("MatMul", [f"normed{layer}", names["up"]], [f"up_out{layer}"]),
            helper.make_node("BiasGelu", [f"up_out{layer}", names["up_bias"]], [f"activated{layer}"], domain=MICROSOFT),
            helper.make_node("MatMul", [f"activated{layer}", names["down"]], [f"down_out{layer}"]),
            helper.make_node("SkipLayerNormalization", [f"down_out{layer}", f"normed{layer}"] + [names[k] for k in norm],
                             [f"block{layer}"], domain=MICROSOFT, epsilon=1e-5),
        ]
        previous = f"block{layer}"
    nodes.append(helper.make_node("Cast", [previous], ["y"], to=onnx.TensorProto.FLOAT))
    graph = helper.make_graph(nodes, "float16_encoder",
                              [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT16, [B, 8, width])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [B, 8, width])],
                              [numpy_helper.from_array(value.astype(np.float16), name) for name, value in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])
    model.ir_version = 10
    return model


def test_a_float16_model_is_verified_with_the_float16_tolerance(tmp_path):
    """The numpy engine's float32 arithmetic moves the output by a few float16 steps from ONNX
    Runtime's (about 1e-3 of its peak, beyond the float32 default of 1e-4): the converter
    verifies a model whose weights are float16 with the tolerance of an fp16 conversion, 1e-2."""
    model = float16_encoder()
    onnx.save(model, tmp_path / "encoder.onnx")
    report = converter.convert(tmp_path / "encoder.onnx", tmp_path / "encoder.lite")
    assert report.verification.status == "passed" and "numpy" in report.verification.engine
    feeds = {"x": normal(B, 8, 32).astype(np.float16)}
    got = lite.Model.load(tmp_path / "encoder.lite", device="numpy").predict(feeds)["y"]
    assert relative_error(got, onnxruntime_outputs(model, feeds)[0]) < 1e-2


def test_layer_normalization_before_opset_17_is_onnxruntimes_and_runs(tmp_path):
    """ONNX Runtime's optimizer writes LayerNormalization into opset-14 models (its own op there,
    default domain, version 1): the converter keeps it and the numpy engine runs it as ONNX Runtime."""
    x = normal(B, S, H, scale=3)
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y", "mean", "inv_std"], epsilon=1e-5)
    graph = helper.make_graph([node], "layer_norm", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, x.shape)],
                              [onnx.ValueInfoProto(name=name) for name in ("y", "mean", "inv_std")],
                              [numpy_helper.from_array(normal(H), "scale"), numpy_helper.from_array(normal(H), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "layer_norm.onnx")
    report = converter.convert(tmp_path / "layer_norm.onnx", tmp_path / "layer_norm.lite")
    assert report.verification.status == "passed" and "numpy" in report.verification.engine
    got = lite.Model.load(tmp_path / "layer_norm.lite", device="numpy").predict({"x": x})
    for name, expected in zip(("y", "mean", "inv_std"), onnxruntime_outputs(model, {"x": x})):
        assert got[name].shape == expected.shape and relative_error(got[name], expected) <= 1e-5


@pytest.mark.parametrize(("op_type", "domain"), [("SkipLayerNormalization", MICROSOFT),
                                                 ("SkipSimplifiedLayerNormalization", MICROSOFT),
                                                 ("SimplifiedLayerNormalization", "")])
def test_float16_norms_keep_their_type(op_type, domain):
    """float16 in, float16 out (statistics float32), within a float16 step of ONNX Runtime's float16
    kernels, which compute in float32 too."""
    x, gamma = normal(B, S, H, scale=3).astype(np.float16), normal(H).astype(np.float16)
    inputs = [("x", x), ("gamma", gamma)] if domain == "" else [("x", x), ("skip", normal(B, S, H).astype(np.float16)),
                                                               ("gamma", gamma)]
    outputs = ["y", "inv"] if domain == "" else ["y", "", "inv", "sum"]
    check(op_type, inputs, outputs, domain=domain, constants=("gamma",), tolerance=1e-3, epsilon=1e-5)


def n_bits_inputs(*, K, N, bits, block_size, zero_points=None, bias=False):
    """MatMulNBits' inputs: random packed weights (every byte value is a valid packing), scales,
    and zero points packed as uint8, as float, or omitted (then 2^(bits-1))."""
    blocks = -(-K // block_size)
    per_byte = 8 // bits
    inputs = [("A", normal(B, 3, K)),
              ("B", rng.integers(0, 256, (N, blocks, block_size // per_byte)).astype(np.uint8)),
              ("scales", (rng.random(N * blocks) * 0.1 + 0.01).astype(np.float32))]
    if zero_points == "uint8":
        inputs.append(("zero_points", rng.integers(0, 256, N * -(-blocks // per_byte)).astype(np.uint8)))
    elif zero_points == "float":
        inputs.append(("zero_points", (rng.random((N, blocks)) * (1 << bits)).astype(np.float32)))
    else:
        inputs.append(("zero_points", None))
    inputs += [("g_idx", None), ("bias", normal(N) if bias else None)]
    return inputs


@pytest.mark.parametrize(("K", "N", "bits", "block_size"), [(64, 24, 4, 32), (72, 16, 4, 32), (64, 8, 8, 16),
                                                           (200, 12, 4, 128)],
                         ids=["4-bit", "K-padded", "8-bit", "block-128"])
@pytest.mark.parametrize("zero_points", [None, "uint8", "float"], ids=["symmetric", "uint8-zeros", "float-zeros"])
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_mat_mul_n_bits(K, N, bits, block_size, zero_points, bias):
    if bits == 8 and zero_points == "float":
        pytest.skip("ONNX Runtime's CPU kernel refuses 8-bit weights with float zero points")
    inputs = n_bits_inputs(K=K, N=N, bits=bits, block_size=block_size, zero_points=zero_points, bias=bias)
    attributes = {"K": K, "N": N, "bits": bits, "block_size": block_size}
    expected = check("MatMulNBits", inputs, ["y"], constants=("B", "scales", "zero_points", "bias"), **attributes)
    chosen = KERNELS.select("MatMulNBits", MICROSOFT, 1)
    values = [value for _, value in inputs]
    prepared = chosen.prepare([None, *values[1:]], [None] * len(values), **attributes)
    assert prepared is not None
    np.testing.assert_array_equal(chosen.fn(*values, **attributes, prepared=prepared), expected[0])


def test_a_4_bit_model_converts_and_runs_on_the_numpy_engine(tmp_path):
    inputs = n_bits_inputs(K=64, N=24, bits=4, block_size=32, bias=True)
    model = one_node_model("MatMulNBits", inputs, ["y"], constants=("B", "scales", "bias"), K=64, N=24, bits=4,
                           block_size=32)
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [B, 3, 24]))
    onnx.save(model, tmp_path / "q4.onnx")
    report = converter.convert(tmp_path / "q4.onnx", tmp_path / "q4.lite")
    assert report.verification.status == "passed" and "numpy" in report.verification.engine
    feeds = {"A": inputs[0][1]}
    got = lite.Model.load(tmp_path / "q4.lite", device="numpy").predict(feeds)["y"]
    assert relative_error(got, onnxruntime_outputs(model, feeds)[0]) <= 1e-5


@pytest.mark.parametrize(("activation", "params"), [("Relu", None), ("Tanh", None), ("Sigmoid", None),
                                                    ("LeakyRelu", [0.2]), ("Clip", [-0.5, 1.5]),
                                                    ("HardSigmoid", [0.3, 0.4])])
@pytest.mark.parametrize("with_sum", [False, True], ids=["conv", "conv-plus-Z"])
def test_fused_conv(activation, params, with_sum):
    x, weight = normal(B, 3, 9, 9), normal(4, 3, 3, 3, scale=0.5)
    inputs = [("x", x), ("w", weight), ("b", normal(4)), ("z", normal(B, 4, 9, 9) if with_sum else None)]
    attributes = {"activation": activation, "kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    if params:
        attributes["activation_params"] = params
    check("FusedConv", inputs, ["y"], constants=("w", "b"), **attributes)
