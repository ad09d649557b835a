"""Variadic elementwise Max, Min, Sum and Mean over any number of broadcastable inputs.

Specs: https://onnx.ai/onnx/operators/onnx__Max.html, onnx__Min.html, onnx__Sum.html,
onnx__Mean.html. Before opset 8 the inputs had to share one shape; numpy broadcasting accepts
that case too, so one kernel serves every version.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


def _fold(op_type: str, combine: Callable, inputs: tuple) -> np.ndarray:
    if not inputs:
        raise KernelError(f"{op_type}: expected at least one input, got none")
    first = np.asarray(inputs[0])
    result = first
    for operand in inputs[1:]:
        result = combine(result, operand)
    return np.asarray(result).astype(first.dtype, copy=False)


@kernel("Max", since=1)
def Max(*inputs):
    return _fold("Max", np.maximum, inputs)


@kernel("Min", since=1)
def Min(*inputs):
    return _fold("Min", np.minimum, inputs)


@kernel("Sum", since=1)
def Sum(*inputs):
    return _fold("Sum", np.add, inputs)


@kernel("Mean", since=1)
def Mean(*inputs):
    total = _fold("Mean", np.add, inputs)
    return (total / len(inputs)).astype(total.dtype, copy=False)
