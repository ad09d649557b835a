"""constants_to_initializers: turn ``Constant`` nodes into initializers.

Exporters that store weights as Constant nodes (https://onnx.ai/onnx/operators/onnx__Constant.html)
hide them from every rule that looks for initializers. Each Constant with a dense value (``value``,
``value_float(s)``, ``value_int(s)``, ``value_string(s)``) becomes an initializer of the same
name in the same graph. ``sparse_value`` is kept as a node.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from converter.passes.base import RewriteRule, RulePass, describe

_DENSE = {"value", "value_float", "value_floats", "value_int", "value_ints", "value_string", "value_strings"}


class ConstantToInitializer(RewriteRule):
    name = "constant_to_initializer"

    def match(self, node: ir.Node) -> ir.Node | None:
        return node if node.op_type == "Constant" and node.domain == "" else None

    def check(self, node: ir.Node) -> str | None:
        if len(node.attributes) != 1 or next(iter(node.attributes)) not in _DENSE:
            return f"attributes {sorted(node.attributes)} are not one dense value"
        if not node.outputs[0].name:
            return "output has no name"
        return None

    def rewrite(self, node: ir.Node) -> str:
        graph = node.graph
        output = node.outputs[0]
        tensor = _tensor(node)
        name = output.name
        value = ir.Value(name=None, shape=ir.Shape(tensor.shape), type=ir.TensorType(tensor.dtype), const_value=tensor)
        was_output = output.is_graph_output()
        output.replace_all_uses_with(value, replace_graph_outputs=was_output)
        graph.remove(node, safe=True)
        output.name = None
        value.name = name
        tensor.name = name
        graph.register_initializer(value)
        return f"{describe(node)} → initializer {name!r} {tuple(tensor.shape)}"


def _tensor(node: ir.Node) -> ir.TensorProtocol:
    key, attr = next(iter(node.attributes.items()))
    if key == "value":
        return attr.value
    if key == "value_float":
        return ir.tensor(np.array(attr.value, dtype=np.float32))
    if key == "value_floats":
        return ir.tensor(np.array(attr.value, dtype=np.float32).reshape(-1))
    if key == "value_int":
        return ir.tensor(np.array(attr.value, dtype=np.int64))
    if key == "value_ints":
        return ir.tensor(np.array(attr.value, dtype=np.int64).reshape(-1))
    if key == "value_string":
        return ir.StringTensor([attr.value.encode()], shape=ir.Shape([]))
    strings = [s.encode() for s in attr.value]
    return ir.StringTensor(strings, shape=ir.Shape([len(strings)]))


constants_to_initializers = RulePass(
    "constants_to_initializers", [ConstantToInitializer()], __doc__ or ""
)
