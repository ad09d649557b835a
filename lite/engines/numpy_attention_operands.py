"""Where a fused attention's operands come from (lite.engines.numpy_attention): the Reshape,
Transpose and scaling nodes that split q, k and v into heads, and the Split that cuts them from
one product. The attention step absorbs these nodes and replays their operations itself."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import RESHAPE, TRANSPOSE, Graph, float_scalar, is_kernel, plain

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


# Nodes that split (or scale) an attention operand on its way to a product, at most this many.
_HEAD_STEPS = 6


def split_heads(source: int, graph: Graph, constants: dict[int, Any]):
    """The Reshape, Transpose and Mul-by-a-scalar nodes computing ``source`` from another tensor,
    each read by the next alone: (their steps, the tensor they start from, their operations in
    the order they run: ("Reshape", shape tensor), ("Transpose", perm), ("Mul", scalar))."""
    steps: list[_Step] = []
    operations: list[tuple[str, Any]] = []
    while len(steps) < _HEAD_STEPS:
        step = graph.producer_of.get(source)
        if step is None or not graph.single(source):
            break
        if step.node.op_type == "Transpose" and is_kernel(step.fn, *TRANSPOSE) and plain(step, 1) and step.attributes.get("perm"):
            operations.append(("Transpose", list(step.attributes["perm"])))
            origin = step.inputs[0]
        elif step.node.op_type == "Reshape" and is_kernel(step.fn, *RESHAPE) and plain(step, 2) and step.inputs[0] not in constants:
            operations.append(("Reshape", step.inputs[1]))
            origin = step.inputs[0]
        elif step.node.op_type == "Mul" and plain(step, 2) and step.inputs[0] != step.inputs[1]:
            position = next((p for p in (1, 0) if float_scalar(constants.get(step.inputs[p]))), None)
            if position is None or step.inputs[1 - position] in constants:
                break
            operations.append(("Mul", constants[step.inputs[position]]))
            origin = step.inputs[1 - position]
        else:
            break
        steps.append(step)
        source = origin
    return steps, source, operations[::-1]


def parts_of_split(origins: list[int], graph: Graph, constants: dict[int, Any]):
    """(the Split, {output: ("Part", (axis, start, stop, axis length))}) where some of q's, k's
    and v's origins are every output of one Split of a computed tensor by constant sizes, each
    read by the block alone (LeViT cuts its attention's q, k and v from one product); or
    {output: ("Chunk", (axis, its position, the outputs' count))} for a Split into
    ``num_outputs`` parts (opset 18: GPT-2's), whose windows depend on the axis length and are
    worked out when run. Else None."""
    producers = [graph.producer_of.get(origin) for origin in origins[:2]]
    split = next((step for step in producers if step is not None and step.node.op_type == "Split"), None)
    if (split is None or split.node.op_type != "Split" or split.node.domain or split.activation is not None
            or split.memo is not None or split.graph_attributes or len(split.outputs) < 2
            or not (is_kernel(split.fn, "split", "Split") or is_kernel(split.fn, "split", "Split_v13"))
            or split.inputs[0] in constants or len(set(split.outputs)) != len(split.outputs)
            or not all(origins.count(index) == 1 and graph.single(index) for index in split.outputs)):
        return None
    axis = int(split.attributes.get("axis", 0))
    if len(split.inputs) == 1 and split.attributes.get("num_outputs") == len(split.outputs):
        count = len(split.outputs)
        return split, {index: ("Chunk", (axis, n, count)) for n, index in enumerate(split.outputs)}
    sizes = constants.get(split.inputs[1]) if len(split.inputs) == 2 else None
    if (not isinstance(sizes, np.ndarray) or sizes.dtype != np.int64 or sizes.shape != (len(split.outputs),)
            or (sizes < 0).any()):
        return None
    total = int(sizes.sum())
    edges = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    return split, {index: ("Part", (axis, edges[n], edges[n + 1], total)) for n, index in enumerate(split.outputs)}
