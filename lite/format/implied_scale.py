"""Implied bias scales: int32 biases whose scales the reader recomputes (format 2.1).

ONNX's QDQ convention quantizes the bias of a Conv or Gemm to int32 with
``scale = input_scale × weight_scale[channel]`` (``QLinearConv``'s bias,
https://onnx.ai/onnx/operators/onnx__QLinearConv.html), so a statically quantized file would hold
each per-channel weight scale twice: once for the weight, once (multiplied) for the bias. Format
2.1 leaves the bias's ``QuantParams.scale`` out and marks it ``implied_scale: INPUT_TIMES_WEIGHT``::

    stored graph                                        the bias's scale, recomputed
    X  (QUANTIZE_DEQUANTIZE, 1 scale) ──┐
    W  (DEQUANTIZE, N scales) ──────────┼─► Conv        float32(X.scale[0]) × W.scale   (N float32)
    B  (DEQUANTIZE, INPUT_TIMES_WEIGHT) ┘  (input 2)

The reader multiplies in float32, as :func:`converter.quantize.scheme.quantize_bias` does; the
writer implies a scale only when that product equals the stored scale bit for bit, so an implied
file runs exactly as the explicit one. The bias must be read by exactly one node, as its input 2;
both factors carry implied QDQ nodes (so their scales are those of the DequantizeLinear nodes that
feed the node), and input 0 has one scale.
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np

from lite.format import ir
from lite.format.qdq import ImpliedQdq

BIAS_INPUT = 2  # the input slot of Conv's, ConvTranspose's and Gemm's bias
IMPLIED_SCALE_SINCE = (2, 1)  # the first format version that may imply scales


class ImpliedScale(IntEnum):
    """``QuantParams.implied_scale`` of schema/model.fbs."""

    STORED = 0
    INPUT_TIMES_WEIGHT = 1


Reads = dict[int, list[tuple[int, int]]]  # tensor index → (node position, input slot) of each read


def reads_of(graph: ir.Graph) -> Reads:
    reads: Reads = {}
    for position, node in enumerate(graph.nodes):
        for slot, index in enumerate(node.inputs):
            if index >= 0:
                reads.setdefault(index, []).append((position, slot))
    return reads


def product(input_scale: np.ndarray, weight_scale: np.ndarray) -> np.ndarray:
    """``input_scale[0] × weight_scale`` in float32: the bias scale the quantizer computes. A product
    outside float32 (0 or infinite) is returned as is; the reader refuses it as a stored scale."""
    with np.errstate(over="ignore", under="ignore"):
        return np.float32(input_scale[0]) * np.asarray(weight_scale, np.float32).reshape(-1)


def bias_scale(graph: ir.Graph, index: int, implied: dict[int, ImpliedQdq], reads: Reads) -> np.ndarray | str:
    """The scale of the bias ``graph.tensors[index]`` as INPUT_TIMES_WEIGHT implies it, or why it
    has none. ``implied``: the stored graph's implied QDQ nodes; ``reads``: :func:`reads_of`."""
    if implied.get(index) != ImpliedQdq.DEQUANTIZE:
        return "is not a DEQUANTIZE tensor (an implied scale is a bias's)"
    where = reads.get(index, [])
    if len(where) != 1 or where[0][1] != BIAS_INPUT:
        return (f"must be read exactly once, as input {BIAS_INPUT} of a node; it is read {len(where)} times "
                f"(inputs {sorted(slot for _, slot in where)})")
    node = graph.nodes[where[0][0]]
    factors = []
    for slot in (0, 1):
        factor = node.inputs[slot] if len(node.inputs) > slot else -1
        if factor < 0:
            return f"is read by node {node.name or node.op_type!r}, which has no input {slot}"
        tensor = graph.tensors[factor]
        if implied.get(factor, ImpliedQdq.NONE) == ImpliedQdq.NONE or tensor.quant is None:
            return (f"is read by node {node.name or node.op_type!r}, whose input {slot} ({tensor.name!r}) has no "
                    "implied QDQ nodes with stored scales")
        factors.append(tensor.quant)
    if factors[0].scale.size != 1:
        return f"is read by node {node.name or node.op_type!r}, whose input 0 has {factors[0].scale.size} scales, not 1"
    return product(factors[0].scale, factors[1].scale)


def implied_scales(graph: ir.Graph, implied: dict[int, ImpliedQdq]) -> set[int]:
    """The stored tensors of ``graph`` whose scales the reader recomputes bit for bit (the writer
    leaves them out)."""
    reads = reads_of(graph)
    found = set()
    for index, kind in implied.items():
        quant = graph.tensors[index].quant
        if kind != ImpliedQdq.DEQUANTIZE or quant is None or quant.block_size:
            continue
        scale = bias_scale(graph, index, implied, reads)
        if not isinstance(scale, str) and scale.tobytes() == quant.scale.astype(np.float32).tobytes():
            found.add(index)
    return found
