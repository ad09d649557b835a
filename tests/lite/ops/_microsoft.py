"""Checks of ONNX Runtime's own ops (com.microsoft, and its default-domain ones) against ONNX
Runtime, which defines them: one-node graphs built with onnx.helper, random inputs, weights as
initializers as its tools write them."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lite.ops.registry import KERNELS

rng = np.random.default_rng(11)
MICROSOFT = "com.microsoft"


def normal(*shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def one_node_model(op_type, inputs, outputs, *, domain=MICROSOFT, constants=(), **attributes) -> onnx.ModelProto:
    """``inputs``: (name, value or None) in the op's order (None: omitted); names in ``constants``
    become initializers. ``outputs``: names, "" for an output left out."""
    names = [name if value is not None else "" for name, value in inputs]
    node = helper.make_node(op_type, names, outputs, domain=domain, **attributes)
    graph = helper.make_graph(
        [node], op_type.lower(),
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
         for name, value in inputs if value is not None and name not in constants],
        [onnx.ValueInfoProto(name=name) for name in outputs if name],
        [numpy_helper.from_array(value, name) for name, value in inputs if value is not None and name in constants],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MICROSOFT, 1)])
    model.ir_version = 10
    return model


def onnxruntime_outputs(model: onnx.ModelProto, feeds) -> list[np.ndarray]:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def kernel_outputs(op_type, inputs, outputs, *, domain=MICROSOFT, **attributes) -> list[np.ndarray]:
    chosen = KERNELS.select(op_type, domain, 1 if domain else 17)
    extra = {"output_count": len(outputs)} if chosen.wants_output_count else {}
    got = chosen.fn(*[value for _, value in inputs], **attributes, **extra)
    got = list(got) if isinstance(got, tuple) else [got]
    return [value for value, name in zip(got, outputs) if name]


def relative_error(actual, expected) -> float:
    expected = np.asarray(expected, np.float64)
    scale = max(float(np.abs(expected).max()), 1.0) if expected.size else 1.0
    return float(np.abs(np.asarray(actual, np.float64) - expected).max()) / scale if expected.size else 0.0


def check(op_type, inputs, outputs, *, domain=MICROSOFT, constants=(), tolerance=1e-5, **attributes):
    """The kernel's outputs against ONNX Runtime's: same shapes and dtypes, within ``tolerance``
    of the largest reference value."""
    model = one_node_model(op_type, inputs, outputs, domain=domain, constants=constants, **attributes)
    feeds = {name: value for name, value in inputs if value is not None and name not in constants}
    expected = onnxruntime_outputs(model, feeds)
    got = kernel_outputs(op_type, inputs, outputs, domain=domain, **attributes)
    assert len(got) == len(expected)
    for index, (actual, reference) in enumerate(zip(got, expected)):
        assert actual.shape == reference.shape, (index, actual.shape, reference.shape)
        assert actual.dtype == reference.dtype, (index, actual.dtype, reference.dtype)
        assert relative_error(actual, reference) <= tolerance, (index, relative_error(actual, reference))
    return got


B, S, H, N = 2, 5, 16, 4
LENGTHS = np.array([5, 3], np.int32)


def padding_mask(lengths, width) -> np.ndarray:
    return (np.arange(width)[None] < np.asarray(lengths)[:, None]).astype(np.int32)
