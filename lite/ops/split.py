"""Split: cut a tensor into parts along one axis. https://onnx.ai/onnx/operators/onnx__Split.html

Part sizes come from, by opset:

- 1: the optional second input ``split`` or the ``split`` attribute;
- 2 and 11: the ``split`` attribute (11 allows a negative axis);
- 13: the optional ``split`` input;
- 18: the optional ``split`` input, or ``num_outputs`` parts of ``ceil(dim / num_outputs)``
  elements, the last one smaller when the dimension does not divide evenly.

Without any of these the axis is split into as many equal parts as the node has outputs.
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import int_list, normalize_axis
from lite.ops.registry import kernel


def _equal_sizes(dimension: int, parts: int | None) -> list[int]:
    if not parts:
        raise KernelError("Split: without split sizes the number of outputs must be known")
    if dimension % parts:
        raise KernelError(f"Split: a dimension of {dimension} does not split into {parts} equal parts")
    return [dimension // parts] * parts


def _split(input, sizes: list[int] | None, axis: int, output_count: int | None) -> tuple:
    input = np.asarray(input)
    axis = normalize_axis("Split", axis, input.ndim)
    dimension = input.shape[axis]
    if sizes is None:
        sizes = _equal_sizes(dimension, output_count)
    if sum(sizes) != dimension or any(size < 0 for size in sizes):
        raise KernelError(f"Split: sizes {sizes} do not add up to the dimension {dimension} of axis {axis}")
    if output_count is not None and len(sizes) != output_count:
        raise KernelError(f"Split: {len(sizes)} split sizes given for {output_count} outputs")
    # Views by basic slicing: np.split's bookkeeping (cumsum, swapaxes) cost more than the cut.
    index = [slice(None)] * input.ndim
    parts = []
    start = 0
    for size in sizes:
        index[axis] = slice(start, start + size)
        parts.append(input[tuple(index)])
        start += size
    return tuple(parts)


@kernel("Split", since=18)
def Split(input, split=None, *, axis=0, num_outputs=None, output_count=None):
    sizes = int_list(split)
    if sizes is None and num_outputs is not None:
        dimension = np.asarray(input).shape[normalize_axis("Split", axis, np.ndim(input))]
        chunk = -(-dimension // num_outputs)
        sizes = [chunk] * (num_outputs - 1) + [dimension - chunk * (num_outputs - 1)]
        if sizes[-1] < 0:
            raise KernelError(f"Split: a dimension of {dimension} cannot feed {num_outputs} outputs")
    return _split(input, sizes, axis, output_count)


@kernel("Split", since=13)
def Split_v13(input, split=None, *, axis=0, output_count=None):
    return _split(input, int_list(split), axis, output_count)


@kernel("Split", since=2)
def Split_v2(input, *, axis=0, split=None, output_count=None):
    return _split(input, int_list(split), axis, output_count)


@kernel("Split", since=1)
def Split_v1(input, split_sizes=None, *, axis=0, split=None, output_count=None):
    """Opset 1 takes the sizes from the second input (named ``split``) or the attribute."""
    sizes = int_list(split_sizes) if split_sizes is not None else int_list(split)
    return _split(input, sizes, axis, output_count)
