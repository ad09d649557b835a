"""Small .lite models for the engine tests, built with lite.format.GraphBuilder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.format import GraphBuilder, ir, to_bytes


def cnn(batch: int | str = "N", seed: int = 0) -> bytes:
    """Conv (+ fused Relu) -> Conv (+ fused Clip) -> GlobalAveragePool -> Flatten -> Gemm -> Softmax."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("cnn", opset=17)
    x = b.input("x", np.float32, [batch, 3, 16, 16])
    y = b.node("Conv", [x, b.constant("w1", rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.3),
                        b.constant("b1", rng.standard_normal(16).astype(np.float32))],
               pads=[1, 1, 1, 1], fused_activation="Relu")
    y = b.node("Conv", [y, b.constant("w2", rng.standard_normal((32, 16, 3, 3)).astype(np.float32) * 0.1)],
               pads=[1, 1, 1, 1], fused_activation="Clip", fused_activation_params=[0.0, 6.0])
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y])
    y = b.node("Gemm", [y, b.constant("w3", rng.standard_normal((10, 32)).astype(np.float32))], transB=1)
    y = b.node("Softmax", [y], outputs=["probabilities"], axis=-1)
    b.output(y, np.float32, [batch, 10])
    return to_bytes(b.build())


def qdq_cnn(seed: int = 0) -> bytes:
    """A Conv in QDQ form: uint8 activations, per-channel int8 weights, as int8 quantization writes it."""
    rng = np.random.default_rng(seed)
    b = GraphBuilder("qdq", opset=17)
    x = b.input("x", np.float32, [1, 3, 16, 16])
    scale_x, zero_x = b.constant("sx", np.float32(0.02)), b.constant("zx", np.uint8(128))
    q = b.node("QuantizeLinear", [x, scale_x, zero_x])
    xd = b.node("DequantizeLinear", [q, scale_x, zero_x])
    weights = rng.integers(-127, 128, (8, 3, 3, 3)).astype(np.int8)
    scale_w = b.constant("sw", np.full(8, 0.01, np.float32))
    wd = b.node("DequantizeLinear", [b.constant("w", weights), scale_w, b.constant("zw", np.zeros(8, np.int8))],
                axis=0)
    y = b.node("Conv", [xd, wd], pads=[1, 1, 1, 1])
    scale_y, zero_y = b.constant("sy", np.float32(0.05)), b.constant("zy", np.uint8(128))
    qy = b.node("QuantizeLinear", [y, scale_y, zero_y])
    out = b.node("DequantizeLinear", [qy, scale_y, zero_y], outputs=["y"])
    b.output(out, np.float32, [1, 8, 16, 16])
    return to_bytes(b.build())


def custom_op_model() -> bytes:
    b = GraphBuilder("custom", opset=17)
    x = b.input("x", np.float32, ["N", 4])
    y = b.node("Swish2", [x], domain="my.ops", outputs=["y"], beta=1.0)
    b.output(y, np.float32, ["N", 4])
    return to_bytes(b.build())


@dataclass
class Const:
    """A constant (initializer) input of a one-node model."""

    value: np.ndarray


def one_node(op: str, inputs: list, outputs: int = 1, opset: int = 17, **attributes):
    """A model of one ``op`` node; array inputs are graph inputs, Const ones initializers."""
    b = GraphBuilder(op.lower(), opset=opset)
    names, feeds = [], {}
    for position, value in enumerate(inputs):
        name = f"in{position}"
        if value is None:
            names.append(None)
        elif isinstance(value, Const):
            names.append(b.constant(name, value.value))
        else:
            names.append(b.input(name, value.dtype, list(value.shape)))
            feeds[name] = value
    result = b.node(op, names, outputs=[f"out{k}" for k in range(outputs)], **attributes)
    for name in (result if isinstance(result, tuple) else (result,)):
        b.output(name)
    return b.build(), feeds


def endless_loop(shape: tuple = ("N", 16), name_in: str = "INPUT0", name_out: str = "OUTPUT0") -> bytes:
    """``OUTPUT0 = Loop(<no trip count>, <no condition>, INPUT0)`` whose body passes its condition
    (true) and the value through: the loop never ends by itself."""
    b = GraphBuilder("endless", opset=17)
    x = b.input(name_in, np.float32, list(shape))
    y = b.node("Loop", ["", "", x], outputs=[name_out], name="endless_loop",
               body=ir.Attribute(ir.AttributeType.GRAPH, 1))
    b.output(y, np.float32, list(shape))
    model = b.build()
    body = GraphBuilder("body")
    body.input("iteration", np.int64, [])
    cond = body.input("cond_in", np.bool_, [])
    value = body.input("value_in", np.float32, list(shape))
    body.output(body.node("Identity", [cond], outputs=["cond_out"]), np.bool_, [])
    body.output(body.node("Identity", [value], outputs=["value_out"]), np.float32, list(shape))
    model.graphs.append(body.graph)
    return to_bytes(model)
