"""int8 weights re-expressed as uint8, for x86 CPUs whose u8 x s8 kernels saturate.

ONNX Runtime runs a uint8-activation, int8-weight layer (U8S8) on x86 with ``vpmaddubsw``, which
adds two u8 x s8 products into a saturating 16-bit lane; without VNNI the sum overflows on real
data and the layer's output is wrong by many quantization steps (``lite.cpu.int8_products_saturate``).
Its U8U8 kernels widen to 16 bits first and are exact. The same weights as uint8 are exact too::

    w_u8 = w_s8 + 128,   zp_u8 = zp_s8 + 128   ⇒   w_u8 − zp_u8 = w_s8 − zp_s8

so this rewrite changes which kernel ONNX Runtime picks, never a result. It applies to weights
that are constants read by an integer layer whose activations are uint8:

- ``QLinearConv``/``QLinearMatMul`` (weight at input 3, its zero point at 5) and
  ``ConvInteger``/``MatMulInteger`` (weight 1, zero point 3);
- ONNX Runtime's ``QGemm`` (weight 3, zero point 5), ``MatMulIntegerToFloat`` (1, 5) and
  ``DynamicQuantizeMatMul`` (1, 3), in the com.microsoft domain: its QOperator quantizer writes
  them (a QGemm read 43 % of its peak off on an AVX2 CPU);
- QDQ: a ``DequantizeLinear`` of a constant whose every reader is the weight input of a
  Conv/ConvTranspose/MatMul/Gemm whose data input is itself dequantized from uint8.

Layers with int8 activations keep int8 weights: ONNX Runtime has no S8U8 kernel.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from lite.format.ir import fresh_name
from lite.format.onnx.lower import Lowered

# op type -> (weight input, weight zero-point input, activation zero-point input)
_INTEGER_LAYERS = {"QLinearConv": (3, 5, 2), "QLinearMatMul": (3, 5, 2), "ConvInteger": (1, 3, 2),
                   "MatMulInteger": (1, 3, 2)}
# ONNX Runtime's own integer layers (com.microsoft), as its quantization tools write them:
# op type -> (weight, weight zero point, activation zero point or None: always uint8, weight scale)
_MICROSOFT_LAYERS = {"QGemm": (3, 5, 2, 4), "MatMulIntegerToFloat": (1, 5, 4, 3), "DynamicQuantizeMatMul": (1, 3, None, 2)}
# float layers whose input 1 is the weight, fused with the surrounding QDQ nodes by ONNX Runtime
_QDQ_LAYERS = {"Conv", "ConvTranspose", "MatMul", "Gemm"}


def unsigned_weights(lowered: Lowered) -> Lowered:
    """``lowered`` with the weights of its uint8-activation integer layers stored as uint8
    (modified in place and returned). Only the main graph is rewritten."""
    _Rewrite(lowered).run()
    return lowered


class _Rewrite:
    def __init__(self, lowered: Lowered) -> None:
        self.lowered = lowered
        self.graph = lowered.model.graph
        self.initializers = {init.name: init for init in self.graph.initializer}
        self.producers = {out: node for node in self.graph.node for out in node.output if out}
        self.readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
        for node in self.graph.node:
            for slot, name in enumerate(node.input):
                self.readers.setdefault(name, []).append((node, slot))
        self.taken = {value.name for value in self.graph.value_info} | set(self.initializers) | set(self.producers)
        self.taken |= {value.name for value in self.graph.input}
        self.converted: dict[str, str] = {}

    def run(self) -> None:
        for node in list(self.graph.node):
            if node.op_type in _INTEGER_LAYERS and node.domain in ("", "ai.onnx"):
                self.integer_layer(node)
            elif node.op_type in _MICROSOFT_LAYERS and node.domain == "com.microsoft":
                self.microsoft_layer(node)
            elif node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
                self.dequantized_weight(node)
        used = {name for node in self.graph.node for name in node.input}
        used |= {value.name for value in self.graph.output}
        for name in list(self.converted):
            if name not in used:
                self.remove(name)

    def integer_layer(self, node: onnx.NodeProto) -> None:
        weight, weight_zero, activation_zero = _INTEGER_LAYERS[node.op_type]
        activation = node.input[activation_zero] if len(node.input) > activation_zero else ""
        if not self.is_uint8(activation or node.input[0]) or not self.is_int8_constant(node, weight, weight_zero):
            return
        self.swap(node, weight, weight_zero, scale=None)

    def microsoft_layer(self, node: onnx.NodeProto) -> None:
        """QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul (which quantizes its float input to
        uint8 itself): the same U8S8 kernels, the same rewrite; a missing weight zero point becomes
        128 shaped like the weight's scale (per column)."""
        weight, weight_zero, activation_zero, scale = _MICROSOFT_LAYERS[node.op_type]
        if activation_zero is not None:
            activation = node.input[activation_zero] if len(node.input) > activation_zero else ""
            if not self.is_uint8(activation or node.input[0]):
                return
        if self.is_int8_constant(node, weight, weight_zero):
            self.swap(node, weight, weight_zero, scale=node.input[scale] if len(node.input) > scale else None)

    def dequantized_weight(self, node: onnx.NodeProto) -> None:
        if not self.is_int8_constant(node, 0, 2):
            return
        readers = self.readers.get(node.output[0], [])
        for reader, slot in readers:
            if reader.op_type not in _QDQ_LAYERS or slot != 1 or not reader.input:
                return
            source = self.producers.get(reader.input[0])
            if source is None or source.op_type != "DequantizeLinear" or not self.is_uint8(source.input[0]):
                return
        if readers:
            self.swap(node, 0, 2, scale=node.input[1])

    def is_int8_constant(self, node: onnx.NodeProto, weight: int, zero: int) -> bool:
        if len(node.input) <= weight or self.elem_type(node.input[weight]) != TensorProto.INT8:
            return False
        if node.input[weight] not in self.initializers:
            return False
        if len(node.input) > zero and node.input[zero]:
            return node.input[zero] in self.initializers and self.elem_type(node.input[zero]) == TensorProto.INT8
        return True

    def is_uint8(self, value: str) -> bool:
        """Whether ``value`` is a uint8 tensor, from its producer or declaration."""
        producer = self.producers.get(value)
        if producer is None:
            return self.elem_type(value) == TensorProto.UINT8
        if producer.op_type == "DynamicQuantizeLinear":  # y and y_zero_point; y_scale is float
            return list(producer.output).index(value) != 1
        if producer.op_type == "QuantizeLinear":
            zero = producer.input[2] if len(producer.input) > 2 else ""
            if not zero:  # no zero point and no output_dtype: uint8
                return not any(a.name == "output_dtype" and a.i not in (0, TensorProto.UINT8)
                               for a in producer.attribute)
            return self.elem_type(zero) == TensorProto.UINT8
        return False

    def elem_type(self, name: str) -> int:
        if name in self.initializers:
            return self.initializers[name].data_type
        for value in (*self.graph.input, *self.graph.value_info):
            if value.name == name and value.type.HasField("tensor_type"):
                return value.type.tensor_type.elem_type
        return 0

    def swap(self, node: onnx.NodeProto, weight: int, zero: int, scale: str | None) -> None:
        node.input[weight] = self.shifted(node.input[weight])
        if len(node.input) > zero and node.input[zero]:
            node.input[zero] = self.shifted(node.input[zero])
            return
        # No zero point (0 as int8): uint8 needs 128, shaped like the scale for per-axis weights.
        shape = list(self.initializers[scale].dims) if scale in self.initializers else []
        name = fresh_name(f"{node.input[weight]}_zero_point", self.taken)
        self.taken.add(name)
        self.graph.initializer.append(numpy_helper.from_array(np.full(shape, 128, np.uint8), name))
        while len(node.input) <= zero:
            node.input.append("")
        node.input[zero] = name

    def shifted(self, name: str) -> str:
        """A uint8 copy of the int8 constant ``name`` (+128), added once."""
        if name in self.converted:
            return self.converted[name]
        source = self.initializers[name]
        new_name = fresh_name(f"{name}_as_uint8", self.taken)
        self.taken.add(new_name)
        if name in self.lowered.external:
            array = np.ascontiguousarray(self.lowered.external[name])
            self.lowered.external[new_name] = (array.view(np.uint8) ^ np.uint8(0x80)).reshape(array.shape)
            proto = TensorProto()
            proto.CopyFrom(source)
            proto.name, proto.data_type = new_name, TensorProto.UINT8
        else:
            array = numpy_helper.to_array(source)  # reshaped back: ascontiguousarray makes a scalar 1-D
            shifted = (np.ascontiguousarray(array).view(np.uint8) ^ np.uint8(0x80)).reshape(array.shape)
            proto = numpy_helper.from_array(shifted, new_name)
        self.graph.initializer.append(proto)
        self.initializers[new_name] = proto
        self.converted[name] = new_name
        return new_name

    def remove(self, name: str) -> None:
        for index, init in enumerate(self.graph.initializer):
            if init.name == name:
                del self.graph.initializer[index]
                break
        self.lowered.external.pop(name, None)
