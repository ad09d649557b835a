"""Fused activations no integer kernel applies, written out as their own nodes before int8.

A Conv whose fused activation is HardSwish, SiLU (x·sigmoid(x)), Sigmoid, HardSigmoid, LeakyRelu
or Tanh used to stay in float (no integer kernel clamps to those curves), and with it most of
MobileNetV3 and EfficientNet. Quantized as ONNX Runtime's tools do, the layer runs in integer and
the activation runs between its DequantizeLinear and the next QuantizeLinear::

    before:  x ─► Conv[fused HardSwish] ─► y                      (float)
    after:   x ─► Q/DQ ─► Conv ─► y_pre ─► Q/DQ ─► HardSwish ─► y (Conv in int8)

Relu and Clip stay fused: the integer kernel reproduces them by clamping
(:mod:`converter.quantize.quantizers`). The rewrite runs before calibration, so the new
pre-activation tensor gets its own measured range. ``int8-dynamic`` writes out those of MatMul and
Gemm the same way (Llama's SiLU-gated projection), so that they run as MatMulInteger too.
"""

from __future__ import annotations

from converter.quantize.graph import GraphEditor
from lite.format import fused_activation
from lite.format import ir as lite_ir

LAYERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


def unfuse_activations(model: lite_ir.Model, layers: tuple[str, ...] = LAYERS) -> tuple[lite_ir.Model, list[str]]:
    """``model`` with the non-clamping fused activations of its ``layers`` as separate nodes, and
    the names of the layers rewritten (``model`` itself is not modified)."""
    graph = GraphEditor(model)
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 21))
    rewritten = []
    for node in graph.nodes:
        name = _fused(node)
        if node.op_type not in layers or node.domain not in ("", "ai.onnx") or name is None or name in fused_activation.CLAMPING:
            continue
        params = list(node.attributes[fused_activation.PARAMS_ATTRIBUTE].value) \
            if fused_activation.PARAMS_ATTRIBUTE in node.attributes else []
        output = node.outputs[0]
        tensor = graph.tensor(output)
        before = graph.add_tensor(f"{tensor.name}_before_{name.lower()}", tensor.dtype, tensor.shape)
        node.outputs[0] = before
        node.attributes = {key: value for key, value in node.attributes.items()
                           if key not in (fused_activation.ATTRIBUTE, fused_activation.PARAMS_ATTRIBUTE)}
        graph.producer[before] = node
        graph.place_after_producer(before, _activation_nodes(graph, name, params, before, output, node.name, opset))
        rewritten.append(node.name)
    if not rewritten:
        return model, []
    return graph.finish(), rewritten


def _fused(node: lite_ir.Node) -> str | None:
    attribute = node.attributes.get(fused_activation.ATTRIBUTE)
    if attribute is None:
        return None
    value = attribute.value
    return value.decode() if isinstance(value, bytes) else str(value)


def _activation_nodes(graph: GraphEditor, name: str, params: list[float], source: int, target: int,
                      layer: str, opset: int) -> list[lite_ir.Node]:
    """The ONNX nodes computing fused activation ``name`` from ``source`` into ``target``."""
    float_attribute = lite_ir.AttributeType.FLOAT
    if name == "Silu" or (name == "HardSwish" and opset < 14):
        # x · sigmoid(x): ONNX has no single op for it before opset 24; x · HardSigmoid(x; 1/6,
        # 1/2): HardSwish's definition, for models older than its operator (opset 14).
        gate = graph.add_tensor(f"{graph.tensor(target).name}_gate", graph.tensor(source).dtype,
                                graph.tensor(source).shape)
        if name == "Silu":
            first = graph.new_node("Sigmoid", [source], [gate], f"{layer}/Sigmoid")
        else:
            first = graph.new_node("HardSigmoid", [source], [gate], f"{layer}/HardSigmoid",
                                   {"alpha": lite_ir.Attribute(float_attribute, 1 / 6),
                                    "beta": lite_ir.Attribute(float_attribute, 0.5)})
        return [first, graph.new_node("Mul", [source, gate], [target], f"{layer}/Mul")]
    attributes = {key: lite_ir.Attribute(float_attribute, value)
                  for key, value in fused_activation.ACTIVATIONS[name].onnx_attributes(params).items()}
    return [graph.new_node(name, [source], [target], f"{layer}/{name}", attributes)]

