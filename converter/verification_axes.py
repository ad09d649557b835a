"""Sizes the graph itself fixes for axes an input leaves unknown, for planning verification inputs.

An image input is declared ``[batch_size, num_channels, height, width]`` by Hugging Face optimum's
exports, yet the model takes one channel count and, for a Vision Transformer, one image side:

- **channels**: a Conv reading the input (directly or through Cast/Identity) takes
  ``W.shape[1] * group`` channels on axis 1 (ONNX Conv: ``X`` is ``[N, C, D1, ...]``, ``W`` is
  ``[M, C/group, k1, ...]``);
- **image sides**: a Conv whose kernel equals its strides and which pads nothing cuts the image into
  patches (a ViT's or CLIP's patch embedding). Its output, flattened, is added to a position table
  of ``T`` rows, one per patch plus the class (and DeiT's distillation) tokens; a model traced
  without interpolating it accepts only ``sqrt(T - extra)`` patches a side::

      pixel_values -> Conv(kernel = stride = p) -> Reshape/Transpose -> Concat(class) -> Add(table [1, T, M])

  so each side is ``sqrt(T - extra) * p``.

:func:`axis_sizes` returns them by input and axis.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import onnx

# Ops whose output keeps the layout of their only data input.
_SAME_LAYOUT = {"Cast", "Identity"}
# How many values after a patch embedding its position table may be added (Reshape, Transpose,
# Concat with the class token...).
_POSITION_TABLE_REACH = 16
_EXTRA_TOKENS = (1, 2, 0)  # a class token (ViT, CLIP), class and distillation (DeiT), none


def axis_sizes(proto: onnx.ModelProto, names: list[str], patch_sides: bool = True) -> dict[str, dict[int, int]]:
    """For each input in ``names`` that a Conv reads, the sizes that Conv fixes: axis 1 (channels)
    and, with ``patch_sides``, for a patch embedding before a position table, the spatial axes
    (a reading of the graph that may be wrong: the planner also tries without them)."""
    graph = proto.graph
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for value in node.input:
            readers.setdefault(value, []).append(node)
    producers = {output: node for node in graph.node for output in node.output}
    shapes = _constant_shapes(graph)
    sizes = {}
    for name in names:
        conv = next(_convs_reading(name, readers), None)
        weight = shapes.get(conv.input[1]) if conv is not None and len(conv.input) > 1 else None
        if weight is None or len(weight) < 3:
            continue
        group = _int_attribute(conv, "group", 1)
        sizes[name] = {1: weight[1] * group}
        side = _patch_grid_side(conv, weight, readers, producers, shapes) if patch_sides else None
        if side is not None:
            sizes[name].update({axis: side for axis in range(2, len(weight))})
    return sizes


def _convs_reading(name: str, readers: dict[str, list[onnx.NodeProto]]) -> Iterator[onnx.NodeProto]:
    """Conv nodes that read ``name`` as their data input, looking through layout-keeping ops."""
    pending = [name]
    while pending:
        value = pending.pop()
        for node in readers.get(value, []):
            if node.domain not in ("", "ai.onnx") or not node.input or node.input[0] != value:
                continue
            if node.op_type == "Conv":
                yield node
            elif node.op_type in _SAME_LAYOUT:
                pending.extend(node.output)


def _patch_grid_side(conv: onnx.NodeProto, weight: list[int], readers: dict[str, list[onnx.NodeProto]],
                     producers: dict[str, onnx.NodeProto], shapes: dict[str, list[int]]) -> int | None:
    """The image side a patch-embedding ``conv`` was traced with, read from the position table
    added after it; None if ``conv`` is no patch embedding or no table fits."""
    kernel = _ints_attribute(conv, "kernel_shape") or weight[2:]
    strides = _ints_attribute(conv, "strides") or [1] * len(kernel)
    pads = _ints_attribute(conv, "pads") or [0] * (2 * len(kernel))
    patch = kernel[0]
    if patch < 2 or len(set(kernel)) != 1 or list(strides) != list(kernel) or any(pads):
        return None
    for rows in _position_table_rows(conv.output[0], weight[0], readers, producers, shapes):
        for extra in _EXTRA_TOKENS:
            grid = math.isqrt(max(rows - extra, 0))
            if grid > 0 and grid * grid == rows - extra:
                return grid * patch
    return None


def _position_table_rows(start: str, width: int, readers: dict[str, list[onnx.NodeProto]],
                         producers: dict[str, onnx.NodeProto], shapes: dict[str, list[int]]) -> Iterator[int]:
    """Row counts of constant ``[..., T, width]`` tables added to values that ``start`` flows into,
    within :data:`_POSITION_TABLE_REACH` values: the table itself, or one looked up with Gather
    (CLIP's ``position_embedding(position_ids)``)."""
    pending, seen = [start], {start}
    while pending and len(seen) < _POSITION_TABLE_REACH:
        value = pending.pop(0)
        for node in readers.get(value, []):
            if node.op_type == "Add" and len(node.input) == 2:
                other = node.input[1] if node.input[0] == value else node.input[0]
                table = shapes.get(other)
                if table is None and other in producers and producers[other].op_type == "Gather":
                    table = shapes.get(producers[other].input[0])
                if table is not None and len(table) >= 2 and table[-1] == width and table[-2] > 1:  # not a bias
                    yield table[-2]
            for output in node.output:
                if output not in seen:
                    seen.add(output)
                    pending.append(output)


def _constant_shapes(graph: onnx.GraphProto) -> dict[str, list[int]]:
    """Shapes of initializers and Constant outputs, by name."""
    shapes = {init.name: list(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.output:
            for attribute in node.attribute:
                if attribute.name == "value" and attribute.type == onnx.AttributeProto.TENSOR:
                    shapes[node.output[0]] = list(attribute.t.dims)
    return shapes


def _int_attribute(node: onnx.NodeProto, name: str, default: int) -> int:
    return next((attribute.i for attribute in node.attribute if attribute.name == name), default)


def _ints_attribute(node: onnx.NodeProto, name: str) -> list[int]:
    return next((list(attribute.ints) for attribute in node.attribute if attribute.name == name), [])
