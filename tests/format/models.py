"""Explicit QDQ graphs for the format tests, helpers to compare graphs and look into stored files,
and the format 1.0 and 2.0 golden files.

    python -m tests.format.models    # rewrite tests/format/qdq_v1_0.lite and qdq_v2_0.lite

Each golden file was first written by its format's writer; a model whose ``version`` is 1.x (2.0)
is still written byte for byte as that writer wrote it (``test_format_1_0_files_are_written_and_read_unchanged``,
``test_format_2_0_files_keep_their_bias_scales``), so this script regenerates the same bytes.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lite.format import ir, save
from lite.format.dtypes import DataType
from lite.format.qdq import ImpliedQdq
from lite.format.verifier import verify_flatbuffer

GOLDEN_V1_0 = Path(__file__).with_name("qdq_v1_0.lite")
GOLDEN_V2_0 = Path(__file__).with_name("qdq_v2_0.lite")
F, U8, I8, I32 = DataType.FLOAT, DataType.UINT8, DataType.INT8, DataType.INT32
INT = ir.AttributeType.INT
INTS = ir.AttributeType.INTS


class ExplicitGraph:
    """Builds a graph with QDQ groups named as :mod:`converter.quantize.static` names them."""

    def __init__(self) -> None:
        self.graph = ir.Graph("main")

    def tensor(self, name: str, dtype: DataType, shape, data=None, quant=None) -> int:
        self.graph.tensors.append(ir.Tensor(name, dtype, None if shape is None else tuple(shape), data, quant))
        return len(self.graph.tensors) - 1

    def node(self, op_type: str, inputs: list[int], outputs: list[int], name: str, **ints) -> ir.Node:
        attributes = {key: ir.Attribute(INTS if isinstance(v, list) else INT, v) for key, v in ints.items()}
        node = ir.Node(op_type, list(inputs), list(outputs), attributes, name=name)
        self.graph.nodes.append(node)
        return node

    def constant_dq(self, base: str, values: np.ndarray, dtype: DataType, quant: ir.QuantParams) -> int:
        """``base_quantized`` → DequantizeLinear → ``base_dequantized``; returns the latter."""
        shape = () if quant.axis is None else (quant.scale.size,)
        storage = values.dtype.type
        q = self.tensor(f"{base}_quantized", dtype, values.shape, values, quant)
        s = self.tensor(f"{base}_scale", F, shape, quant.scale.reshape(shape).copy())
        z = self.tensor(f"{base}_zero_point", dtype, shape, quant.zero_point.astype(storage).reshape(shape))
        y = self.tensor(f"{base}_dequantized", F, values.shape)
        axis = {} if quant.axis is None else {"axis": quant.axis}
        self.node("DequantizeLinear", [q, s, z], [y], f"{base}_DequantizeLinear", **axis)
        return y

    def activation_qdq(self, value: int, quant: ir.QuantParams, integer: DataType = U8) -> int:
        """``value`` → QuantizeLinear → DequantizeLinear → ``<value>_dequantized``; returns the latter."""
        base, shape = self.graph.tensors[value].name, self.graph.tensors[value].shape
        storage = np.uint8 if integer == U8 else np.int8
        s = self.tensor(f"{base}_scale", F, (), np.float32(quant.scale[0]))
        z = self.tensor(f"{base}_zero_point", integer, (), np.array(quant.zero_point[0], storage))
        q = self.tensor(f"{base}_quantized", integer, shape, quant=quant)
        y = self.tensor(f"{base}_dequantized", F, shape)
        self.node("QuantizeLinear", [value, s, z], [q], f"{base}_QuantizeLinear")
        self.node("DequantizeLinear", [q, s, z], [y], f"{base}_DequantizeLinear")
        return y

    def model(self, version: tuple[int, int] = ir.FORMAT_VERSION) -> ir.Model:
        return ir.Model([self.graph], opset_imports={"": 21}, metadata={"producer": "tests"}, version=version)


def activation_params(scale: float, zero_point: int) -> ir.QuantParams:
    return ir.QuantParams(np.array([scale], np.float32), np.array([zero_point]), None, 8, signed=False)


def conv_qdq_model(version: tuple[int, int] = ir.FORMAT_VERSION) -> ir.Model:
    """x → Q/DQ → Conv(W int8 per channel, B int32) → c → Q/DQ → MaxPool → y.

    Every group follows the quantizer's pattern, so format 2.0 stores three tensors with implied
    nodes (c, W, B) plus x, and no Q/DQ node.
    """
    rng = np.random.default_rng(0)
    b = ExplicitGraph()
    x = b.tensor("x", F, ("N", 2, 5, 5))
    b.graph.inputs.append(x)
    x_params = activation_params(0.02, 128)
    x_dq = b.activation_qdq(x, x_params)
    w_scale = np.array([0.01, 0.02, 0.005], np.float32)
    w_params = ir.QuantParams(w_scale, np.zeros(3, np.int64), axis=0, bits=8, signed=True, symmetric=True)
    w_dq = b.constant_dq("w", rng.integers(-127, 128, (3, 2, 3, 3)).astype(np.int8), I8, w_params)
    b_params = ir.QuantParams(np.float32(0.02) * w_scale, np.zeros(3, np.int64), axis=0, bits=32, signed=True,
                              symmetric=True)
    b_dq = b.constant_dq("b", np.array([100, -250, 40], np.int32), I32, b_params)
    c = b.tensor("c", F, ("N", 3, 5, 5))
    b.node("Conv", [x_dq, w_dq, b_dq], [c], "conv", pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    c_dq = b.activation_qdq(c, activation_params(0.05, 10))
    y = b.tensor("y", F, ("N", 3, 2, 2))
    b.node("MaxPool", [c_dq], [y], "pool", kernel_shape=[2, 2], strides=[2, 2])
    b.graph.outputs.append(y)
    return b.model(version)


def stored(data: bytes) -> dict:
    """The main graph as stored (before the reader expands it): verifier dicts."""
    return verify_flatbuffer(memoryview(data))["graphs"][0]


def canonical(graph: ir.Graph):
    """A graph by names: tensors (type, shape, data, parameters, doc), nodes in order, inputs, outputs."""
    names = [t.name for t in graph.tensors]

    def tensor(t: ir.Tensor):
        data = None if t.data is None else (np.asarray(t.data).dtype.str, np.asarray(t.data).shape,
                                            np.asarray(t.data).tobytes())
        quant = None if t.quant is None else (t.quant.scale.tobytes(), t.quant.zero_point.tolist(), t.quant.axis,
                                              t.quant.bits, t.quant.signed, t.quant.symmetric, t.quant.block_size)
        return t.name, t.dtype, t.shape, data, quant, t.doc

    def node(n: ir.Node):
        attributes = sorted((k, int(a.type), repr(a.value)) for k, a in n.attributes.items())
        return (n.op_type, n.domain, n.name, [names[i] if i >= 0 else None for i in n.inputs],
                [names[i] if i >= 0 else None for i in n.outputs], attributes)

    return (sorted(tensor(t) for t in graph.tensors), [node(n) for n in graph.nodes],
            [names[i] for i in graph.inputs], [names[i] for i in graph.outputs])


def implied_tensors(data: bytes) -> dict[str, str]:
    return {t["name"].decode(): ImpliedQdq(t["implied_qdq"]).name for t in stored(data)["tensors"] if t["implied_qdq"]}


def implied_scale_tensors(data: bytes) -> list[str]:
    """The stored tensors whose scales the reader recomputes (format 2.1)."""
    return [t["name"].decode() for t in stored(data)["tensors"] if t["quant"] is not None and t["quant"]["implied_scale"]]


def stored_ops(data: bytes) -> list[str]:
    return [n["op_type"].decode() for n in stored(data)["nodes"]]


def main() -> None:
    for version, path in (((1, 0), GOLDEN_V1_0), ((2, 0), GOLDEN_V2_0)):
        save(conv_qdq_model(version=version), path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
