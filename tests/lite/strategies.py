"""Hypothesis strategies producing random valid .lite models."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from lite.format import ir
from lite.format.dtypes import DataType, byte_size, is_subbyte, storage_dtype

AT = ir.AttributeType
_NUMERIC = [d for d in DataType if d not in (DataType.UNDEFINED, DataType.STRING)]
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789.:/", min_size=1, max_size=12)


@st.composite
def constant_tensors(draw, name: str) -> ir.Tensor:
    dtype = draw(st.sampled_from(_NUMERIC + [DataType.STRING]))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    count = int(np.prod(shape, dtype=np.int64))
    if dtype == DataType.STRING:
        data = np.array(draw(st.lists(st.binary(max_size=6), min_size=count, max_size=count)) or [], dtype=object)
        data = data.reshape(shape)
    else:
        raw = draw(st.binary(min_size=byte_size(dtype, count), max_size=byte_size(dtype, count)))
        data = np.frombuffer(raw, dtype=storage_dtype(dtype)).copy()
        data = data if is_subbyte(dtype) else data.reshape(shape)
    quant = None
    if dtype != DataType.STRING and draw(st.booleans()):
        per_axis = bool(shape) and draw(st.booleans())
        n = shape[0] if per_axis else 1
        quant = ir.QuantParams(
            scale=np.array(draw(st.lists(st.floats(2.0**-20, 10, width=32), min_size=n, max_size=n)), np.float32),
            zero_point=np.array(draw(st.lists(st.integers(-128, 255), min_size=n, max_size=n)), np.int64),
            axis=0 if per_axis else None, bits=draw(st.sampled_from([4, 8, 16])),
            signed=draw(st.booleans()), symmetric=draw(st.booleans()),
        )
    return ir.Tensor(name=name, dtype=dtype, shape=shape, data=data, quant=quant, doc=draw(st.sampled_from(["", "w"])))


dims = st.one_of(st.integers(0, 1 << 40), st.sampled_from(["N", "seq", "batch"]), st.none())


@st.composite
def value_tensors(draw, name: str) -> ir.Tensor:
    shape = draw(st.one_of(st.none(), st.lists(dims, max_size=4).map(tuple)))
    return ir.Tensor(name=name, dtype=draw(st.sampled_from(list(DataType))), shape=shape)


@st.composite
def attributes(draw, subgraphs: list[int]) -> ir.Attribute:
    choices = [AT.FLOAT, AT.INT, AT.STRING, AT.TENSOR, AT.FLOATS, AT.INTS, AT.STRINGS, AT.TENSORS]
    if subgraphs:
        choices += [AT.GRAPH, AT.GRAPHS]
    kind = draw(st.sampled_from(choices))
    floats = st.floats(allow_nan=False, width=32)
    ints = st.integers(-(1 << 63), (1 << 63) - 1)
    value = {
        AT.FLOAT: lambda: draw(floats),
        AT.INT: lambda: draw(ints),
        AT.STRING: lambda: draw(st.binary(max_size=10)),
        AT.TENSOR: lambda: draw(constant_tensors("")),
        AT.FLOATS: lambda: draw(st.lists(floats, max_size=4)),
        AT.INTS: lambda: draw(st.lists(ints, max_size=4)),
        AT.STRINGS: lambda: draw(st.lists(st.binary(max_size=5), max_size=3)),
        AT.TENSORS: lambda: draw(st.lists(constant_tensors(""), max_size=2)),
        AT.GRAPH: lambda: draw(st.sampled_from(subgraphs)),
        AT.GRAPHS: lambda: draw(st.lists(st.sampled_from(subgraphs), max_size=2)) if subgraphs else [],
    }[kind]()
    return ir.Attribute(kind, value)


@st.composite
def graphs(draw, name: str, subgraphs: list[int], captures: bool) -> ir.Graph:
    tensor_names = draw(st.lists(names, min_size=1, max_size=8, unique=True))
    tensors = []
    for tensor_name in tensor_names:
        make = constant_tensors if draw(st.booleans()) else value_tensors
        tensors.append(draw(make(tensor_name)))
    non_constant = [i for i, t in enumerate(tensors) if not t.is_constant]
    inputs = draw(st.lists(st.sampled_from(non_constant), unique=True, max_size=3)) if non_constant else []
    capture_list = []
    if captures:
        rest = [i for i in non_constant if i not in inputs]
        capture_list = draw(st.lists(st.sampled_from(rest), unique=True, max_size=2)) if rest else []
    available = set(inputs) | set(capture_list) | {i for i, t in enumerate(tensors) if t.is_constant}
    unproduced = [i for i in non_constant if i not in available]
    nodes = []
    while unproduced and draw(st.booleans()):
        count = draw(st.integers(1, min(2, len(unproduced))))
        outputs, unproduced = unproduced[:count], unproduced[count:]
        node_inputs = draw(st.lists(st.sampled_from(sorted(available) + [-1]), max_size=3)) if available else []
        node_attributes = {}
        for attribute_name in draw(st.lists(names, max_size=3, unique=True)):
            node_attributes[attribute_name] = draw(attributes(subgraphs))
        nodes.append(ir.Node(
            op_type=draw(st.sampled_from(["Conv", "Relu", "If", "Custom"])), inputs=node_inputs,
            outputs=outputs, attributes=node_attributes, domain=draw(st.sampled_from(["", "com.example"])),
            name=draw(names),
        ))
        available.update(outputs)
    outputs = draw(st.lists(st.sampled_from(sorted(available)), max_size=3)) if available else []
    return ir.Graph(name=name, tensors=tensors, nodes=nodes, inputs=inputs, outputs=outputs, captures=capture_list)


@st.composite
def models(draw) -> ir.Model:
    count = draw(st.integers(1, 3))
    # Graph i may only refer to graphs after it, so references never form a cycle.
    built = [draw(graphs(f"g{i}", list(range(max(i + 1, 1), count)), captures=i > 0)) for i in range(count)]
    metadata = draw(st.dictionaries(names, st.text(max_size=20), max_size=3))
    opsets = draw(st.dictionaries(st.sampled_from(["", "com.example", "ai.onnx.ml"]), st.integers(1, 30), max_size=3))
    return ir.Model(graphs=built, opset_imports=opsets, metadata=metadata)
