"""Checks shared by the kernel tests of attention, losses, signal, sequences, strings and ai.onnx.ml.

Adds to :mod:`tests.lite.ops._reference` what these ops need: a domain other than ai.onnx
(``ai.onnx.ml``, ``ai.onnx.preview``), TENSOR attributes (a TensorProto for onnx.reference, the
array for the kernel) and string outputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx.reference import ReferenceEvaluator

from lite.ops import KERNELS
from tests.lite.ops._checks_core import as_proto_attributes, assert_matches, read_only
from tests.lite.ops._reference import one_node_model

RTOL = 1e-5
ATOL = 1e-6

rng = np.random.default_rng(2024)


def normal(*shape: int, dtype=np.float32) -> np.ndarray:
    return rng.standard_normal(shape).astype(dtype)


def run_kernel(op_type: str, inputs: Sequence[Any], attributes: dict[str, Any] | None = None, opset: int = 21,
               output_count: int = 1, domain: str = "") -> list[Any]:
    """Our kernel on read-only copies of ``inputs``, as the engine would call it."""
    attributes = attributes or {}
    chosen = KERNELS.select(op_type, domain, opset)
    assert chosen is not None, f"no kernel for {domain or 'ai.onnx'}::{op_type} at opset {opset}"
    unknown = set(attributes) - chosen.attribute_names
    assert not unknown, f"{op_type}-{chosen.since_version} does not take attributes {unknown}"
    kwargs = dict(attributes)
    if chosen.wants_output_count:
        kwargs["output_count"] = output_count
    frozen = [read_only(x) if isinstance(x, np.ndarray) else x for x in inputs]
    result = chosen.fn(*frozen, **kwargs)
    results = list(result) if isinstance(result, tuple) else [result]
    return results[:output_count]


def check(op_type: str, inputs: Sequence[np.ndarray | None], attributes: dict[str, Any] | None = None,
          opset: int = 21, output_count: int = 1, domain: str = "", rtol: float = RTOL,
          atol: float = ATOL) -> list[np.ndarray]:
    """Assert our kernel matches onnx.reference on every output; returns ours."""
    attributes = attributes or {}
    model = one_node_model(op_type, inputs, as_proto_attributes(attributes), opset, output_count, domain)
    feeds = {f"in{i}": value for i, value in enumerate(inputs) if value is not None}
    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = run_kernel(op_type, inputs, attributes, opset, output_count, domain)
    assert len(actual) == len(expected), f"{op_type}: {len(actual)} outputs, expected {len(expected)}"
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_matches(got, want, f"{op_type}-{opset} output {index} {attributes}", rtol, atol)
    return actual
