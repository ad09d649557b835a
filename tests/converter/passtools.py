"""Helpers for the pass tests: build a model from ONNX text + numpy weights, apply, compare."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
from onnx import numpy_helper

from converter.onnx_export import to_onnx
from converter.passes import PassResult, infer_shapes, run_passes
from converter.reference_session import run_onnxruntime
from converter.verify import random_inputs


def make_model(text: str, **weights: np.ndarray) -> onnx.ModelProto:
    """Parse ONNX text and add ``weights`` as initializers (checked with onnx.checker)."""
    model = onnx.parser.parse_model(text)
    for name, array in weights.items():
        model.graph.initializer.append(numpy_helper.from_array(np.asarray(array), name))
    onnx.checker.check_model(model, full_check=True)
    return model


def apply(model: onnx.ModelProto, *passes) -> tuple[onnx.ModelProto, list[PassResult]]:
    """Run shape inference then ``passes``; return the ORT-loadable result and the pass results."""
    graph = ir.serde.deserialize_model(model)
    results = run_passes(graph, (infer_shapes, *passes))
    exported = to_onnx(graph)
    onnx.checker.check_model(exported, full_check=True)
    return exported, results[1:]


def assert_same_outputs(original: onnx.ModelProto, rewritten: onnx.ModelProto, rtol: float = 1e-5) -> None:
    feeds = random_inputs(original, seed=1)
    expected = run_onnxruntime(original, feeds)
    got = run_onnxruntime(rewritten, feeds)
    assert expected.keys() == got.keys()
    for name in expected:
        scale = max(float(np.max(np.abs(expected[name]))), 1e-6)
        np.testing.assert_allclose(got[name], expected[name], rtol=rtol, atol=rtol * scale, err_msg=name)


def ops(model: onnx.ModelProto) -> list[str]:
    return [node.op_type for node in model.graph.node]


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def bn_params(channels: int, seed: int = 0) -> dict[str, np.ndarray]:
    r = rng(seed)
    return {
        "gamma": r.uniform(0.5, 1.5, channels).astype(np.float32),
        "beta": r.normal(0, 0.5, channels).astype(np.float32),
        "mean": r.normal(0, 0.5, channels).astype(np.float32),
        "var": r.uniform(0.5, 2.0, channels).astype(np.float32),
    }


def scale_last_conv(model: ir.Model, context) -> PassResult:
    """A deliberately wrong rewrite, for the tests of failed verification: the last Conv's
    weight grows by 5 %."""
    conv = [node for node in model.graph if node.op_type == "Conv"][-1]
    weight = conv.inputs[1]
    weight.const_value = ir.tensor(weight.const_value.numpy() * 1.05, name=weight.name)
    return PassResult("scale_last_conv", changed=1)
