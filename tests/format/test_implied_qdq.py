"""Format 2.0: QDQ groups stored as tensors with implied nodes, written compactly, read back explicit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lite.errors import ModelFormatError
from lite.format import ir, load, save, to_bytes, writer
from lite.format.dtypes import DataType
from lite.format.qdq import ImpliedQdq

from .models import (
    GOLDEN_V1_0,
    I8,
    U8,
    ExplicitGraph,
    F,
    activation_params,
    canonical,
    conv_qdq_model,
    implied_tensors,
    stored,
    stored_ops,
)

# ----- round trips --------------------------------------------------------------------------------


def test_qdq_groups_are_stored_as_annotated_tensors_and_read_back_explicit():
    model = conv_qdq_model()
    data = to_bytes(model)
    assert stored_ops(data) == ["Conv", "MaxPool"]
    assert implied_tensors(data) == {"x": "QUANTIZE_DEQUANTIZE", "w": "DEQUANTIZE", "b": "DEQUANTIZE",
                                     "c": "QUANTIZE_DEQUANTIZE"}
    read = load(data)
    assert canonical(read.main) == canonical(model.main)
    assert [n.name for n in read.main.nodes] == [n.name for n in model.main.nodes]  # the same execution order
    assert to_bytes(read) == data  # compacting the expanded graph gives the same file
    assert len(data) < len(to_bytes(dataclasses.replace(model, version=(1, 0)))) / 2


def test_symmetric_zero_points_are_left_out_and_read_as_zeros():
    data = to_bytes(conv_qdq_model())
    quant = {t["name"].decode(): t["quant"] for t in stored(data)["tensors"] if t["quant"] is not None}
    assert quant["w"]["zero_point"] is None and quant["b"]["zero_point"] is None
    assert quant["c"]["zero_point"].tolist() == [10]  # an asymmetric activation keeps its zero point
    weight = next(t for t in load(data).main.tensors if t.name == "w_quantized")
    assert weight.quant.zero_point.tolist() == [0, 0, 0]


def test_integer_weights_stay_views_of_the_mapped_file(tmp_path):
    path = tmp_path / "q.lite"
    save(conv_qdq_model(), path)
    weights = {t.name: t for t in load(path).main.tensors}
    for name in ("w_quantized", "b_quantized"):
        assert not weights[name].data.flags.writeable and not weights[name].data.flags.owndata


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_outputs_match_the_explicit_file_bit_for_bit(device):
    if device == "cpu":
        pytest.importorskip("onnxruntime")
    import lite

    explicit = to_bytes(conv_qdq_model(version=(1, 0)))
    compact = to_bytes(conv_qdq_model())
    assert "QuantizeLinear" in stored_ops(explicit) and "QuantizeLinear" not in stored_ops(compact)
    x = np.random.default_rng(1).uniform(-2, 3, (2, 2, 5, 5)).astype(np.float32)
    # On ONNX Runtime both keep the int8 kernels: int8_compute="auto" times them against the
    # float form at each load, and on a busy machine two loads may choose differently.
    options = {"int8_compute": "int8"} if device == "cpu" else {}
    expected = lite.Model.load(explicit, device=device, **options)(x)
    got = lite.Model.load(compact, device=device, **options)(x)
    assert got.tobytes() == expected.tobytes()


def test_format_1_0_files_are_written_and_read_unchanged():
    golden = GOLDEN_V1_0.read_bytes()  # written by format 1.0's writer
    model = load(golden)
    assert model.version == (1, 0)
    assert canonical(model.main) == canonical(conv_qdq_model().main)
    assert to_bytes(model) == golden  # a 1.x model is written as format 1.0 wrote it
    assert "QuantizeLinear" in stored_ops(golden) and not implied_tensors(golden)
    model.version = ir.FORMAT_VERSION
    assert implied_tensors(to_bytes(model))  # the same model written as 2.0 is compact


def test_writing_is_deterministic_and_shares_repeated_strings():
    data = to_bytes(conv_qdq_model())
    assert data == to_bytes(conv_qdq_model())
    header = data[: 4 + int.from_bytes(data[:4], "little")]
    assert header.count(b"kernel_shape") == 1  # Conv's and MaxPool's attribute names are one string
    explicit = to_bytes(conv_qdq_model(version=(1, 0)))
    assert explicit[: 4 + int.from_bytes(explicit[:4], "little")].count(b"kernel_shape") == 2


# ----- what stays explicit --------------------------------------------------------------------------


def _x_pair(graph: ir.Graph) -> tuple[ir.Node, ir.Node]:
    return graph.nodes[0], graph.nodes[1]


def _rename(graph: ir.Graph, old: str, new: str) -> None:
    index = graph.tensor_index(old)
    graph.tensors[index] = dataclasses.replace(graph.tensors[index], name=new)


@pytest.mark.parametrize(
    "edit, still_explicit",
    [
        # names the reader would not give back
        (lambda g: _rename(g, "x_scale", "input_scale"), "x"),
        (lambda g: setattr(g.nodes[0], "name", "quantize_x"), "x"),
        (lambda g: _rename(g, "w_dequantized", "w_float"), "w"),
        # a scale shared by two pairs' nodes: neither pair is given back
        (lambda g: setattr(g.nodes[6], "inputs", [g.nodes[6].inputs[0], g.tensor_index("x_scale"),
                                                   g.nodes[6].inputs[2]]), "x c"),
        # the quantized value read by another node too
        (lambda g: g.nodes.append(ir.Node("Identity", [g.tensor_index("x_quantized")],
                                          [g.tensors.append(ir.Tensor("extra", U8, None)) or len(g.tensors) - 1],
                                          name="extra")), "x"),
        # a dequantized value that is a graph output
        (lambda g: g.outputs.append(g.tensor_index("c_dequantized")), "c"),
        # parameters that differ from the scale tensor
        (lambda g: setattr(g.tensors[g.tensor_index("w_quantized")], "quant",
                           dataclasses.replace(g.tensors[g.tensor_index("w_quantized")].quant,
                                               scale=np.array([0.01, 0.02, 0.004], np.float32))), "w"),
        # an axis attribute the implied node would not have
        (lambda g: setattr(_x_pair(g)[1], "attributes", {"axis": ir.Attribute(ir.AttributeType.INT, 1)}), "x"),
        # a per-axis scale declared as per-tensor (shape (1,) instead of ())
        (lambda g: setattr(g.tensors[g.tensor_index("x_scale")], "shape", (1,))
         or setattr(g.tensors[g.tensor_index("x_scale")], "data", np.array([0.02], np.float32)), "x"),
        # the stored name is taken by another tensor
        (lambda g: g.tensors.append(ir.Tensor("w", F, (1,), np.zeros(1, np.float32))), "w"),
    ],
)
def test_groups_the_reader_would_not_give_back_exactly_stay_explicit(edit, still_explicit):
    model = conv_qdq_model()
    edit(model.main)
    data = to_bytes(model)
    assert set(implied_tensors(data)) == {"x", "w", "b", "c"} - set(still_explicit.split())
    read = load(data)
    assert canonical(read.main) == canonical(model.main)
    assert to_bytes(read) == data


def test_a_value_quantized_twice_keeps_the_second_pair_explicit():
    b = ExplicitGraph()
    x = b.tensor("x", F, (2,))
    b.graph.inputs.append(x)
    once = b.activation_qdq(x, activation_params(0.1, 0))
    twice = b.activation_qdq(once, activation_params(0.2, 0))
    y = b.tensor("y", F, (2,))
    b.node("Relu", [twice], [y], "relu")
    b.graph.outputs.append(y)
    model = b.model()
    data = to_bytes(model)
    assert implied_tensors(data) == {"x": "QUANTIZE_DEQUANTIZE"}
    assert canonical(load(data).main) == canonical(model.main)


# ----- malformed annotations ------------------------------------------------------------------------


def _write_annotated(monkeypatch, model: ir.Model, annotations: dict[str, ImpliedQdq]) -> bytes:
    """Write ``model`` as stored, with these annotations (by tensor name), bypassing compaction."""

    def annotate(graph: ir.Graph):
        return graph, {graph.tensor_index(name): kind for name, kind in annotations.items()}

    monkeypatch.setattr(writer.qdq, "compact", annotate)
    return to_bytes(model)


def _stored_model(**tensor_changes) -> ir.Model:
    """A stored graph: x (float input) → Conv(x, w int8 constant) → y; ``tensor_changes`` edit w."""
    quant = ir.QuantParams(np.array([0.5, 0.25], np.float32), np.zeros(2, np.int64), axis=0, bits=8,
                           symmetric=True)
    w = ir.Tensor("w", I8, (2, 1, 1, 1), np.array([1, -2], np.int8).reshape(2, 1, 1, 1), quant)
    w = dataclasses.replace(w, **tensor_changes)
    graph = ir.Graph("main", [ir.Tensor("x", F, ("N", 1, 3, 3)), w, ir.Tensor("y", F, ("N", 2, 3, 3))],
                     [ir.Node("Conv", [0, 1], [2], name="conv")], inputs=[0], outputs=[2])
    return ir.Model([graph])


def test_a_hand_written_annotation_expands(monkeypatch):
    model = _stored_model()
    model.main.tensors[0].quant = ir.QuantParams(np.array([0.1], np.float32), np.array([-3]), bits=8, signed=True)
    data = _write_annotated(monkeypatch, model, {"w": ImpliedQdq.DEQUANTIZE, "x": ImpliedQdq.QUANTIZE_DEQUANTIZE})
    graph = load(data).main
    assert [n.name for n in graph.nodes] == ["x_QuantizeLinear", "x_DequantizeLinear", "w_DequantizeLinear", "conv"]
    conv = graph.nodes[-1]
    assert [graph.tensors[i].name for i in conv.inputs] == ["x_dequantized", "w_dequantized"]
    assert graph.nodes[2].attributes["axis"].value == 0
    # x's pair quantizes to int8 (8 bits, signed), so its zero point is INT8
    zero_point = graph.tensors[graph.tensor_index("x_zero_point")]
    assert zero_point.dtype == DataType.INT8 and zero_point.data.tolist() == -3
    assert graph.tensors[graph.tensor_index("x_quantized")].dtype == DataType.INT8


def _quant(**changes) -> ir.QuantParams:
    base = ir.QuantParams(np.array([0.5, 0.25], np.float32), np.zeros(2, np.int64), axis=0, bits=8, symmetric=True)
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    "changes, annotations, message",
    [
        ({"quant": None}, {"w": ImpliedQdq.DEQUANTIZE}, r"tensor 1 \('w'\): DEQUANTIZE implies QDQ nodes but has no quantization"),
        ({"quant": _quant(scale=np.array([0.5, 0.25, 1.0], np.float32), zero_point=np.zeros(3))},
         {"w": ImpliedQdq.DEQUANTIZE}, r"'w'\) quantization: 3 scales, but axis 0 of shape \(2, 1, 1, 1\) needs 2"),
        ({"quant": _quant(axis=4)}, {"w": ImpliedQdq.DEQUANTIZE}, r"'w'\) quantization: axis 4 is out of range for rank 4"),
        ({"dtype": DataType.INT64, "data": np.array([1, -2], np.int64).reshape(2, 1, 1, 1)},
         {"w": ImpliedQdq.DEQUANTIZE}, r"'w'\): DEQUANTIZE implies a DequantizeLinear, which does not read INT64"),
        ({"quant": _quant(bits=4)}, {"w": ImpliedQdq.DEQUANTIZE}, r"'w'\): DEQUANTIZE is INT8 but its quantization parameters say 4-bit signed"),
        ({"quant": _quant(block_size=1, axis=1, scale=np.ones(2, np.float32))}, {"w": ImpliedQdq.DEQUANTIZE},
         r"'w'\): DEQUANTIZE implies QDQ nodes, which need per-tensor or per-axis"),
        ({"quant": _quant(signed=False, zero_point=np.array([0, 300]))}, {"w": ImpliedQdq.DEQUANTIZE},
         r"'w'\): DEQUANTIZE is INT8 but its quantization parameters say 8-bit unsigned"),
        ({"dtype": DataType.UINT8, "data": np.array([1, 2], np.uint8).reshape(2, 1, 1, 1),
          "quant": _quant(signed=False, zero_point=np.array([0, 300]))}, {"w": ImpliedQdq.DEQUANTIZE},
         r"'w'\): DEQUANTIZE has zero points outside the range of UINT8"),
        ({}, {"w": ImpliedQdq.QUANTIZE_DEQUANTIZE}, r"'w'\): QUANTIZE_DEQUANTIZE implies a QuantizeLinear, which needs a FLOAT value"),
        ({}, {"x": ImpliedQdq.DEQUANTIZE}, r"'x'\): DEQUANTIZE implies QDQ nodes but has no quantization"),
    ],
)
def test_malformed_annotations_name_the_tensor_and_the_problem(monkeypatch, changes, annotations, message):
    data = _write_annotated(monkeypatch, _stored_model(**changes), annotations)
    with pytest.raises(ModelFormatError, match=message):
        load(data)


def test_annotations_need_a_place_in_the_graph(monkeypatch):
    model = _stored_model()
    model.main.tensors[2].quant = activation_params(0.1, 0)
    with pytest.raises(ModelFormatError, match=r"'y'\): QUANTIZE_DEQUANTIZE on a graph output"):
        load(_write_annotated(monkeypatch, model, {"y": ImpliedQdq.QUANTIZE_DEQUANTIZE}))
    model = _stored_model()
    model.main.tensors.append(ir.Tensor("floating", F, (1,), quant=activation_params(0.1, 0)))
    with pytest.raises(ModelFormatError, match=r"'floating'\): QUANTIZE_DEQUANTIZE on a value that is neither"):
        load(_write_annotated(monkeypatch, model, {"floating": ImpliedQdq.QUANTIZE_DEQUANTIZE}))


def test_implied_names_must_be_free(monkeypatch):
    model = _stored_model()
    model.main.tensors.append(ir.Tensor("w_scale", F, (), np.float32(1)))
    with pytest.raises(ModelFormatError, match=r"implied by tensor 'w' need a tensor named 'w_scale'"):
        load(_write_annotated(monkeypatch, model, {"w": ImpliedQdq.DEQUANTIZE}))


def test_annotations_in_a_format_1_file_are_rejected(monkeypatch):
    model = dataclasses.replace(_stored_model(), version=(1, 3))
    monkeypatch.setattr(writer, "COMPACT_SINCE", (1, 0))
    with pytest.raises(ModelFormatError, match=r"'w'\): implied QDQ nodes \(DEQUANTIZE\) need format 2.0, the file says 1.3"):
        load(_write_annotated(monkeypatch, model, {"w": ImpliedQdq.DEQUANTIZE}))


def test_annotations_on_tensor_attributes_are_rejected(monkeypatch):
    model = _stored_model()
    constant = dataclasses.replace(model.main.tensors[1])
    model.main.nodes[0].attributes["value"] = ir.Attribute(ir.AttributeType.TENSOR, constant)
    original = writer._Encoder.tensor

    def tensor(self, value, where, implied=ImpliedQdq.NONE, *rest):
        return original(self, value, where, ImpliedQdq.DEQUANTIZE if "attribute" in where else implied, *rest)

    monkeypatch.setattr(writer._Encoder, "tensor", tensor)
    with pytest.raises(ModelFormatError, match="implied QDQ nodes .DEQUANTIZE. on a tensor attribute"):
        load(to_bytes(model))


# ----- the verifier's budget with shared items ------------------------------------------------------


def test_heavily_shared_files_stay_within_the_verifier_budget():
    graph = ir.Graph("many")
    shape = tuple(f"d{i}" for i in range(8))
    graph.tensors.append(ir.Tensor("t0", F, shape))
    graph.inputs.append(0)
    pads = {"pads": ir.Attribute(ir.AttributeType.INTS, [0] * 8), "mode": ir.Attribute(ir.AttributeType.STRING, b"constant")}
    for i in range(1, 3000):
        graph.tensors.append(ir.Tensor(f"t{i}", F, shape))
        graph.nodes.append(ir.Node("Pad", [i - 1], [i], dict(pads), name=f"p{i}"))
    graph.outputs.append(len(graph.tensors) - 1)
    data = to_bytes(ir.Model([graph]))
    assert len(load(data).main.nodes) == 2999


def test_offsets_aliasing_one_long_vector_exhaust_the_budget(monkeypatch):
    # A writer told to share anything points 3000 nodes at one 20,000-element attribute: a small
    # file whose walk would take millions of steps. The verifier stops it.
    monkeypatch.setattr(writer, "SHARED_WALK_COST", 1 << 40)
    graph = ir.Graph("hostile", [ir.Tensor(f"t{i}", F, (1,)) for i in range(3000)], inputs=[0])
    long = {"pads": ir.Attribute(ir.AttributeType.INTS, list(range(20_000)))}
    graph.nodes = [ir.Node("Pad", [i - 1], [i], dict(long), name="p") for i in range(1, 3000)]
    data = to_bytes(ir.Model([graph]))
    with pytest.raises(ModelFormatError, match="refers to the same data too many times"):
        load(data)


# ----- damaged compact files -------------------------------------------------------------------------

COMPACT = to_bytes(conv_qdq_model())


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_byte_flips_of_a_compact_file_raise_only_model_format_error(data):
    raw = bytearray(COMPACT)
    header_end = 4 + int.from_bytes(raw[:4], "little")
    for _ in range(data.draw(st.integers(1, 6))):
        position = data.draw(st.integers(0, header_end - 1))
        raw[position] = data.draw(st.integers(0, 255))
    try:
        model = load(bytes(raw))
    except ModelFormatError:
        return
    # What loads is explicit and consistent: writing it again and reading it gives the same graph.
    assert canonical(load(to_bytes(model)).main) == canonical(model.main)


def test_an_unnamed_tensor_cannot_imply_qdq_nodes():
    # A byte flip that empties the bias's name loaded as a graph the writer could not write back in the
    # same form (its implied nodes would be named "_DequantizeLinear"); the reader refuses it instead.
    raw = bytearray(COMPACT)
    name = bytes(raw).find(b"\x01\x00\x00\x00b\x00")  # the bias's name: length 1, "b", NUL
    assert name > 0
    raw[name] = 0
    with pytest.raises(ModelFormatError, match="has no name"):
        load(bytes(raw))
