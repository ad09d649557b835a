"""The float form of a QDQ model: the same layers on dequantized weights, without int8 kernels.

A static int8 model (``lite convert --quant int8``) holds int8 weights read through
``DequantizeLinear`` and activations rounded through ``QuantizeLinear → DequantizeLinear`` pairs
(https://onnx.ai/onnx/operators/onnx__DequantizeLinear.html); ONNX Runtime fuses each layer with
the pairs around it into an int8 kernel (QLinearConv, QGemm, ...). Where those kernels are slower
than its float ones (x86 without VNNI, where they also need uint8 weights to stay exact, see
:mod:`lite.engines.ort.unsigned`; small layers, where fixed costs dominate), the engine can run
this form instead (:mod:`lite.engines.ort.int8_choice` decides):

- a ``DequantizeLinear`` of constants becomes the float constant it computes, once, at load::

      w_float = (w − zero_point) · scale        (scale, zero_point broadcast along ``axis``)

- a ``QuantizeLinear`` whose every reader is a ``DequantizeLinear`` disappears with them: the
  readers take the float value the pair rounded. Where the pair's zero point is the bottom of
  the integer range it also clamped at 0, which may stand for a Relu the quantizer removed: a
  Relu takes its place unless the value cannot be negative (see ``_FloatForm.clamp_from_zero``)::

      x ──Conv──Add──Q(zp=0)──DQ──►        becomes        x ──Conv──Add──Relu──►

The result computes each layer in float32 on the weights the int8 model stores: the weight
rounding stays, the activation rounding goes, so it is closer to the float model than int8
kernels are. :func:`float_form` declines (returns the reason) when anything integer would remain:
integer ops (``QLinearConv``, ``MatMulInteger``, ``DynamicQuantizeLinear`` ...), a quantized value
read by anything but ``DequantizeLinear``, blocked quantization.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lite.format.ir import fresh_name
from lite.format.onnx.lower import EXTERNAL_MIN_BYTES, Lowered

_QUANTIZE = {"QuantizeLinear", "DequantizeLinear"}
_INTEGER_TYPES = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT4,
                  TensorProto.UINT4}


def float_form(lowered: Lowered) -> Lowered | str:
    """The float form of ``lowered`` (a new model; the weights it keeps are shared), or the reason
    there is none."""
    model = onnx.ModelProto()
    model.CopyFrom(lowered.model)
    result = Lowered(model, dict(lowered.external))
    reason = _FloatForm(result).run()
    return reason if reason is not None else result


# Ops that pass values through unchanged: their output's range is their input's, already clamped.
_PASS_THROUGH = {"MaxPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity"}
# Ops whose output is >= 0 whatever their inputs; ops whose output is >= 0 when all their inputs
# are, or when their first (data) input is.
_NON_NEGATIVE = {"Relu", "Sigmoid", "HardSigmoid", "Softmax", "Exp", "Abs", "ReduceL1", "ReduceL2", "ReduceSumSquare"}
_SIGN_OF_ALL_INPUTS = {"Add", "Mul", "Div", "Concat", "Max", "Min", "Sum", "Mean", "Pad"}
_SIGN_OF_FIRST_INPUT = _PASS_THROUGH | {"AveragePool", "GlobalAveragePool", "GlobalMaxPool", "ReduceMean", "ReduceMax",
                                        "ReduceMin", "ReduceSum", "Resize", "Slice", "Split", "Gather", "Expand", "Tile"}
_MAX_DEPTH = 64
_RANGES = {TensorProto.UINT8: (0, 255), TensorProto.INT8: (-128, 127), TensorProto.UINT16: (0, 65535),
           TensorProto.INT16: (-32768, 32767)}


class _FloatForm:
    def __init__(self, lowered: Lowered) -> None:
        self.lowered = lowered
        self.graph = lowered.model.graph
        self.initializers = {init.name: init for init in self.graph.initializer}
        self.outputs = {value.name for value in self.graph.output}
        self.producers = {name: node for node in self.graph.node for name in node.output}
        self.readers: dict[str, list[onnx.NodeProto]] = {}
        for node in self.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)
        self.taken = set(self.initializers) | set(self.producers) | {v.name for v in self.graph.input}
        self.taken |= {node.name for node in self.graph.node}
        self.renamed: dict[str, str] = {}  # DequantizeLinear output -> the float value that replaces it
        self.dropped: set[str] = set()  # output names of the nodes that go
        self.returned: dict[str, str] = {}  # DequantizeLinear output the graph returns -> the float value
        self.relus: dict[str, onnx.NodeProto] = {}  # value -> the Relu added after it
        self.orphans: set[str] = set()  # outputs of nodes that go once nothing reads them (int8-dynamic's)
        self.signs: dict[str, bool] = {}  # value -> whether it is >= 0 by construction

    def constant(self, name: str) -> np.ndarray | None:
        if name not in self.initializers:
            return None
        if name in self.lowered.external:
            return self.lowered.external[name]
        return numpy_helper.to_array(self.initializers[name])

    def run(self) -> str | None:
        for node in list(self.graph.node):
            if node.op_type == "MatMulInteger" and node.domain in ("", "ai.onnx"):
                reason = self.unquantize_matmul(node)
                if reason is not None:
                    return reason
                continue
            handled = node.output[0] in self.dropped or node.output[0] in self.returned
            if node.domain not in ("", "ai.onnx") or node.op_type not in _QUANTIZE or handled:
                continue
            if any(a.name == "block_size" and a.i for a in node.attribute):
                return f"{node.name or node.op_type}: blocked quantization"
            if node.op_type == "DequantizeLinear" and all(self.constant(n) is not None for n in node.input if n):
                reason = self.fold(node)
            elif node.op_type == "QuantizeLinear":
                reason = self.unround(node)
            else:
                reason = f"{node.name}: a DequantizeLinear of a value no QuantizeLinear made here"
            if reason is not None:
                return reason
        if not self.dropped:
            return "the model quantizes nothing"
        self.rebuild()
        return _integer_left(self.graph)

    def unquantize_matmul(self, node: onnx.NodeProto) -> str | None:
        """int8-dynamic's layer (converter.quantize: ``lite convert --quant int8-dynamic``)::

            x ──DynamicQuantizeLinear──► (xq, xs, xz)
            MatMulInteger(xq, Wq, xz, Wz) ──Cast(float)──Mul(xs · Ws)──►

        computes ``x`` rounded to uint8 times ``(Wq − Wz) · Ws``; its float form is
        ``MatMul(x, (Wq − Wz) · Ws)``, written in place of the Mul.
        """
        inputs = list(node.input) + [""] * (4 - len(node.input))
        quantizer = self.producers.get(inputs[0])
        weights, weight_zero = self.constant(inputs[1]), self.constant(inputs[3]) if inputs[3] else np.zeros((), np.int8)
        if (quantizer is None or quantizer.op_type != "DynamicQuantizeLinear" or list(quantizer.output)[::2] !=
                [inputs[0], inputs[2]] or weights is None or weight_zero is None or weights.ndim != 2):
            return f"{node.name}: a MatMulInteger that is not int8-dynamic's (DynamicQuantizeLinear input, constant weights)"
        cast = self.sole(node.output[0], "Cast")
        scaled = self.sole(cast.output[0], "Mul") if cast is not None else None
        if cast is None or scaled is None or not any(a.name == "to" and a.i == TensorProto.FLOAT for a in cast.attribute):
            return f"{node.name}: its product is not cast to float and scaled"
        scale = next((name for name in scaled.input if name != cast.output[0]), "")
        product = self.producers.get(scale)
        weight_scale = None
        if product is not None and product.op_type == "Mul" and quantizer.output[1] in product.input:
            weight_scale = self.constant(next((n for n in product.input if n != quantizer.output[1]), ""))
        if weight_scale is None or weight_scale.dtype != np.float32:
            return f"{node.name}: its scale is not the input's times a constant"
        value = (weights.astype(np.float32) - weight_zero.astype(np.float32)) * weight_scale
        name = self.fresh(f"{inputs[1]}_dequantized")
        self.add_weight(name, np.ascontiguousarray(value, dtype=np.float32))
        scaled.op_type = "MatMul"  # keeps its output and place; x is computed before it
        scaled.input[:] = [quantizer.input[0], name]
        self.dropped.update((node.output[0], cast.output[0]))
        self.orphans.update((*quantizer.output, *product.output))
        return None

    def sole(self, value: str, op_type: str) -> onnx.NodeProto | None:
        """The one reader of ``value``, when it is an ``op_type`` node."""
        readers = self.readers.get(value, [])
        ok = len(readers) == 1 and readers[0].op_type == op_type and value not in self.outputs
        return readers[0] if ok else None

    def add_weight(self, name: str, value: np.ndarray) -> None:
        if value.nbytes >= EXTERNAL_MIN_BYTES:  # handed to the session as it is, like the lowering's weights
            self.lowered.external[name] = value
            self.graph.initializer.append(_external(name, value))
        else:
            self.graph.initializer.append(numpy_helper.from_array(value, name))
        self.initializers[name] = self.graph.initializer[-1]

    def fold(self, node: onnx.NodeProto) -> str | None:
        """A DequantizeLinear of constants: the float constant it computes."""
        value = _dequantize(node, self.constant)
        if value is None:
            return f"{node.name}: cannot dequantize its constants"
        name = node.output[0]
        self.add_weight(name, value)
        self.dropped.add(name)
        return None

    def unround(self, node: onnx.NodeProto) -> str | None:
        """A QuantizeLinear and its DequantizeLinear readers: the value they round, clamped where
        the pair's clamp may stand for a Relu or Clip the quantizer removed."""
        pair = self.readers.get(node.output[0], [])
        if node.output[0] in self.outputs or not pair or any(r.op_type != "DequantizeLinear" for r in pair):
            return f"{node.name}: its quantized value is read by more than DequantizeLinear nodes"
        bounds = self.bounds(node)
        if bounds is None:
            return f"{node.name}: its scale or zero point is not a constant"
        source = self.renamed.get(node.input[0], node.input[0])  # through requantizations
        if bounds[0] == 0.0:
            source = self.clamp_from_zero(source)
        for reader in pair:
            if reader.output[0] in self.outputs:  # the graph returns it: an Identity keeps its name
                self.returned[reader.output[0]] = source
            else:
                self.renamed[reader.output[0]] = source
                self.dropped.add(reader.output[0])
        self.dropped.add(node.output[0])
        return None

    def bounds(self, node: onnx.NodeProto) -> tuple[float, float] | None:
        """The float range the pair can represent: (q_min − zero point) · scale ... (q_max − ...)."""
        scale = self.constant(node.input[1])
        zero = self.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
        if scale is None or scale.size != 1 or (len(node.input) > 2 and node.input[2] and zero is None):
            return None
        if zero is not None:
            kind = self.initializers[node.input[2]].data_type
        else:
            kind = next((a.i for a in node.attribute if a.name == "output_dtype" and a.i), TensorProto.UINT8)
        if kind not in _RANGES or (zero is not None and zero.size != 1):
            return None
        low, high = _RANGES[kind]
        offset = float(zero.reshape(-1)[0]) if zero is not None else 0.0
        step = float(scale.reshape(-1)[0])
        return (low - offset) * step, (high - offset) * step

    def clamp_from_zero(self, value: str) -> str:
        """``value`` where a pair clamps it from 0 (its zero point at the bottom of the integer range).

        The quantizer may have removed a Relu or Clip(0, c) after the producer and left the clamp
        to the pair (converter.quantize.quantizers; ONNX Runtime's quantizer removes them too), so
        a clamp at 0 comes back wherever it can change a value: as a Relu, which ONNX Runtime fuses
        into the Conv (+ Add) before it. The top of the pair's range is not restored: it is where
        int8 saturates, and a Clip there would cost that fusion (ResNet-18 1.08x, RegNet 1.2x,
        DenseNet 1.15x the float model's time); a removed Clip(0, c) with c below the values that
        reach it would be the one case where the float form differs (see :func:`float_form`).
        """
        producer = self.producers.get(value)
        if producer is None or producer.op_type in _PASS_THROUGH | _QUANTIZE or self.non_negative(value):
            return value  # a graph input (nothing was removed), values clamped where they came from, or >= 0
        if value not in self.relus:
            name = self.fresh(f"{value}/relu")
            self.relus[value] = helper.make_node("Relu", [value], [name], name=name)
            self.signs[name] = True
            declared = next((info for info in self.graph.value_info if info.name == value), None)
            if declared is not None:  # the same type and shape (rewrites and fusions read them)
                self.graph.value_info.add().CopyFrom(declared)
                self.graph.value_info[-1].name = name
        return self.relus[value].output[0]

    def scalar_input(self, node: onnx.NodeProto, slot: int, default: float) -> float | None:
        """A scalar constant input (``default`` when absent), or None when it is not a constant."""
        if len(node.input) <= slot or not node.input[slot]:
            return default
        value = self.constant(node.input[slot])
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def non_negative(self, value: str, depth: int = 0) -> bool:
        """Whether ``value`` is >= 0 by construction (a clamp at 0 then changes nothing)."""
        if value in self.signs:
            return self.signs[value]
        producer = self.producers.get(value)
        constant = self.constant(value)
        if constant is not None or producer is None:
            answer = constant is not None and bool(np.all(constant >= 0))
        elif depth > _MAX_DEPTH:
            answer = False  # undecided: the clamp stays
        elif producer.op_type in _NON_NEGATIVE:
            answer = True
        elif producer.op_type == "Clip":
            low = self.scalar_input(producer, 1, -np.inf)
            answer = low is not None and low >= 0.0
        elif producer.op_type in _SIGN_OF_ALL_INPUTS:
            answer = all(self.non_negative(self.renamed.get(name, name), depth + 1) for name in producer.input if name)
        elif producer.op_type in _SIGN_OF_FIRST_INPUT:
            answer = self.non_negative(self.renamed.get(producer.input[0], producer.input[0]), depth + 1)
        else:
            answer = False
        self.signs[value] = answer
        return answer

    def add_scalar(self, base: str, value: float) -> str:
        name = self.fresh(base)
        proto = numpy_helper.from_array(np.array(value, np.float32), name)
        self.graph.initializer.append(proto)
        self.initializers[name] = proto
        return name

    def fresh(self, base: str) -> str:
        name = fresh_name(base, self.taken)
        self.taken.add(name)
        return name

    def rebuild(self) -> None:
        """The kept nodes in order, reading the float values, each added Relu right after the
        producer of its input."""
        after: dict[str, list[onnx.NodeProto]] = {}
        for source, relu in self.relus.items():
            after.setdefault(source, []).append(relu)
        nodes = []
        for node in self.graph.node:
            if any(name in self.dropped for name in node.output):
                continue
            if node.output[0] in self.returned:
                nodes.append(helper.make_node("Identity", [self.returned[node.output[0]]], [node.output[0]], name=node.name))
                continue
            node.input[:] = [self.renamed.get(name, name) for name in node.input]
            nodes.append(node)
            for name in node.output:
                nodes.extend(after.get(name, []))
        while True:  # int8-dynamic's input quantizers and scale products, once no layer reads them
            read = {name for node in nodes for name in node.input} | self.outputs
            unread = [node for node in nodes if set(node.output) <= self.orphans and not set(node.output) & read]
            if not unread:
                break
            nodes = [node for node in nodes if not any(node is gone for gone in unread)]
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        _drop_unread(self.lowered)


def _dequantize(node: onnx.NodeProto, constant) -> np.ndarray | None:
    x = constant(node.input[0])
    scale = constant(node.input[1])
    zero = constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if x is None or scale is None or scale.dtype != np.float32:
        return None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
    shape = [1] * x.ndim
    if scale.ndim == 1 and scale.size > 1:
        shape[axis % x.ndim] = scale.size
    values = x.astype(np.float32)
    if zero is not None:
        values = values - zero.astype(np.float32).reshape(shape if zero.size > 1 else ())
    return np.ascontiguousarray(values * scale.reshape(shape if scale.size > 1 else ()), dtype=np.float32)


def _external(name: str, value: np.ndarray) -> TensorProto:
    """An initializer whose array the session receives itself (see lite.format.onnx.lower)."""
    proto = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(value.shape))
    proto.data_location = TensorProto.EXTERNAL
    for key, text in (("location", "lite-in-memory"), ("offset", "0"), ("length", str(value.nbytes))):
        entry = proto.external_data.add()
        entry.key, entry.value = key, text
    return proto


def _drop_unread(lowered: Lowered) -> None:
    graph = lowered.model.graph
    read = {name for node in graph.node for name in node.input} | {value.name for value in graph.output}
    kept = [init for init in graph.initializer if init.name in read]
    for init in graph.initializer:
        if init.name not in read:
            lowered.external.pop(init.name, None)
    del graph.initializer[:]
    graph.initializer.extend(kept)
    produced = {name for node in graph.node for name in node.output}
    values = [value for value in graph.value_info if value.name in produced]  # not the rounded values that are gone
    del graph.value_info[:]
    graph.value_info.extend(values)


def _integer_left(graph: onnx.GraphProto) -> str | None:
    """The first node that still computes on quantized integers, if any."""
    types = {value.name: value.type.tensor_type.elem_type for value in (*graph.input, *graph.value_info)
             if value.type.HasField("tensor_type")}
    types.update({init.name: init.data_type for init in graph.initializer})
    for node in graph.node:
        if node.op_type in ("QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "DynamicQuantizeLinear",
                            "QGemm", "QLinearAdd", "QLinearMul", "QAttention", "DynamicQuantizeMatMul"):
            return f"{node.name}: {node.op_type} computes on integers"
        if node.op_type in ("Conv", "ConvTranspose", "MatMul", "Gemm") and any(
                types.get(name) in _INTEGER_TYPES for name in node.input if name):
            return f"{node.name}: {node.op_type} on integer tensors"
    return None

