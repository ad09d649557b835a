"""The sequence operators: build, index, edit, split into and concatenate from tensor sequences.

https://onnx.ai/onnx/operators/onnx__SequenceConstruct.html (and SequenceEmpty, SequenceAt,
SequenceInsert, SequenceErase, SequenceLength, ConcatFromSequence, SplitToSequence, SequenceMap)

A sequence value is a plain Python list of arrays. Kernels return new lists and never modify
the one they are given; a kernel returning a sequence wraps it in a one-element tuple, since a
bare list would read as one value per output. Positions may be negative (counted from the back).
"""

from __future__ import annotations

import numpy as np

from lite.errors import KernelError
from lite.ops._helpers import normalize_axis, scalar_int
from lite.ops.registry import kernel


def _as_sequence(op_type: str, value) -> list:
    if not isinstance(value, (list, tuple)):
        raise KernelError(f"{op_type}: expected a sequence (list of tensors), got {type(value).__name__}")
    return list(value)


def _position(op_type: str, position, length: int, inclusive_end: bool) -> int:
    """``position`` in ``[-n, n)`` (``[-n, n]`` when ``inclusive_end``) mapped to ``[0, n]``."""
    index = scalar_int(op_type, "position", position)
    upper = length if inclusive_end else length - 1
    if not -length <= index <= upper:
        raise KernelError(f"{op_type}: position {index} is out of range for a sequence of {length} tensors")
    return index + length if index < 0 else index


@kernel("SequenceConstruct", since=11)
def SequenceConstruct(*inputs):
    return ([np.asarray(tensor) for tensor in inputs],)


@kernel("SequenceEmpty", since=11)
def SequenceEmpty(*, dtype=1):
    # A list carries no element type; ``dtype`` only matters to type inference.
    return ([],)


@kernel("SequenceAt", since=11)
def SequenceAt(input_sequence, position):
    sequence = _as_sequence("SequenceAt", input_sequence)
    return sequence[_position("SequenceAt", position, len(sequence), inclusive_end=False)]


@kernel("SequenceInsert", since=11)
def SequenceInsert(input_sequence, tensor, position=None):
    sequence = _as_sequence("SequenceInsert", input_sequence)
    index = len(sequence) if position is None else _position("SequenceInsert", position, len(sequence), True)
    return (sequence[:index] + [np.asarray(tensor)] + sequence[index:],)


@kernel("SequenceErase", since=11)
def SequenceErase(input_sequence, position=None):
    sequence = _as_sequence("SequenceErase", input_sequence)
    if position is None:
        if not sequence:
            raise KernelError("SequenceErase: cannot erase from an empty sequence")
        return (sequence[:-1],)
    index = _position("SequenceErase", position, len(sequence), inclusive_end=False)
    return (sequence[:index] + sequence[index + 1 :],)


@kernel("SequenceLength", since=11)
def SequenceLength(input_sequence):
    return np.array(len(_as_sequence("SequenceLength", input_sequence)), dtype=np.int64)


@kernel("ConcatFromSequence", since=11)
def ConcatFromSequence(input_sequence, *, axis, new_axis=0):
    sequence = [np.asarray(t) for t in _as_sequence("ConcatFromSequence", input_sequence)]
    if not sequence:
        raise KernelError("ConcatFromSequence: the sequence is empty, so the result has no defined shape")
    rank = sequence[0].ndim
    if new_axis:
        return np.stack(sequence, axis=normalize_axis("ConcatFromSequence", axis, rank + 1))
    return np.concatenate(sequence, axis=normalize_axis("ConcatFromSequence", axis, rank))


@kernel("SplitToSequence", since=11)
def SplitToSequence(input, split=None, *, axis=0, keepdims=1):
    input = np.asarray(input)
    axis = normalize_axis("SplitToSequence", axis, input.ndim)
    extent = input.shape[axis]
    if split is None:
        # Unit pieces; keepdims=0 drops the split axis from each.
        pieces = np.split(input, extent, axis=axis) if extent else []
        return (pieces if keepdims else [np.squeeze(piece, axis=axis) for piece in pieces],)
    sizes = np.asarray(split).astype(np.int64)
    if sizes.ndim == 0:
        step = int(sizes)
        if step <= 0:
            raise KernelError(f"SplitToSequence: a scalar split must be positive, got {step}")
        boundaries = list(range(step, extent, step))
    else:
        if np.any(sizes < 0) or int(sizes.sum()) != extent:
            raise KernelError(
                f"SplitToSequence: split {sizes.tolist()} must be nonnegative and add up to {extent} (axis {axis})"
            )
        boundaries = np.cumsum(sizes)[:-1].tolist()
    return (np.split(input, boundaries, axis=axis),)


@kernel("SequenceMap", since=17)
def SequenceMap(input_sequence, *additional_inputs, body, output_count=1):
    sequence = _as_sequence("SequenceMap", input_sequence)
    for index, extra in enumerate(additional_inputs):
        if isinstance(extra, (list, tuple)) and len(extra) != len(sequence):
            raise KernelError(
                f"SequenceMap: additional input {index} has {len(extra)} samples, the input sequence {len(sequence)}"
            )
    outputs: list[list[np.ndarray]] = [[] for _ in range(output_count)]
    for position, sample in enumerate(sequence):
        arguments = [sample] + [
            extra[position] if isinstance(extra, (list, tuple)) else extra for extra in additional_inputs
        ]
        results = body(*arguments)
        if len(results) != output_count:
            raise KernelError(f"SequenceMap: the body returned {len(results)} values, the node declares {output_count}")
        for collected, result in zip(outputs, results):
            collected.append(result)
    return tuple(outputs)
