"""The optional operators: wrap a value as optional, test for and unwrap its element.

https://onnx.ai/onnx/operators/onnx__Optional.html
https://onnx.ai/onnx/operators/onnx__OptionalHasElement.html
https://onnx.ai/onnx/operators/onnx__OptionalGetElement.html

An optional value is ``None`` (empty) or the value itself (a tensor or a sequence list). Results
are returned in a one-element tuple so that a sequence (a list) stays one value.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops.registry import kernel


@kernel("Optional", since=15)
def Optional(input=None, *, type=None):
    # ``type`` (a TypeProto) only describes the empty optional; the value needs no wrapper.
    return (input,)


@kernel("OptionalHasElement", since=15)
def OptionalHasElement(input=None):
    return np.array(input is not None)


@kernel("OptionalGetElement", since=15)
def OptionalGetElement(input):
    # From opset 18 a plain tensor or sequence is accepted too and returned as is.
    if input is None:
        raise KernelError("OptionalGetElement: the optional input is empty")
    return (input,)
