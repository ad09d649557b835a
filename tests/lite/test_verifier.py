"""The verifier: damaged or hostile files raise ModelFormatError, never anything else."""

from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lite.errors import ModelFormatError
from lite.format import GraphBuilder, ir, load, to_bytes
from lite.format.dtypes import DataType
from tests.lite.damaged_models import damaged_cases, damaged_model
from tests.lite.strategies import models
from tests.lite.test_format import tiny_model

VALID = to_bytes(tiny_model())


def load_or_format_error(data: bytes) -> None:
    start = time.perf_counter()
    try:
        load(data)
    except ModelFormatError:
        pass
    assert time.perf_counter() - start < 1.0


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_byte_flips_raise_only_model_format_error(data):
    raw = bytearray(VALID)
    for _ in range(data.draw(st.integers(1, 8))):
        position = data.draw(st.integers(0, len(raw) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    load_or_format_error(bytes(raw))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, len(VALID) - 1))
def test_truncations_raise_only_model_format_error(length):
    load_or_format_error(VALID[:length])


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=1, max_size=200))
def test_extensions_raise_only_model_format_error(tail):
    load_or_format_error(VALID + tail)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), st.data())
def test_mutated_random_models_raise_only_model_format_error(model, data):
    raw = bytearray(to_bytes(model))
    flatbuffer_end = 4 + int.from_bytes(raw[:4], "little")
    for _ in range(data.draw(st.integers(1, 6))):
        position = data.draw(st.integers(0, min(len(raw), flatbuffer_end) - 1))
        raw[position] = data.draw(st.integers(0, 255))
    load_or_format_error(bytes(raw))


def graph_with(**changes) -> ir.Model:
    model = tiny_model()
    for key, value in changes.items():
        setattr(model.main, key, value)
    return model


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda m: setattr(m.main.nodes[0], "inputs", [0, 7]), r"inputs\[1\] = 7 is not a tensor index"),
        (lambda m: setattr(m.main.nodes[0], "outputs", [1]), "produced by node 0.*already a graph input, a constant"),
        (lambda m: setattr(m.main, "outputs", [5]), r"outputs\[0\] = 5 is not a tensor index"),
        (lambda m: m.main.nodes.insert(0, ir.Node("Relu", [2], [2])), "reads 'y' before anything produces it"),
        (lambda m: m.main.tensors.append(ir.Tensor("y", DataType.FLOAT)), "tensor name 'y' is used twice"),
        (lambda m: setattr(m.main.nodes[0], "attributes", {"body": ir.Attribute(ir.AttributeType.GRAPH, 0)}),
         "graph index 0 is not a subgraph"),
    ],
)
def test_semantic_errors_name_what_and_where(mutate, message):
    model = tiny_model()
    mutate(model)
    with pytest.raises(ModelFormatError, match=message):
        load(to_bytes(model))


def test_buffer_size_must_match_shape_times_dtype():
    raw = bytearray(VALID)
    # Declare the weight as 4x3 instead of 4x2 by patching the writer's input.
    model = tiny_model()
    model.main.tensors[1].shape = (4, 3)
    model.main.tensors[1].data = np.zeros(12, np.float32)
    data = bytearray(to_bytes(model))
    # Now shrink the buffer length field: find the 48-byte length (12 floats) and make it 32.
    index = data.find((48).to_bytes(8, "little"))
    data[index:index + 8] = (32).to_bytes(8, "little")
    with pytest.raises(ModelFormatError, match=r"holds 32 bytes, but FLOAT x \(4, 3\) needs 48"):
        load(bytes(data))
    assert raw  # the valid file is untouched


def test_cyclic_subgraph_references_are_rejected():
    body = ir.Graph("body", nodes=[], tensors=[])
    model = tiny_model()
    body.nodes.append(ir.Node("If", [], [], {"then_branch": ir.Attribute(ir.AttributeType.GRAPH, 1)}))
    model.graphs.append(body)
    with pytest.raises(ModelFormatError, match="contains itself"):
        load(to_bytes(model))


def test_not_a_lite_file():
    with pytest.raises(ModelFormatError, match="not a .lite file: expected identifier b'LITE'"):
        load(b"\0" * 64)


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.lite"
    empty.write_bytes(b"")
    with pytest.raises(ModelFormatError, match="empty"):
        load(empty)
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "missing.lite")
    with pytest.raises(ModelFormatError, match="directory"):
        load(tmp_path)


def test_hostile_vector_length_does_not_allocate():
    # A vector count of 2**31 must be rejected by a bounds check, not attempted.
    raw = bytearray(VALID)
    for position in range(12, len(raw) - 4, 4):
        mutated = bytearray(raw)
        mutated[position:position + 4] = (0x7FFFFFFF).to_bytes(4, "little")
        load_or_format_error(bytes(mutated))


def test_scales_must_be_positive():
    b = GraphBuilder("q")
    quant = ir.QuantParams(np.array([0.0], np.float32), np.zeros(1, np.int64))
    b.graph.tensors.append(ir.Tensor("w", DataType.INT8, (2,), np.zeros(2, np.int8), quant))
    with pytest.raises(ModelFormatError, match="scales must be finite and positive"):
        load(to_bytes(b.build()))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
@pytest.mark.parametrize("case", list(damaged_cases()))
def test_damaged_opsets_and_fused_activations_are_refused_by_every_load(case, device):
    import lite

    if device == "cpu":
        pytest.importorskip("onnxruntime")
    options, expected = damaged_cases()[case]
    data = damaged_model(**options)
    with pytest.raises(ModelFormatError, match=expected) as info:
        lite.Model.load(data, device=device)
    if "opset" not in options:
        assert "node 0 ('matmul')" in str(info.value)
    with pytest.raises(ModelFormatError, match=expected):
        load(data)


def test_valid_fused_activations_load():
    for name, params in (("Relu", []), ("Clip", [0.0, 6.0]), ("LeakyRelu", [0.1])):
        extra = {"fused_activation_params": params} if params else {}
        model = load(damaged_model(fused_activation=name, **extra))
        assert bytes(model.main.nodes[0].attributes["fused_activation"].value) == name.encode()


def test_a_file_written_by_an_older_flatbuffers_builder_loads():
    """flatbuffers' Python builder before 25 recorded a table whose 8-byte field sits at offset 4
    with an object size of 8 (the field runs past it, not past the buffer); flatc and flatbuffers'
    own verifier read such files, and the verifier refused them. The file is the README's
    GraphBuilder example (x [N, 4] @ ones [4, 2], then Relu) saved with flatbuffers 25.9.23."""
    from pathlib import Path

    import lite

    path = Path(__file__).parents[1] / "fixtures" / "flatbuffers" / "written_by_25.9.23.lite"
    outputs = lite.Model.load(path, device="numpy").predict({"x": np.ones((3, 4), np.float32)})
    np.testing.assert_array_equal(outputs["y"], np.full((3, 2), 4, np.float32))
