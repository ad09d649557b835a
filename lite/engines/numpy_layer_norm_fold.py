"""The numpy engine's LayerNormalization fold: a LayerNormalization read by linear layers alone
gives its scale and shift to their weights and biases.

A pre-norm transformer's (and ConvNeXt's) LayerNormalization feeds MatMuls by constant
weights, each followed by the Add of a constant bias. With ``n`` the normalized rows, γ, β the
norm's scale and shift, and ``W``, ``c`` a reader's weights and bias::

    (n·γ + β) @ W + c  =  n @ (γ[:, None]·W)  +  (β @ W + c)

so the weights become ``γ[:, None]·W`` and the bias ``β @ W + c`` (computed in float64, stored
in the weights' type), and the step computes ``n`` alone (:class:`UnitLayerNorm`): the
(rows, width) scale factor, the product by it and the shift, three passes over the rows with
broadcast operands, are gone. Where β is zero or absent a MatMul needs no bias Add.

    x ─► LayerNorm(γ, β) ─┬─► MatMul(W₁) ─► Add(c₁)        x ─► LayerNorm ─┬─► MatMul(γ·W₁) ─► Add(β@W₁ + c₁)
                          └─► MatMul(W₂) ─► Add(c₂)   becomes                └─► MatMul(γ·W₂) ─► Add(β@W₂ + c₂)

The check: a LayerNormalization over the last axis (axis -1, float32 statistics, Y alone) with
float32 constant γ (width,) and β (width,) or none; its output is not a graph output and every
reader is a MatMul taking it as A with constant float32 (width, N) weights read by nothing else;
each MatMul's product is read by one Add of a constant (N,) bias read by nothing else (where β
is not zero). The rewrite replaces those constants, so it runs before the fusions that read them.

A LayerNormalization over the last axis that does not fold keeps its kernel, wrapped so that a
transposed input is normalized along its columns without a copy (:class:`TransposedInputLayerNorm`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import Graph, plain

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fold_layer_norm_affine(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each LayerNormalization read by linear layers alone folded into them
    (module docstring); ``constants`` is updated with the new weights and biases."""
    graph = Graph(steps, graph_outputs)
    replaced: dict[int, _Step] = {}
    for norm in steps:
        if norm.node.op_type != "LayerNormalization" or norm.custom or not plain(norm, len(norm.inputs)):
            continue
        folds, _reason = match_layer_norm_fold(norm, graph, constants)
        if folds is None:
            if _last_axis_norm(norm, constants) is not None:  # its readers keep γ and β to themselves
                replaced[id(norm)] = replace(norm, fn=TransposedInputLayerNorm(norm.fn))
            continue
        scale = constants[norm.inputs[1]].astype(np.float64)
        shift = constants[norm.inputs[2]].astype(np.float64) if len(norm.inputs) == 3 else None
        for weights_index, bias_index in folds:
            weights = constants[weights_index]
            if bias_index is not None:
                bias = shift @ weights.astype(np.float64) + constants[bias_index]
                constants[bias_index] = _read_only(bias.astype(weights.dtype))
            constants[weights_index] = _read_only((scale[:, None] * weights).astype(weights.dtype))
        replaced[id(norm)] = replace(
            norm, fn=UnitLayerNorm(norm.fn, scale.size, norm.attributes.get("epsilon", 1e-5)), inputs=norm.inputs[:1],
            attributes={}, output_count=None, wants_allocate=False, prepare=None, prepared=None)
    return [replaced.get(id(step), step) for step in steps]


def match_layer_norm_fold(norm: _Step, graph: Graph, constants: dict[int, Any]):
    """[(weights index, bias index or None)] of the linear layers reading ``norm``'s output, or
    None; and the reason it does not fold."""
    parameters = _last_axis_norm(norm, constants)
    if parameters is None:
        return None, "not a LayerNormalization over the last axis with Y alone, float32 constant γ and β"
    scale, shift = parameters
    y = norm.outputs[0]
    readers = graph.readers_of.get(y, [])
    if not readers or y in graph.graph_outputs:
        return None, "the normalized tensor is a graph output or unread"
    needs_bias = shift is not None and bool(np.any(shift))
    folds = []
    for matmul in readers:
        weights_index = matmul.inputs[1] if len(matmul.inputs) == 2 else None
        weights = constants.get(weights_index)
        if (matmul.node.op_type != "MatMul" or not plain(matmul, 2) or matmul.inputs[0] != y
                or not isinstance(weights, np.ndarray) or weights.dtype != np.float32
                or weights.shape[:1] != scale.shape or weights.ndim != 2 or not _only(graph, weights_index, matmul)):
            return None, "a reader is not a MatMul by constant float32 weights of its own"
        bias_index = _bias_of(matmul, weights, graph, constants)
        if bias_index is None and needs_bias:
            return None, "a MatMul has no constant bias of its own to take β"
        folds.append((weights_index, bias_index if needs_bias else None))
    return folds, ""


def _last_axis_norm(norm: _Step, constants: dict[int, Any]) -> tuple[np.ndarray, np.ndarray | None] | None:
    """(γ, β or None) of a LayerNormalization over the last axis with Y alone, float32 statistics
    and float32 constant vectors γ and β of one width; None for another."""
    attributes = norm.attributes
    if (len(norm.inputs) not in (2, 3) or len(norm.outputs) != 1 or attributes.get("axis", -1) != -1
            or attributes.get("stash_type", 1) != 1 or norm.output_count not in (None, 1)):
        return None
    scale = constants.get(norm.inputs[1])
    shift = constants.get(norm.inputs[2]) if len(norm.inputs) == 3 else None
    if (not isinstance(scale, np.ndarray) or scale.dtype != np.float32 or scale.ndim != 1
            or (len(norm.inputs) == 3 and (not isinstance(shift, np.ndarray) or shift.dtype != np.float32
                                           or shift.shape != scale.shape))):
        return None
    return scale, shift


def _bias_of(matmul: _Step, weights: np.ndarray, graph: Graph, constants: dict[int, Any]) -> int | None:
    """The constant (N,) bias index that the one Add reading ``matmul``'s product adds, or None."""
    add = graph.only_reader(matmul.outputs[0], "Add", 2, None, first=False)
    if add is None:
        return None
    bias_index = add.inputs[1] if add.inputs[0] == matmul.outputs[0] else add.inputs[0]
    bias = constants.get(bias_index)
    if (not isinstance(bias, np.ndarray) or bias.dtype != weights.dtype or bias.shape != weights.shape[1:]
            or not _only(graph, bias_index, add)):
        return None
    return bias_index


def _only(graph: Graph, index: int, step: _Step) -> bool:
    """Whether ``step`` alone reads ``index`` (once) and the graph does not return it."""
    readers = graph.readers_of.get(index, [])
    return len(readers) == 1 and readers[0] is step and step.inputs.count(index) == 1 and index not in graph.graph_outputs


def _read_only(value: np.ndarray) -> np.ndarray:
    value.flags.writeable = False
    return value


class UnitLayerNorm:
    """The folded step's kernel: LayerNormalization's ``(x - mean) / sqrt(var + ε)`` over the
    last axis, with no scale or shift, computed as lite.ops.layer_normalization's last-axis path
    does (row means as a product with 1/width, the variance as one einsum), or for a transposed
    input along its columns (:meth:`_columns`); other inputs run the LayerNormalization kernel
    with γ = 1 and no β."""

    def __init__(self, kernel: Callable, width: int, epsilon: float) -> None:
        self.kernel = kernel
        self.width = width
        self.epsilon = np.float32(epsilon)
        self.epsilon_attribute = epsilon
        self.scale = _read_only(np.ones(width, np.float32))
        self.mean_weights = _read_only(np.full(width, 1.0 / width, np.float32))
        self.inverse_width = np.float32(1.0 / width)

    def __call__(self, x: Any) -> Any:
        from lite.ops.layer_normalization import last_axis_rows  # loaded with the kernel it stands for

        if type(x) is not np.ndarray or x.dtype != np.float32 or not x.ndim or x.shape[-1] != self.width or not x.size:
            return self._kernel(x)
        if not x.flags.c_contiguous:
            if x.ndim > 1 and x.swapaxes(-1, -2).flags.c_contiguous:
                return self._columns(x.swapaxes(-1, -2)).swapaxes(-1, -2)
            return self._kernel(x)
        rows = x.reshape(-1, self.width)
        return last_axis_rows(rows, None, self.mean_weights, self.inverse_width, self.epsilon, None, None).reshape(x.shape)

    def _columns(self, columns: np.ndarray) -> np.ndarray:
        return normalize_columns(columns, self.mean_weights, self.epsilon)

    def _kernel(self, x: Any) -> Any:
        return self.kernel(x, self.scale, epsilon=self.epsilon_attribute, output_count=1)


def normalize_columns(columns: np.ndarray, mean_weights: np.ndarray, epsilon: np.float32) -> np.ndarray:
    """The normalized columns of a C-contiguous float32 ``(..., width, T)`` array (``mean_weights``:
    ``width`` times 1/width): a transformer's tokens as a convolution's (channels, positions)
    output viewed transposed. The statistics run along the rows (each numpy call one pass over
    long rows, where the last-axis path copies the tensor first and then works on rows of
    ``width``); the caller transposes the result back, a view."""
    mean = np.matmul(mean_weights, columns)
    centered = np.subtract(columns, mean[..., None, :])
    square = np.multiply(centered, centered)
    variance = np.matmul(mean_weights, square)
    variance += epsilon
    deviation = np.sqrt(variance, out=variance)
    return np.divide(centered, deviation[..., None, :], out=centered)


class TransposedInputLayerNorm:
    """A LayerNormalization over the last axis that keeps its γ and β: a transposed float32
    input (SegFormer's and PVT's patch embeddings, a convolution's output viewed as tokens) is
    normalized along its columns (:func:`normalize_columns`), then scaled and shifted per row of
    the columns, and handed on transposed back; every other input runs the kernel."""

    def __init__(self, kernel: Callable) -> None:
        self.kernel = kernel
        self.mean_weights: dict[int, np.ndarray] = {}

    def __call__(self, X: Any, Scale: Any, B: Any = None, **attributes: Any) -> Any:
        if (type(X) is np.ndarray and X.dtype == np.float32 and X.ndim > 1 and X.size and not X.flags.c_contiguous
                and X.swapaxes(-1, -2).flags.c_contiguous and attributes.get("output_count", 1) == 1
                and attributes.get("axis", -1) in (-1, X.ndim - 1) and attributes.get("stash_type", 1) == 1
                and _vector(Scale, X.shape[-1]) and (B is None or _vector(B, X.shape[-1]))):
            width = X.shape[-1]
            weights = self.mean_weights.get(width)
            if weights is None:
                weights = self.mean_weights[width] = _read_only(np.full(width, 1.0 / width, np.float32))
            columns = normalize_columns(X.swapaxes(-1, -2), weights, np.float32(attributes.get("epsilon", 1e-5)))
            columns *= Scale[:, None]
            if B is not None:
                columns += B[:, None]
            return columns.swapaxes(-1, -2)
        return self.kernel(X, Scale, B, **attributes)


def _vector(value: Any, width: int) -> bool:
    return type(value) is np.ndarray and value.dtype == np.float32 and value.shape == (width,)
