"""The numpy engine's fusions: runs of planned steps replaced by one step that computes them.

Applied at load to every graph's steps once constants are folded and kernels prepared. Each
fusion keeps the values the graph returns, every intermediate another step reads, and every value
a body (If, Loop, Scan) reads by name (the engine passes those as returned values too); each fused
step computes what its steps computed, in the same arithmetic:

- a LayerNormalization's scale and shift folded into the linear layers reading it
  (:mod:`lite.engines.numpy_layer_norm_fold`);
- a MatMul by constant weights and the Add of its constant bias (:func:`_fuse_bias_adds`);
- MatMuls of one input by constant weights, side by side (:func:`_fuse_shared_input_matmuls`);
- a squeeze-and-excitation block (:func:`_fuse_squeeze_excite`);
- PoolFormer's token mixer, a 3x3 average pool less its input (:mod:`lite.engines.numpy_pool_mixer`);
- a constant Pad folded into the MaxPool after it (:mod:`lite.engines.numpy_pool_fusion`);
- summed convolutions of one input (RepVGG's branches)
  (:mod:`lite.engines.conv_fusions`);
- a group normalization written as an instance normalization between Reshapes, with one group
  or with a per-channel affine map and a Relu (:mod:`lite.engines.group_norm_fusion`);
- a per-channel Mul and Add of constants and the Relu after them (:mod:`lite.engines.affine_fusion`);
- a scaled dot-product attention block (:mod:`lite.engines.numpy_attention`), and SwiftFormer's additive
  attention (:mod:`lite.engines.numpy_additive_attention`), MobileViTV2's separable self-attention
  (:mod:`lite.engines.numpy_separable_attention`);
- an RMSNorm written as elementwise nodes, a LayerNormalization with the residual Add before it,
  an L2 normalization over the last axis (:mod:`lite.engines.numpy_norms`);
- a rotary position embedding, ``x·cos + rotate_half(x)·sin`` (:mod:`lite.engines.numpy_rotary`);
- a tanh-approximated GELU written as elementwise nodes, and the exact Gelu node computed from a table
  (:mod:`lite.engines.numpy_gelu`);
- a MatMul and the reshapes and elementwise updates its result alone goes through
  (:mod:`lite.engines.numpy_epilogue`);
- independent LSTM, GRU or RNN nodes of one cell (a bidirectional layer written as two forward
  nodes) as one time loop (:mod:`lite.engines.numpy_recurrent_stack`), and forward LSTM layers with
  peepholes each reading the last one's output as one wavefront loop (:mod:`lite.engines.numpy_recurrent_chain`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines import affine_fusion, conv_fusions, group_norm_fusion
from lite.engines.numpy_additive_attention import fuse_additive_attention
from lite.engines.numpy_attention import fuse_attention
from lite.engines.numpy_epilogue import fuse_product_epilogues
from lite.engines.numpy_fake_quant import fuse_quantize_dequantize
from lite.engines.numpy_gelu import fuse_erf_gelu, fuse_tanh_gelu
from lite.engines.numpy_grn import fuse_grn
from lite.engines.numpy_l2_normalize import fuse_l2_normalize
from lite.engines.numpy_layer_norm_fold import fold_layer_norm_affine
from lite.engines.numpy_norms import fuse_residual_layer_norm, fuse_rms_norm
from lite.engines.numpy_patterns import Graph, in_turn
from lite.engines.numpy_pool_fusion import fuse_pad_max_pool
from lite.engines.numpy_pool_mixer import fuse_pool_mixer
from lite.engines.numpy_recurrent_chain import chain_recurrences
from lite.engines.numpy_recurrent_stack import stack_recurrences
from lite.engines.numpy_rotary import fuse_rotary_embedding
from lite.engines.numpy_separable_attention import fuse_separable_attention
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every fusion applied (``graph_outputs``: the indices the graph returns)."""
    steps = fold_layer_norm_affine(steps, constants, graph_outputs)  # first: it rewrites constants
    steps = fuse_quantize_dequantize(steps, constants, graph_outputs)
    steps = _fuse_bias_adds(steps, constants, graph_outputs)
    steps = _fuse_shared_input_matmuls(steps, constants)
    steps = _fuse_squeeze_excite(steps, constants, graph_outputs)
    steps = fuse_pool_mixer(steps, constants, graph_outputs)
    steps = fuse_pad_max_pool(steps, constants, graph_outputs)
    steps = conv_fusions.fuse(steps, constants, graph_outputs)
    steps = fuse_attention(steps, constants, graph_outputs)
    steps = fuse_additive_attention(steps, constants, graph_outputs)
    steps = fuse_separable_attention(steps, constants, graph_outputs)
    steps = fuse_rms_norm(steps, constants, graph_outputs)
    steps = group_norm_fusion.fuse_one_group_norm(steps, constants, graph_outputs)
    steps = fuse_residual_layer_norm(steps, constants, graph_outputs)
    steps = fuse_l2_normalize(steps, constants, graph_outputs)
    steps = fuse_grn(steps, constants, graph_outputs)
    steps = fuse_rotary_embedding(steps, constants, graph_outputs)
    steps = fuse_tanh_gelu(steps, constants, graph_outputs)
    steps = fuse_erf_gelu(steps, constants, graph_outputs)
    steps = fuse_product_epilogues(steps, constants, graph_outputs)
    steps = group_norm_fusion.fuse_group_norm(steps, constants, graph_outputs)
    steps = affine_fusion.fuse_channel_affine(steps, constants, graph_outputs)
    steps = stack_recurrences(steps, constants, graph_outputs)
    return chain_recurrences(steps, constants, graph_outputs)


def _fuse_bias_adds(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """MatMul by constant weights ``(K, N)`` whose one reader is an Add of a constant bias
    ``(N,)``: one step that adds the bias in place into the product (a transformer's linear
    layers exported as MatMul + Add; one node less for each, and no second output array)::

        x ──► MatMul(x, W) ──► Add(·, b) ──► y      becomes      x ──► MatMul+bias ──► y
    """
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}  # id(Add step) -> the fused step, which takes its place
    dropped: set[int] = set()
    for step in steps:
        if (step.node.op_type != "Add" or step.node.domain or not step.inline or step.activation is not None
                or len(step.inputs) != 2):
            continue
        for position in (0, 1):
            product, bias_index = step.inputs[position], step.inputs[1 - position]
            matmul = graph.producer_of.get(product)
            if (matmul is None or matmul.node.op_type != "MatMul" or matmul.node.domain or not matmul.inline
                    or len(matmul.inputs) != 2):
                continue
            weights, bias = constants.get(matmul.inputs[1]), constants.get(bias_index)
            if (weights is None or bias is None or not graph.single(product)
                    or matmul.activation is not None or weights.ndim != 2 or bias.shape != weights.shape[1:]
                    or bias.dtype != weights.dtype or weights.dtype.kind != "f"):
                continue
            fused[id(step)] = replace(matmul, fn=_MatMulAdd(matmul.fn, bias), inputs=matmul.inputs + [bias_index],
                                      outputs=step.outputs, memo=None, memo_sources=[])
            dropped.add(id(matmul))
            break
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _fuse_shared_input_matmuls(steps: list[_Step], constants: dict[int, Any]) -> list[_Step]:
    """MatMuls (with or without a fused bias) of one input by constant ``(K, N_i)`` weights: one
    GEMM by the weights side by side, its outputs the column blocks of the product (views). An
    attention layer's query, key and value projections become one product three times as wide
    (two kernel calls and two bias adds fewer per layer)::

        x ─┬─► MatMul(W_q) + b_q ─► q
           ├─► MatMul(W_k) + b_k ─► k      becomes      x ─► x @ [W_q W_k W_v] + [b_q b_k b_v] ─► q, k, v
           └─► MatMul(W_v) + b_v ─► v

    The step runs where the first of them ran (it reads only x and constants).
    """
    groups: dict[int, list[tuple[_Step, np.ndarray, np.ndarray | None]]] = {}
    for step in steps:
        if (step.node.op_type != "MatMul" or step.node.domain or not step.inline or step.activation is not None
                or len(step.inputs) < 2):  # a damaged file's MatMul may lack inputs: it fails when run
            continue
        weights = constants.get(step.inputs[1])
        bias = None
        if isinstance(step.fn, _MatMulAdd):
            bias = step.fn.bias
        elif len(step.inputs) != 2:
            continue
        if (not isinstance(weights, np.ndarray) or weights.ndim != 2 or weights.dtype.kind != "f"
                or step.inputs[0] in constants):
            continue
        groups.setdefault(step.inputs[0], []).append((step, weights, bias))
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for members in groups.values():
        first_weights = members[0][1]
        members = [m for m in members if m[1].shape[0] == first_weights.shape[0] and m[1].dtype == first_weights.dtype]
        if len(members) < 2:
            continue
        step = members[0][0]
        weights = np.concatenate([m[1] for m in members], axis=1)
        biases = None
        if any(m[2] is not None for m in members):
            biases = np.concatenate([m[2] if m[2] is not None else np.zeros(m[1].shape[1], weights.dtype)
                                     for m in members])
        edges = np.cumsum([0] + [m[1].shape[1] for m in members]).tolist()
        fused[id(step)] = replace(step, fn=_SharedInputMatMul(weights, biases, edges), inputs=step.inputs[:1],
                                  outputs=[m[0].outputs[0] for m in members], attributes={}, memo=None,
                                  memo_sources=[], prepare=None, prepared=None)
        dropped.update(id(m[0]) for m in members[1:])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


class _SharedInputMatMul:
    """``x @ W`` (+ bias) for weights side by side; returns the product's column blocks."""

    def __init__(self, weights: np.ndarray, bias: np.ndarray | None, edges: list[int]) -> None:
        self.weights = weights
        self.weights.flags.writeable = False  # a constant: products by it may run in blocks (_product)
        self.bias = bias
        self.blocks = [slice(start, stop) for start, stop in zip(edges, edges[1:])]
        self.full: PlanCache[np.ndarray] = PlanCache()  # the bias at each product shape

    def __call__(self, x: np.ndarray) -> tuple[np.ndarray, ...]:
        product = _product(x, self.weights)
        if self.bias is not None:
            full = self.full.get(product.shape)
            if full is None:
                from lite.ops._helpers import full_operand_within

                full, nbytes = full_operand_within(self.bias, product.shape, self.full)
                self.full.put(product.shape, full, nbytes)
            if product.dtype == full.dtype and product.flags.writeable:
                np.add(product, full, out=product)
            else:
                product = np.add(product, full)
        return tuple(product[..., block] for block in self.blocks)


class _MatMulAdd:
    """The fused step's kernel: the MatMul's, then the bias added in place, as an array of the
    product's shape where that is small (lite.ops._helpers.full_operand: numpy adds two arrays
    of one shape in half the time of a broadcast row), one per product shape seen."""

    def __init__(self, matmul: Callable, bias: np.ndarray) -> None:
        from lite.ops._helpers import full_operand_within  # only models with such a layer load it
        from lite.ops.mat_mul import MatMul

        self.matmul = matmul
        self.direct = matmul is MatMul  # the kernel's product: _product may call numpy's
        self.bias = bias
        self.full: PlanCache[np.ndarray] = PlanCache()
        self.full_operand = full_operand_within

    def __call__(self, A, B, bias):
        product = _product(A, B) if self.direct else self.matmul(A, B)
        if product.shape[-1:] != bias.shape or not product.flags.writeable or product.dtype != bias.dtype:
            return np.add(product, bias)
        if bias is not self.bias:  # not the constant it was fused with (never from the engine)
            return np.add(product, bias, out=product)
        full = self.full.get(product.shape)
        if full is None:
            full, nbytes = self.full_operand(bias, product.shape, self.full)
            self.full.put(product.shape, full, nbytes)
        return np.add(product, full, out=product)


def _product(a: Any, b: np.ndarray) -> np.ndarray:
    """The MatMul kernel's ``a @ b`` for ``b`` a 2-D float weight matrix: numpy's matmul or the
    product in blocks (lite.ops._gemm_blocks) straight away where the kernel would call them
    (``a`` of ``b``'s type, a product below the size the kernel splits between threads), the
    kernel otherwise. Each check costs a run of a small model: the size is looked at first."""
    if not _MATMUL:
        from lite.ops import _gemm_blocks, _parallel
        from lite.ops.mat_mul import MatMul

        _MATMUL[:] = [MatMul, _parallel.SPLIT_MULTIPLY_ADDS, _gemm_blocks, _gemm_blocks.BLOCK_MULTIPLY_ADDS]
    if type(a) is np.ndarray and a.dtype is b.dtype and a.ndim >= 2 and b.dtype.kind == "f" and b.dtype.itemsize >= 4:
        multiply_adds = a.size * b.shape[1]
        if multiply_adds <= _MATMUL[3]:
            return np.matmul(a, b)
        if multiply_adds < _MATMUL[1]:
            # Constant weights (read-only): in blocks where OpenBLAS is slow, as the kernel does.
            return np.matmul(a, b) if b.flags.writeable else _MATMUL[2].product(a, b)
    return _MATMUL[0](a, b)


# The MatMul kernel, the product size it splits from, lite.ops._gemm_blocks and the product size
# it may cut into blocks from, on first use.
_MATMUL: list[Any] = []


def _fuse_squeeze_excite(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """A squeeze-and-excitation block whose intermediates are read once: one step computing it
    (lite.ops._squeeze_excite; six kernel calls over a few hundred values were most of RegNet's
    and EfficientNet's blocks)::

        x ─┬─► ReduceMean ─► Conv 1x1 (act) ─► Conv 1x1 (act) ─► g ─┐
           └─────────────────────────────────────────────────────────┴─► Mul ─► y

    becomes ``x ─► SqueezeExcite ─► y``. The original steps stay inside it for inputs it does
    not handle (not a 4-D float image of the weights' type).
    """
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for mul in steps:
        if mul.node.op_type != "Mul" or mul.node.domain or not mul.inline or mul.activation or len(mul.inputs) != 2:
            continue
        for position in (0, 1):
            x, block = mul.inputs[1 - position], _squeeze_excite_steps(mul.inputs[position], graph.producer_of, constants)
            if block is None or block[0].inputs[0] != x or any(id(step) in dropped for step in block):
                continue
            if not all(graph.single(step.outputs[0]) for step in block):
                continue
            mean, first, second = block
            # Imported here: a model without such a block loads no more kernel modules than it uses.
            from lite.ops._squeeze_excite import SqueezeExcite

            fused[id(mul)] = replace(
                mul, fn=SqueezeExcite(*_conv_weights(first, constants), first.activation,
                                      *_conv_weights(second, constants), second.activation,
                                      in_turn([*block, mul], x, constants)),
                inputs=[x], attributes={}, output_count=None, activation=None, kernel_applies_activation=False,
                wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
            dropped.update(id(step) for step in block)
            break
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _squeeze_excite_steps(gate: int, producer_of: dict[int, _Step], constants: dict[int, Any]):
    """(ReduceMean, Conv, Conv) computing ``gate`` from a spatial mean, or None."""
    second = producer_of.get(gate)
    first = producer_of.get(second.inputs[0]) if second is not None and second.inputs else None
    mean = producer_of.get(first.inputs[0]) if first is not None and first.inputs else None
    if mean is None or mean.node.op_type != "ReduceMean" or mean.node.domain or not mean.inline or not mean.inputs:
        return None
    axes = mean.attributes.get("axes")
    if len(mean.inputs) > 1:
        axes = constants.get(mean.inputs[1])
    if (axes is None or sorted(int(a) for a in np.asarray(axes).reshape(-1)) not in ([2, 3], [-2, -1])
            or mean.attributes.get("keepdims", 1) != 1 or mean.activation is not None):
        return None
    for conv in (first, second):
        if conv.node.op_type != "Conv" or conv.node.domain or not conv.inline or _conv_weights(conv, constants) is None:
            return None
    channels = _conv_weights(first, constants)[0].shape
    if _conv_weights(second, constants)[0].shape != channels[::-1]:
        return None
    return mean, first, second


def _conv_weights(conv: _Step, constants: dict[int, Any]):
    """(W as a matrix, bias or None) of a plain 1x1 float convolution with constant weights."""
    w = constants.get(conv.inputs[1]) if len(conv.inputs) > 1 else None
    bias = constants.get(conv.inputs[2]) if len(conv.inputs) > 2 else None
    attributes = conv.attributes
    plain = (attributes.get("group", 1) == 1 and not any(attributes.get("pads") or [])
             and all(s == 1 for s in attributes.get("strides") or [1])
             and attributes.get("auto_pad", "NOTSET") in ("NOTSET", "VALID"))
    if (not isinstance(w, np.ndarray) or w.ndim != 4 or w.shape[2:] != (1, 1) or w.dtype.kind != "f" or not plain
            or (len(conv.inputs) > 2 and (not isinstance(bias, np.ndarray) or bias.shape != w.shape[:1]))):
        return None
    return w.reshape(w.shape[:2]), None if bias is None else bias.astype(w.dtype, copy=False)
