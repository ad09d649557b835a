"""ONNX Runtime's com.microsoft transformer ops (and its default-domain SimplifiedLayerNormalization)
against ONNX Runtime, which defines them: one-node graphs built with onnx.helper, random float32
inputs of several shapes, weights as initializers as its transformer optimizer writes them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import converter
import lite
from lite.ops.registry import KERNELS

rng = np.random.default_rng(11)
MICROSOFT = "com.microsoft"


def normal(*shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def one_node_model(op_type, inputs, outputs, *, domain=MICROSOFT, constants=(), **attributes) -> onnx.ModelProto:
    """``inputs``: (name, value or None) in the op's order (None: omitted); names in ``constants``
    become initializers. ``outputs``: names, "" for an output left out."""
    names = [name if value is not None else "" for name, value in inputs]
    node = helper.make_node(op_type, names, outputs, domain=domain, **attributes)
    graph = helper.make_graph(
        [node], op_type.lower(),
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
         for name, value in inputs if value is not None and name not in constants],
        [onnx.ValueInfoProto(name=name) for name in outputs if name],
        [numpy_helper.from_array(value, name) for name, value in inputs if value is not None and name in constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])
    model.ir_version = 10
    return model


def onnxruntime_outputs(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def kernel_outputs(op_type, inputs, outputs, *, domain=MICROSOFT, **attributes) -> list[np.ndarray]:
    chosen = KERNELS.select(op_type, domain, 1 if domain else 17)
    extra = {"output_count": len(outputs)} if chosen.wants_output_count else {}
    got = chosen.fn(*[value for _, value in inputs], **attributes, **extra)
    got = list(got) if isinstance(got, tuple) else [got]
    return [value for value, name in zip(got, outputs) if name]


def relative_error(actual, expected) -> float:
    expected = np.asarray(expected, np.float64)
    scale = max(float(np.abs(expected).max()), 1.0) if expected.size else 1.0
    return float(np.abs(np.asarray(actual, np.float64) - expected).max()) / scale if expected.size else 0.0


def check(op_type, inputs, outputs, *, domain=MICROSOFT, constants=(), tolerance=1e-5, **attributes):
    """The kernel's outputs against ONNX Runtime's: same shapes and dtypes, within ``tolerance``
    of the largest reference value."""
    model = one_node_model(op_type, inputs, outputs, domain=domain, constants=constants, **attributes)
    feeds = {name: value for name, value in inputs if value is not None and name not in constants}
    expected = onnxruntime_outputs(model, feeds)
    got = kernel_outputs(op_type, inputs, outputs, domain=domain, **attributes)
    assert len(got) == len(expected)
    for index, (actual, reference) in enumerate(zip(got, expected)):
        assert actual.shape == reference.shape, (index, actual.shape, reference.shape)
        assert actual.dtype == reference.dtype, (index, actual.dtype, reference.dtype)
        assert relative_error(actual, reference) <= tolerance, (index, relative_error(actual, reference))
    return got


B, S, H = 2, 5, 16
LENGTHS = np.array([5, 3], np.int32)


def padding_mask(lengths, width) -> np.ndarray:
    return (np.arange(width)[None] < np.asarray(lengths)[:, None]).astype(np.int32)


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


N, DIN = 4, 12
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
