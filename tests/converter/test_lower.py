"""The ONNX → .lite translation is lossless: every node, attribute, tensor and subgraph survives.

Checked on a sample of the ONNX backend node test models (every 5th case plus every case with a
subgraph), before and after a .lite write → read round trip.
"""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import pytest
from onnx import AttributeProto, helper, numpy_helper

from converter import convert_model
from converter.lower import VALUE_TYPES_KEY
from lite.format import ir as lite_ir
from lite.format.dtypes import DataType, is_subbyte, unpack_subbyte


def _cases():
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    return cases


def _has_subgraph(model: onnx.ModelProto) -> bool:
    return any(a.type in (AttributeProto.GRAPH, AttributeProto.GRAPHS) for n in model.graph.node for a in n.attribute)


_ALL = _cases()
SAMPLE = [case for k, case in enumerate(_ALL) if k % 5 == 0 or _has_subgraph(case.model)]


def _logical(tensor: lite_ir.Tensor) -> np.ndarray:
    if is_subbyte(tensor.dtype):
        return unpack_subbyte(tensor.data, tensor.dtype, tuple(tensor.shape))
    return np.asarray(tensor.data)


def _expected(proto: onnx.TensorProto) -> np.ndarray:
    array = numpy_helper.to_array(proto)
    dtype = DataType(proto.data_type)
    if is_subbyte(dtype):
        if dtype == DataType.FLOAT4E2M1:
            return array.view(np.uint8)
        return array.astype(np.int8 if dtype in (DataType.INT4, DataType.INT2) else np.uint8)
    if dtype == DataType.BFLOAT16:
        return array.view(np.uint16)
    if array.dtype.itemsize == 1 and array.dtype.kind == "V" or "float8" in str(array.dtype):
        return array.view(np.uint8)
    return array


def assert_same_tensor(proto: onnx.TensorProto, tensor: lite_ir.Tensor, where: str) -> None:
    assert int(tensor.dtype) == proto.data_type, where
    assert tuple(tensor.shape) == tuple(proto.dims), where
    expected, got = _expected(proto), _logical(tensor)
    if expected.dtype == object:
        assert [bytes(v) for v in expected.reshape(-1)] == [bytes(v) for v in got.reshape(-1)], where
    else:
        np.testing.assert_array_equal(got.reshape(expected.shape), expected, err_msg=where)


def assert_same_attribute(proto: AttributeProto, attr: lite_ir.Attribute, model: lite_ir.Model, where: str) -> None:
    T = lite_ir.AttributeType
    value = helper.get_attribute_value(proto)
    if proto.type == AttributeProto.TYPE_PROTO:
        assert attr.type == T.STRING and attr.value.startswith((b"tensor(", b"seq(", b"optional(")), where
        return
    assert int(attr.type) == proto.type, where
    if proto.type in (AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING):
        assert attr.value == value, where
    elif proto.type in (AttributeProto.INTS, AttributeProto.FLOATS, AttributeProto.STRINGS):
        assert list(attr.value) == list(value), where
    elif proto.type == AttributeProto.TENSOR:
        assert_same_tensor(value, attr.value, where)
    elif proto.type == AttributeProto.TENSORS:
        for p, t in zip(value, attr.value, strict=True):
            assert_same_tensor(p, t, where)
    elif proto.type == AttributeProto.GRAPH:
        assert_same_graph(value, model, attr.value, where)
    elif proto.type == AttributeProto.GRAPHS:
        for p, index in zip(value, attr.value, strict=True):
            assert_same_graph(p, model, index, where)


def assert_same_graph(proto: onnx.GraphProto, model: lite_ir.Model, index: int, where: str = "") -> None:
    graph = model.graphs[index]

    def names(indices):
        return [graph.tensors[i].name if i >= 0 else "" for i in indices]

    assert names(graph.inputs) == [v.name for v in proto.input], where
    assert names(graph.outputs) == [v.name for v in proto.output], where
    for init in proto.initializer:
        assert_same_tensor(init, graph.tensors[graph.tensor_index(init.name)], f"{where}/{init.name}")
    assert len(graph.nodes) == len(proto.node), where
    defined = {v.name for v in proto.input} | {i.name for i in proto.initializer}
    defined |= {o for n in proto.node for o in n.output}
    for node_proto, node in zip(proto.node, graph.nodes):
        at = f"{where}/{node_proto.op_type}:{node_proto.name}"
        assert node.op_type == node_proto.op_type, at
        assert (node.domain or "") == ("" if node_proto.domain == "ai.onnx" else node_proto.domain), at
        assert node.name == node_proto.name, at
        assert names(node.inputs) == list(node_proto.input), at
        outputs = list(node_proto.output)
        while outputs and outputs[-1] == "":
            outputs.pop()
        assert names(node.outputs) == outputs, at
        assert set(node.attributes) == {a.name for a in node_proto.attribute}, at
        for attr_proto in node_proto.attribute:
            assert_same_attribute(attr_proto, node.attributes[attr_proto.name], model, f"{at}.{attr_proto.name}")
        for name in node_proto.input:  # reads from an enclosing graph are listed as captures
            if name and name not in defined:
                assert name in names(graph.captures), f"{at}: outer {name!r} not captured"


def assert_lossless(proto: onnx.ModelProto, model: lite_ir.Model) -> None:
    assert_same_graph(proto.graph, model, 0, proto.graph.name)
    expected_opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in proto.opset_import}
    assert model.opset_imports == expected_opsets


@pytest.mark.parametrize("case", SAMPLE, ids=[c.name for c in SAMPLE])
def test_backend_node_model_translates_losslessly(case):
    model = convert_model(case.model, optimize=False)
    assert_lossless(case.model, model)


def test_sample_covers_subgraphs_and_every_attribute_kind():
    kinds = {a.type for c in SAMPLE for n in c.model.graph.node for a in n.attribute}
    assert {AttributeProto.GRAPH, AttributeProto.TENSOR, AttributeProto.INTS, AttributeProto.STRINGS} <= kinds
    assert len(SAMPLE) > 400


def test_all_backend_node_models_translate():
    failures = []
    for case in _ALL:
        try:
            convert_model(case.model, optimize=False)
        except Exception as err:  # noqa: BLE001 (collect all, so the assertion lists them)
            failures.append(f"{case.name}: {type(err).__name__}: {err}")
    assert failures == []


def test_non_tensor_types_are_kept_in_metadata():
    case = next(c for c in _ALL if c.name == "test_sequence_insert_at_back")
    model = convert_model(case.model, optimize=False)
    assert "seq(tensor(" in model.metadata[VALUE_TYPES_KEY]


def test_metadata_names_source_and_converter():
    case = _ALL[0]
    model = convert_model(case.model, optimize=False)
    for key in ("producer", "source_sha256", "converter_version", "converter_options"):
        assert key in model.metadata
    assert len(model.metadata["source_sha256"]) == 64


ROUND_TRIP = SAMPLE[::3]


@pytest.mark.parametrize("case", ROUND_TRIP, ids=[c.name for c in ROUND_TRIP])
def test_backend_node_model_survives_lite_round_trip(case, tmp_path):
    from lite.format import load, save

    path = tmp_path / "model.lite"
    save(convert_model(case.model, optimize=False), path)
    assert_lossless(case.model, load(path))


def test_overridable_initializer_declared_with_a_symbolic_shape_becomes_a_constant():
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    import lite
    from converter import convert_model
    from lite.format import to_bytes

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "b"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["K"])],  # an input with a default value
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])],
        initializer=[numpy_helper.from_array(np.arange(3, dtype=np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    converted = convert_model(model, optimize=False)
    assert [converted.main.tensors[i].name for i in converted.main.inputs] == ["x"]
    out = lite.Model.load(to_bytes(converted), device="numpy")(np.ones(3, np.float32))
    np.testing.assert_array_equal(out, [1, 2, 3])
