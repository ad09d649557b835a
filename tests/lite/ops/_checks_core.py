"""Checks shared by the kernel tests of the core ops (elementwise, reductions, shape, indexing).

Wraps :mod:`tests.lite.ops._reference` for what these ops need beyond it: TENSOR attributes
(given as numpy arrays; onnx.reference gets a TensorProto, the kernel the array) and string
outputs (onnx.reference returns ``<U`` arrays, the numpy engine object arrays).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import numpy_helper

from tests.lite.ops._reference import assert_same, kernel_outputs, reference_outputs

RTOL = 1e-5
ATOL = 1e-6


def as_proto_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    return {
        name: numpy_helper.from_array(value) if isinstance(value, np.ndarray) else value
        for name, value in attributes.items()
    }


def assert_matches(
    actual: np.ndarray, expected: np.ndarray, what: str, rtol: float = RTOL, atol: float = ATOL
):
    expected = np.asarray(expected)
    if expected.dtype.kind in "OUS":
        assert isinstance(actual, np.ndarray) and actual.dtype == object, (
            f"{what}: strings must be object arrays"
        )
        assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
        assert [str(v) for v in actual.reshape(-1)] == [str(v) for v in expected.reshape(-1)], what
        return
    assert_same(actual, expected, rtol, atol, what)


def check(
    op_type: str,
    inputs: Sequence[np.ndarray | None],
    attributes: dict[str, Any] | None = None,
    opset: int = 21,
    output_count: int = 1,
    rtol: float = RTOL,
    atol: float = ATOL,
) -> list[np.ndarray]:
    """Assert the registered kernel matches onnx.reference on every output; returns ours.

    The kernel sees read-only inputs, so one that writes into them fails here.
    """
    attributes = attributes or {}
    expected = reference_outputs(op_type, inputs, as_proto_attributes(attributes), opset, output_count)
    frozen = [None if x is None else read_only(x) for x in inputs]
    actual = kernel_outputs(op_type, frozen, attributes, opset, output_count)
    assert len(actual) == len(expected), f"{op_type}: {len(actual)} outputs, expected {len(expected)}"
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_matches(got, want, f"{op_type}-{opset} output {index} {attributes}", rtol, atol)
    return actual


def read_only(array: np.ndarray) -> np.ndarray:
    """A read-only copy, like a weight viewed from a memory-mapped file."""
    frozen = np.array(array)
    frozen.flags.writeable = False
    return frozen
