"""store_weights_fp16 (``--fp16``): keep float32 weights as float16.

Each float32 initializer ``w`` (not a graph input) becomes a float16 initializer ``w_fp16`` read
through one ``Cast(to=FLOAT)`` whose output takes over ``w``'s readers, so every node still sees
the dtype its schema requires and the graph stays valid ONNX; a runtime may compute with the
half-precision weights directly. Finite values outside float16's range are clipped to ±65504
(reported); infinities and NaN stay what they are (a scatter-max starts from -inf).
Finite nonzero values below float16's smallest subnormal (about 6e-8) become 0: one warning counts
them over the model.

Constants that float16 would move for nothing stay float32 (:func:`_reason_to_keep_float32`);
their readers see float32 as before, so nothing else changes:

- constants of at most 16 elements: epsilons, clip bounds, scales. Halving one saves at most 32
  bytes, and rounding it moves what it guards: a trained graph network's
  ``Reciprocal(Clip(distance, min=1e-6))`` read 1.0133e-6 (+1.3 %) and failed verification, and
  ``x / (norm(x) + 1e-12)`` read 0 and turned a zero row into NaN;
- larger constants whose values float16 moves by more than 1e-3 of the tensor's largest
  magnitude: only a tensor lying wholly in float16's subnormals (below 6.1e-5, a vector of
  per-channel epsilons) does, since a normal float16 value moves by at most 2**-11 of itself.

On trained models both keep a few hundred bytes (a PP-OCRv5 detector: 124 small constants,
394 bytes of its 2.3 MB of float16 parameters; the graph network: 24 constants, 214 bytes).

Integer, double and already-half weights are left alone, and so are the float inputs of layers
that are already integer (:func:`_keeps_float32`):

- the scales of QuantizeLinear, DequantizeLinear, QLinearConv and QLinearMatMul: a rounded
  activation scale moves the int8 grid, and every value near a step's edge lands a whole step
  away (in a QDQ int8 Whisper encoder, 1,361 of its 128,000 quantized input features moved a
  step, and its output by 3.1 % of its peak where the float32 conversion's moved 1.8 %; with the
  scales kept, the float16 file's output moves as the float32 one's);
- every float input of ONNX Runtime's integer layers (com.microsoft DynamicQuantizeLSTM,
  DynamicQuantizeMatMul, MatMulIntegerToFloat, QGemm, QAttention, QLinear*), as its quantizer
  writes them: their weights are int8 already, and their floats (scales, biases) are a small
  part of the file. ONNX Runtime's own float16 converter must leave these nodes in float32 (their
  kernels take float32 only) and then keeps those inputs float32 too. Rounding them is not
  harmless: a speaker embedder of three DynamicQuantizeLSTM layers moved by 32 % of its output's
  peak with its LSTM biases in float16, four times what a 1e-6 nudge of its inputs moves it.

With ``fp16_io`` the float32 graph inputs and outputs become float16 too: a ``Cast`` after each
input and before each output keeps the inside of the graph in float32.
"""

from __future__ import annotations

import time

import numpy as np
import onnx_ir as ir

from converter.passes.base import PassContext, PassResult, add_initializer, all_graphs

_FLOAT16_MAX = float(np.finfo(np.float16).max)
# Halving a constant this small saves at most 32 bytes; such constants are epsilons, clip bounds
# and scales, whose rounding moves every result they guard.
_SMALL_CONSTANT_ELEMENTS = 16
# A larger constant stays float32 when float16 moves one of its values by more than this share of
# its largest magnitude (float16 keeps 11 significant bits: 2**-11 ≈ 4.9e-4 of a normal value).
_HALF_ERROR_OF_PEAK = 1e-3
_QUANTIZATION = "quantization parameters kept"
_SMALL = "small constants kept"
_IMPRECISE = "constants float16 cannot hold kept"


def store_weights_fp16(model: ir.Model, context: PassContext, *, fp16_io: bool = False) -> PassResult:
    result = PassResult("store_weights_fp16")
    started = time.perf_counter()
    flushed: dict[str, int] = {}
    for graph in all_graphs(model):
        inputs = set(graph.inputs)
        casts = []
        for name, value in list(graph.initializers.items()):
            if value in inputs or value.dtype != ir.DataType.FLOAT or not value.uses():
                continue
            reason = _reason_to_keep_float32(value)
            if reason:
                result.counts[reason] += 1
                continue
            casts.append(_store_half(graph, name, value, context, flushed))
            result.changed += 1
            result.counts["weights"] += 1
        _prepend(graph, casts)
    if fp16_io:
        _cast_interface(model.graph, context, result)
    _warn_flushed(flushed, context)
    _describe(result)
    result.seconds = time.perf_counter() - started
    return result


def _store_half(graph: ir.Graph, name: str, value: ir.Value, context: PassContext,
                flushed: dict[str, int]) -> ir.Node:
    """Replace initializer ``name`` by its float16 copy read through ``Cast(to=FLOAT)`` (returned,
    for the caller to place first); count in ``flushed`` its nonzero values that became 0."""
    array = value.const_value.numpy()
    half = _to_half(array, name, context)
    flushed_here = int(np.count_nonzero((array != 0) & (half == 0)))
    if flushed_here:
        flushed[name] = flushed_here
    stored = add_initializer(graph, half, context.unique_name(f"{name}_fp16"))
    cast = ir.node("Cast", [stored], {"to": int(ir.DataType.FLOAT)}, name=context.unique_name(f"{name}_cast"))
    cast.outputs[0].dtype = ir.DataType.FLOAT
    cast.outputs[0].shape = ir.Shape(list(array.shape))
    value.replace_all_uses_with(cast.outputs[0], replace_graph_outputs=value.is_graph_output())
    graph.initializers.pop(name)
    cast.outputs[0].name = name
    return cast


def _warn_flushed(flushed: dict[str, int], context: PassContext) -> None:
    """One warning for every weight's values that float16 flushed to 0: a trained convolution has
    thousands (PP-OCRv5's detector: 44 weights), each under ``_HALF_ERROR_OF_PEAK`` of its
    weight's largest value (a weight where it is not stays float32)."""
    if not flushed:
        return
    most = max(flushed, key=flushed.__getitem__)
    context.warnings.append(
        f"fp16: {sum(flushed.values())} nonzero values in {len(flushed)} weights are below float16's smallest "
        f"subnormal (6e-8) and became 0 (most in {most!r}: {flushed[most]}); each is under "
        f"{_HALF_ERROR_OF_PEAK:g} of its weight's largest value")


def _describe(result: PassResult) -> None:
    result.details.append(f"{result.counts['weights']} float32 weights stored as float16")
    if result.counts[_QUANTIZATION]:
        result.details.append(f"{result.counts[_QUANTIZATION]} float inputs of integer layers "
                              "kept in float32 (scales, and ONNX Runtime's integer layers' biases)")
    if result.counts[_SMALL]:
        result.details.append(f"{result.counts[_SMALL]} {_SMALL} in float32 (at most {_SMALL_CONSTANT_ELEMENTS} "
                              "elements: epsilons, bounds and scales that float16 would move to save a few bytes)")
    if result.counts[_IMPRECISE]:
        result.details.append(f"{result.counts[_IMPRECISE]} {_IMPRECISE} in float32 (float16 would move their values "
                              f"by more than {_HALF_ERROR_OF_PEAK:g} of their peak)")


# ONNX's integer layers and the positions of their float scales.
_SCALE_INPUTS = {
    "QuantizeLinear": {1},
    "DequantizeLinear": {1},
    "QLinearConv": {1, 4, 6},
    "QLinearMatMul": {1, 4, 6},
}

# ONNX Runtime's integer layers (com.microsoft) beside its QLinear* ones: every float input stays.
_MICROSOFT_INTEGER_LAYERS = {
    "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QGemm", "QAttention",
    "QuantizeLinear", "DequantizeLinear",
}


def _reason_to_keep_float32(value: ir.Value) -> str | None:
    """Why initializer ``value`` stays float32 (a count's name in the pass's result), or None to
    halve it: a float input of an integer layer, a small constant, or a tensor that float16 moves
    by more than ``_HALF_ERROR_OF_PEAK`` of its peak. Values past float16's range do not count
    here: they are clipped and reported."""
    if any(_keeps_float32(node, index) for node, index in value.uses()):
        return _QUANTIZATION
    array = value.const_value.numpy()
    if array.size <= _SMALL_CONSTANT_ELEMENTS:
        return _SMALL
    in_range = array[np.isfinite(array) & (np.abs(array) <= _FLOAT16_MAX)]
    if not in_range.size:
        return None
    peak = float(np.max(np.abs(in_range)))
    error = float(np.max(np.abs(in_range.astype(np.float16).astype(np.float32) - in_range)))
    return _IMPRECISE if error > _HALF_ERROR_OF_PEAK * peak else None


def _keeps_float32(node: ir.Node, index: int) -> bool:
    """Whether input ``index`` of ``node`` is a float input of an integer layer, kept in float32
    (see the module docstring)."""
    if node.domain in ("", "ai.onnx"):
        return index in _SCALE_INPUTS.get(node.op_type, ())
    if node.domain == "com.microsoft":
        return node.op_type in _MICROSOFT_INTEGER_LAYERS or node.op_type.startswith("QLinear")
    return False


def _cast_interface(graph: ir.Graph, context: PassContext, result: PassResult) -> None:
    for position, value in enumerate(list(graph.inputs)):
        if value.dtype != ir.DataType.FLOAT or value.is_initializer():
            continue
        name = value.name
        value.name = context.unique_name(f"{name}_fp32")
        half = ir.val(name, ir.DataType.FLOAT16, _copy(value.shape))
        cast = ir.node("Cast", [half], {"to": int(ir.DataType.FLOAT)}, name=context.unique_name(f"{name}_cast"))
        value.replace_all_uses_with(cast.outputs[0], replace_graph_outputs=value.is_graph_output())
        cast.outputs[0].name = value.name
        cast.outputs[0].dtype = ir.DataType.FLOAT
        cast.outputs[0].shape = _copy(value.shape)
        graph.inputs[position] = half
        _prepend(graph, [cast])
        result.counts["inputs"] += 1
    for position, value in enumerate(list(graph.outputs)):
        if value.dtype != ir.DataType.FLOAT:
            continue
        name = value.name
        value.name = context.unique_name(f"{name}_fp32")
        cast = ir.node("Cast", [value], {"to": int(ir.DataType.FLOAT16)}, name=context.unique_name(f"{name}_cast"))
        cast.outputs[0].name = name
        cast.outputs[0].dtype = ir.DataType.FLOAT16
        cast.outputs[0].shape = _copy(value.shape)
        graph.outputs[position] = cast.outputs[0]
        graph.append(cast)
        result.counts["outputs"] += 1
    result.details.append(f"graph I/O cast to float16 ({result.counts['inputs']} inputs, {result.counts['outputs']} outputs)")


def _prepend(graph: ir.Graph, nodes: list[ir.Node]) -> None:
    if not nodes:
        return
    if len(graph):
        graph.insert_before(graph[0], nodes)
    else:
        for node in nodes:
            graph.append(node)


def _copy(shape: ir.Shape | None) -> ir.Shape | None:
    return None if shape is None else ir.Shape(list(shape))


def _to_half(array: np.ndarray, name: str, context: PassContext) -> np.ndarray:
    """``array`` in float16: finite values past its range clipped to ±65504 (reported), infinities
    and NaN kept (float16 has them; clipping -inf made an empty group's max -65504)."""
    finite = np.isfinite(array)
    clipped = int(np.count_nonzero(finite & (np.abs(array) > _FLOAT16_MAX)))
    if clipped:
        context.warnings.append(f"fp16: {clipped} values of {name!r} exceed float16's range and were clipped")
    return np.where(finite, np.clip(array, -_FLOAT16_MAX, _FLOAT16_MAX), array).astype(np.float16)
