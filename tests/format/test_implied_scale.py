"""Format 2.1: int32 bias scales equal to input scale × weight scales are left out and recomputed."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from converter.quantize.scheme import quantize_bias
from lite.errors import ModelFormatError
from lite.format import ir, load, to_bytes, writer
from lite.format.implied_scale import ImpliedScale
from lite.format.qdq import ImpliedQdq

from .models import (
    GOLDEN_V2_0,
    I8,
    I32,
    F,
    activation_params,
    canonical,
    conv_qdq_model,
    implied_scale_tensors,
    stored,
)


def _flatbuffer_size(data: bytes) -> int:
    return int.from_bytes(data[:4], "little")


def _bias_quant(data: bytes) -> dict:
    return next(t["quant"] for t in stored(data)["tensors"] if t["name"] == b"b")


# ----- round trips --------------------------------------------------------------------------------


def test_bias_scales_are_left_out_and_recomputed_bit_for_bit():
    model = conv_qdq_model()
    data = to_bytes(model)
    assert implied_scale_tensors(data) == ["b"]
    assert _bias_quant(data)["scale"] is None
    read = load(data)
    assert canonical(read.main) == canonical(model.main)
    bias = read.main.tensors[read.main.tensor_index("b_quantized")]
    expected = np.float32(0.02) * np.array([0.01, 0.02, 0.005], np.float32)
    assert bias.quant.scale.tobytes() == expected.tobytes()
    assert read.main.tensors[read.main.tensor_index("b_scale")].data.tobytes() == expected.tobytes()
    assert to_bytes(read) == data
    explicit = to_bytes(conv_qdq_model(version=(2, 0)))
    assert _flatbuffer_size(data) < _flatbuffer_size(explicit)  # the file itself pads to 64 bytes


def test_format_2_0_files_keep_their_bias_scales():
    golden = GOLDEN_V2_0.read_bytes()  # written by format 2.0's writer
    model = load(golden)
    assert model.version == (2, 0)
    assert not implied_scale_tensors(golden) and _bias_quant(golden)["scale"] is not None
    assert canonical(model.main) == canonical(conv_qdq_model().main)
    assert to_bytes(model) == golden  # a 2.0 model is written as format 2.0 wrote it
    model.version = ir.FORMAT_VERSION
    assert implied_scale_tensors(to_bytes(model)) == ["b"]


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_outputs_match_the_format_2_0_file_bit_for_bit(device):
    if device == "cpu":
        pytest.importorskip("onnxruntime")
    import lite

    x = np.random.default_rng(2).uniform(-2, 3, (2, 2, 5, 5)).astype(np.float32)
    options = {"int8_compute": "int8"} if device == "cpu" else {}  # no per-load timing of the float form
    expected = lite.Model.load(GOLDEN_V2_0.read_bytes(), device=device, **options)(x)
    got = lite.Model.load(to_bytes(conv_qdq_model()), device=device, **options)(x)
    assert got.tobytes() == expected.tobytes()


@settings(max_examples=200, deadline=None)
@given(input_scale=st.floats(2.0**-126, 2.0**126, width=32),
       weight_scales=st.lists(st.floats(2.0**-126, 2.0**126, width=32), min_size=1, max_size=4))
def test_any_quantizer_bias_reads_back_with_its_exact_scales(input_scale, weight_scales):
    # Products that underflow float32 are not the quantizer's scale (it clamps them to 1e-30): those
    # biases keep their scales stored; all others are implied. Either way they read back exactly.
    # (One that overflows is infinite, which no file may hold.)
    with np.errstate(over="ignore", under="ignore"):
        product = np.float32(input_scale) * np.array(weight_scales, np.float32)
    assume(np.all(np.isfinite(product)))
    model = conv_qdq_model()
    graph = model.main
    count = len(weight_scales)
    w_scale = np.array(weight_scales, np.float32)
    _, b_params = quantize_bias(np.arange(count, dtype=np.float32), input_scale, w_scale)
    x_quant = graph.tensors[graph.tensor_index("x_quantized")].quant
    w_quantized = graph.tensors[graph.tensor_index("w_quantized")]
    w_params = dataclasses.replace(w_quantized.quant, scale=w_scale, zero_point=np.zeros(count))
    _set_group(graph, "x", dataclasses.replace(x_quant, scale=np.array([input_scale], np.float32)), ())
    _set_group(graph, "w", w_params, (count, 2, 3, 3))
    _set_group(graph, "b", b_params, (count,))
    if count == 1:  # a single channel: per-tensor weight and bias, as below opset 13
        _set_group(graph, "w", dataclasses.replace(w_params, axis=None), (count, 2, 3, 3))
    data = to_bytes(model)
    assert implied_scale_tensors(data) == (["b"] if np.all(product > 0) else [])
    read = load(data)
    assert canonical(read.main) == canonical(graph)


def _set_group(graph: ir.Graph, base: str, quant: ir.QuantParams, shape: tuple[int, ...]) -> None:
    """Give the QDQ group ``base`` new parameters (and, for a constant, a new shape and zeros)."""
    quantized = graph.tensors[graph.tensor_index(base + "_quantized")]
    quantized.quant = quant
    parameter_shape = () if quant.axis is None else (quant.scale.size,)
    scale = graph.tensors[graph.tensor_index(base + "_scale")]
    scale.shape, scale.data = parameter_shape, quant.scale.reshape(parameter_shape).copy()
    zero_point = graph.tensors[graph.tensor_index(base + "_zero_point")]
    zero_point.shape = parameter_shape
    zero_point.data = quant.zero_point.astype(np.asarray(zero_point.data).dtype).reshape(parameter_shape)
    if quantized.data is not None:
        quantized.shape, quantized.data = shape, np.zeros(shape, np.asarray(quantized.data).dtype)
        graph.tensors[graph.tensor_index(base + "_dequantized")].shape = shape
        node = next(n for n in graph.nodes if n.name == base + "_DequantizeLinear")
        node.attributes = {} if quant.axis is None else {"axis": ir.Attribute(ir.AttributeType.INT, 0)}


# ----- what keeps its scales --------------------------------------------------------------------------


def _bias_of_conv(graph: ir.Graph) -> tuple[ir.Node, int]:
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    return conv, conv.inputs[2]


def _read_bias_twice(graph: ir.Graph) -> None:
    _, bias = _bias_of_conv(graph)
    graph.tensors.append(ir.Tensor("b_copy", F, (3,)))
    graph.nodes.append(ir.Node("Identity", [bias], [len(graph.tensors) - 1], name="copy"))
    graph.outputs.append(len(graph.tensors) - 1)


def _scale_one_ulp_off(graph: ir.Graph) -> None:
    for name in ("b_quantized", "b_scale"):
        tensor = graph.tensors[graph.tensor_index(name)]
        scale = (tensor.quant.scale if tensor.quant is not None else np.asarray(tensor.data)).copy()
        scale[1] = np.nextafter(scale[1], np.float32(1))
        if tensor.quant is not None:
            tensor.quant = dataclasses.replace(tensor.quant, scale=scale)
        else:
            tensor.data = scale


def _explicit_input_pair(graph: ir.Graph) -> None:
    graph.nodes[0].name = "quantize_x"  # x's pair stays explicit: the Conv reads x_dequantized, no parameters


@pytest.mark.parametrize("edit", [_read_bias_twice, _scale_one_ulp_off, _explicit_input_pair],
                         ids=["read twice", "not the product", "input without implied nodes"])
def test_biases_the_reader_could_not_recompute_keep_their_scales(edit):
    model = conv_qdq_model()
    edit(model.main)
    data = to_bytes(model)
    assert implied_scale_tensors(data) == []
    assert _bias_quant(data)["scale"] is not None
    assert canonical(load(data).main) == canonical(model.main)


# ----- malformed implied scales ------------------------------------------------------------------------


def _stored_conv(bias_length: int = 2, bias_slot: int = 2, x_scales: int = 1) -> tuple[ir.Model, dict]:
    """A stored graph: x (QUANTIZE_DEQUANTIZE) → Conv(x, w int8 DEQUANTIZE, b int32 DEQUANTIZE) → y."""
    x_quant = activation_params(0.5, 0)
    if x_scales > 1:
        x_quant = ir.QuantParams(np.full(x_scales, 0.5, np.float32), np.zeros(x_scales), axis=1, bits=8, signed=False)
    w_quant = ir.QuantParams(np.array([0.5, 0.25], np.float32), np.zeros(2), axis=0, bits=8, symmetric=True)
    b_quant = ir.QuantParams(np.full(bias_length, 0.125, np.float32), np.zeros(bias_length),
                             axis=0 if bias_length > 1 else None, bits=32, symmetric=True)
    tensors = [
        ir.Tensor("x", F, ("N", 2, 3, 3), quant=x_quant),
        ir.Tensor("w", I8, (2, 2, 1, 1), np.ones((2, 2, 1, 1), np.int8), w_quant),
        ir.Tensor("b", I32, (bias_length,), np.ones(bias_length, np.int32), b_quant),
        ir.Tensor("y", F, ("N", 2, 3, 3)),
    ]
    inputs = [0, 1, 2] if bias_slot == 2 else [0, 2, 1]
    graph = ir.Graph("main", tensors, [ir.Node("Conv", inputs, [3], name="conv")], inputs=[0], outputs=[3])
    implied = {0: ImpliedQdq.QUANTIZE_DEQUANTIZE, 1: ImpliedQdq.DEQUANTIZE, 2: ImpliedQdq.DEQUANTIZE}
    return ir.Model([graph]), implied


def _write(monkeypatch, model: ir.Model, implied: dict, scales: set[str]) -> bytes:
    """Write ``model`` as stored with these annotations, implying the scales of ``scales`` (names)."""
    monkeypatch.setattr(writer.qdq, "compact", lambda graph: (graph, implied))
    monkeypatch.setattr(writer.implied_scale, "implied_scales",
                        lambda graph, _: {graph.tensor_index(name) for name in scales})
    return to_bytes(model)


def test_a_hand_written_implied_scale_is_recomputed(monkeypatch):
    model, implied = _stored_conv()
    graph = load(_write(monkeypatch, model, implied, {"b"})).main
    assert graph.tensors[graph.tensor_index("b_scale")].data.tolist() == [0.25, 0.125]


@pytest.mark.parametrize(
    "build, scales, message",
    [
        (lambda: _stored_conv(bias_length=3), {"b"}, r"'b'\) quantization: 2 scales, but axis 0 of shape \(3,\) needs 3"),
        (lambda: _stored_conv(bias_length=1), {"b"}, r"'b'\) quantization: per-tensor quantization has 1 scale, found 2"),
        (lambda: _stored_conv(bias_slot=1), {"b"}, r"'b'\): its scales are implied .* read 1 times \(inputs \[1\]\)"),
        (lambda: _stored_conv(x_scales=2), {"b"}, r"'b'\): its scales are implied .* input 0 has 2 scales, not 1"),
        (lambda: _stored_conv(), {"w"}, r"'w'\): its scales are implied .* read 1 times \(inputs \[1\]\)"),
    ],
)
def test_implied_scales_that_do_not_fit_are_refused(monkeypatch, build, scales, message):
    model, implied = build()
    data = _write(monkeypatch, model, implied, scales)
    with pytest.raises(ModelFormatError, match=message):
        load(data)


def test_an_implied_scale_needs_implied_nodes_on_its_factors_and_itself(monkeypatch):
    model, implied = _stored_conv()
    with pytest.raises(ModelFormatError, match=r"input 0 \('x'\) has no implied QDQ nodes"):
        load(_write(monkeypatch, model, {1: implied[1], 2: implied[2]}, {"b"}))
    with pytest.raises(ModelFormatError, match=r"'b'\) quantization: implied scales .* need implied_qdq DEQUANTIZE"):
        load(_write(monkeypatch, model, {0: implied[0], 1: implied[1]}, {"b"}))


def test_products_outside_float32_are_refused(monkeypatch):
    model, implied = _stored_conv()
    model.main.tensors[0].quant = activation_params(1e30, 0)
    model.main.tensors[1].quant = dataclasses.replace(model.main.tensors[1].quant,
                                                      scale=np.array([1e30, 1e-30], np.float32))
    with pytest.raises(ModelFormatError, match=r"'b'\) quantization: scales must be finite and positive"):
        load(_write(monkeypatch, model, implied, {"b"}))


def test_implied_scales_in_a_format_2_0_file_are_refused(monkeypatch):
    model, implied = _stored_conv()
    model.version = (2, 0)
    monkeypatch.setattr(writer.qdq, "compact", lambda graph: (graph, implied))
    # a writer that implies scales from 2.0 on (the reader keeps 2.1)
    monkeypatch.setattr(writer, "implied_scale", SimpleNamespace(
        IMPLIED_SCALE_SINCE=(2, 0), ImpliedScale=ImpliedScale, implied_scales=lambda graph, _: {2}))
    with pytest.raises(ModelFormatError, match=r"'b'\) quantization: implied scales .* need format 2.1, the file says 2.0"):
        load(to_bytes(model))


def test_implied_and_stored_scales_together_are_refused(monkeypatch):
    model, implied = _stored_conv()
    original = writer.fb.QuantParamsAddSymmetric

    def also_imply(builder, value):  # every QuantParams table says its scales are implied, and stores them
        original(builder, value)
        writer.fb.QuantParamsAddImpliedScale(builder, 1)

    monkeypatch.setattr(writer.fb, "QuantParamsAddSymmetric", also_imply)
    with pytest.raises(ModelFormatError, match=r"'x'\) quantization: implied scales \(INPUT_TIMES_WEIGHT\) but the scales are stored"):
        load(_write(monkeypatch, model, implied, {"b"}))


def test_implied_scales_on_tensor_attributes_are_refused(monkeypatch):
    constant = ir.Tensor("c", I32, (1,), np.ones(1, np.int32), ir.QuantParams(np.ones(1, np.float32), np.zeros(1)))
    graph = ir.Graph("main", [ir.Tensor("y", I32, (1,))],
                     [ir.Node("Constant", [], [0], {"value": ir.Attribute(ir.AttributeType.TENSOR, constant)}, name="c")],
                     outputs=[0])
    original = writer._Encoder.quant
    monkeypatch.setattr(writer._Encoder, "quant", lambda self, quant, scale_implied=False: original(self, quant, True))
    with pytest.raises(ModelFormatError, match=r"implied scales \(INPUT_TIMES_WEIGHT\) on a tensor attribute"):
        load(to_bytes(ir.Model([graph])))


def test_a_file_without_implied_scales_says_format_2_0():
    model = conv_qdq_model()
    graph = model.main
    conv = next(n for n in graph.nodes if n.op_type == "Conv")
    conv.inputs = conv.inputs[:2]  # no bias
    data = to_bytes(model)
    assert load(data).version == (2, 0)
    assert load(to_bytes(conv_qdq_model())).version == (2, 1)
