"""infer_shapes: fill in element types and shapes of intermediate values.

Runs ONNX's shape inference (https://onnx.ai/onnx/api/shape_inference.html) through onnx_ir's
ShapeInferencePass, which leaves large weights out of the proto it hands to ONNX, so models over
2 GB work. Later passes need the shapes: constant folding of ``Shape`` on static dims, and the
rank checks of the BatchNormalization folds; the int8 quantizers need the element types. ONNX
does not know ONNX Runtime's contrib ops, so the outputs of those, and what is computed from them,
are typed afterwards by :mod:`converter.passes.contrib_types`. An output's declared shape that
the graph contradicts gives way to the inferred one (:mod:`converter.passes.declared_outputs`). When inference fails (e.g. custom
ops), the model is left as it was and the pass reports why.
"""

from __future__ import annotations

import logging
import time

import onnx_ir as ir
import onnx_ir.passes.common as ir_passes

from converter.errors import ModelImportError, PassError
from converter.passes.base import PassContext, PassResult, all_graphs, describe
from converter.passes.contrib_types import infer_contrib_types
from converter.passes.declared_outputs import restore_declared_output_shapes, set_aside_declared_output_shapes


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        reason = record.exc_info[1] if record.exc_info else record.getMessage()
        self.messages.append(str(reason).strip().splitlines()[0] if str(reason).strip() else record.getMessage())


def infer_shapes(model: ir.Model, context: PassContext) -> PassResult:
    result = PassResult("infer_shapes")
    started = time.perf_counter()
    before = _known(model)
    logger = logging.getLogger(ir_passes.ShapeInferencePass.__module__)
    capture = _Capture()
    logger.addHandler(capture)
    propagate, logger.propagate = logger.propagate, False
    # Handing the model to ONNX serializes it: a value with a shape and no type (after a custom
    # op) is logged once per value, tens of lines before the conversion's own message.
    serde = logging.getLogger("onnx_ir.serde")
    serde_level = serde.level
    serde.setLevel(logging.ERROR)
    declared = set_aside_declared_output_shapes(model)
    try:
        long_vector = _long_vector(model)
        if long_vector is None:
            # A long vector can also appear only once shapes are inferred (a Reshape to [2**20, 4]
            # then a Transpose): infer without propagation first and look again.
            _infer(model, capture, data_prop=False)
            long_vector = _long_vector(model)
            capture.messages.clear()
        data_prop = long_vector is None
        if long_vector is not None:
            result.declined.append(
                f"model: {long_vector} is a vector of more than {_DATA_PROP_MAX_LENGTH} elements, so shape "
                "inference ran without data propagation (ONNX's propagation holds such vectors element by element)"
            )
        _infer(model, capture, data_prop=data_prop)
        for _ in range(_RANK_ROUNDS):
            if not _complete_reshape_ranks(model):
                break
            _infer(model, capture, data_prop=data_prop, strict=False)
    finally:
        logger.removeHandler(capture)
        logger.propagate = propagate
        serde.setLevel(serde_level)
        contradicted = restore_declared_output_shapes(declared)
    _refuse_type_errors(capture.messages)
    context.warnings.extend(contradicted)
    result.details.extend(contradicted)
    contrib_typed = infer_contrib_types(model)
    _refuse_negative_dims(model)
    after = _known(model)
    result.changed = max(0, after - before)
    result.counts["values_with_shape"] = after
    if capture.messages:
        result.declined.append(f"model: strict shape inference failed: {capture.messages[0]}")
    result.details.append(f"{after} values have a known shape ({result.changed} new)")
    if contrib_typed:
        result.counts["values_typed_after_contrib_ops"] = contrib_typed
        result.details.append(f"{contrib_typed} values typed at or after ONNX Runtime's contrib ops, which ONNX's inference skips")
    result.seconds = time.perf_counter() - started
    return result


def _infer(model: ir.Model, capture: _Capture, *, data_prop: bool, strict: bool = True) -> None:
    renamed = _distinct_names(model)
    try:
        outcome = None
        if strict:
            # check_type: an input outside its op's type constraint fails here (_refuse_type_errors).
            outcome = ir_passes.ShapeInferencePass(check_type=True, strict_mode=True, data_prop=data_prop)(model)
        if outcome is None or not outcome.modified and capture.messages:
            # Strict mode stops at the first node it cannot infer; non-strict infers the rest.
            ir_passes.ShapeInferencePass(check_type=False, strict_mode=False, data_prop=data_prop)(model)
    finally:
        for value, name in renamed:
            value.name = name


_RANK_ROUNDS = 3  # a completed rank can reveal another Reshape's shape length, rarely more than once


def _complete_reshape_ranks(model: ir.Model) -> int:
    """Give each Reshape whose output ONNX's inference left without a shape, but whose target
    shape is a vector of known length, that many unknown dimensions; return how many.

    A Reshape's output has as many dimensions as its shape input has elements, whatever their
    values. ONNX's inference (opset 11 and 13 models, the onnx release here) infers nothing when
    those values are computed (a Concat of Shape slices, as paddle2onnx writes), so every value
    after it had no rank: PP-OCRv5's recognizer, a Reshape 40 nodes before the end, kept its
    output declared as a scalar while it computes [N, T, 18385]. With the rank, the next round
    of inference reaches the end."""
    completed = 0
    for graph in all_graphs(model):
        for node in graph:
            if node.op_type != "Reshape" or node.domain not in ("", "ai.onnx") or len(node.inputs) < 2:
                continue
            output, target = node.outputs[0], node.inputs[1]
            if output.shape is not None or target is None or target.shape is None:
                continue
            if len(target.shape) == 1 and isinstance(target.shape[0], int):
                output.shape = ir.Shape([None] * target.shape[0])
                completed += 1
    return completed


def _distinct_names(model: ir.Model) -> list[tuple[ir.Value, str]]:
    """Give every value defined in a subgraph under a name that another graph also defines a
    name of its own, for the inference only; return (value, name) pairs to restore.

    Each graph is a scope of its own, so an If's two branches may both define ``present.0.key``
    (Hugging Face optimum's merged decoders do), but ONNX's data propagation keys what it learns
    by name across the whole model: it gave the no-cache branch of optimum's T5 decoder the other
    branch's shape, [1, 4, 4, 16] for [batch, 4, encoder_length, 16], and constant folding then
    froze that 4 into the graph, which failed at any other encoder length."""
    taken: set[str] = set()
    renamed: list[tuple[ir.Value, str]] = []
    for graph in all_graphs(model):
        defined = [*graph.inputs, *graph.initializers.values(), *(value for node in graph for value in node.outputs)]
        for value in defined:
            name = value.name
            if not name:
                continue
            if name in taken and graph is not model.graph:
                suffix = 1
                while f"{name}__scope{suffix}" in taken:
                    suffix += 1
                value.name = f"{name}__scope{suffix}"
                renamed.append((value, name))
            taken.add(value.name)
    return renamed


# Data propagation computes the values of small vectors (shapes, slice bounds) at conversion
# time. ONNX's implementation allocates about 140 bytes per element of any vector it considers,
# whatever its type: a declared [2**40] input took all memory. Shape vectors are never this long.
_DATA_PROP_MAX_LENGTH = 1 << 16


def _long_vector(model: ir.Model) -> str | None:
    """The name of a declared 1-D value longer than data propagation handles safely, if any."""
    for graph in all_graphs(model):
        values = [*graph.inputs, *graph.outputs, *(v for node in graph for v in node.outputs)]
        for value in values:
            shape = value.shape
            if shape is not None and len(shape) == 1 and isinstance(shape[0], int) and shape[0] > _DATA_PROP_MAX_LENGTH:
                return repr(value.name)
    return None


_TYPE_ERROR = "has unsupported type"  # ONNX's message for an input outside its op's type constraint


def _refuse_type_errors(messages: list[str]) -> None:
    """An input of a type its op does not take (tflite2onnx writes Conv with raw int8 weights
    and no DequantizeLinear) makes the model invalid: ONNX Runtime refuses to load it, and the
    numpy engine would compute on the raw values, a wrong answer with no error. Refused here,
    with ONNX's words for the node and the type."""
    for message in messages:
        if _TYPE_ERROR in message:
            raise ModelImportError(
                f"the model is invalid: {message.strip()}; ONNX Runtime refuses to load it too. Export it again "
                "with types the op takes (a quantized weight, for one, needs a DequantizeLinear before "
                "the op, or export the float model)"
            )


def _refuse_negative_dims(model: ir.Model) -> None:
    """ONNX's inference computes sizes without bounds checks (a kernel larger than its padded input
    gives a negative spatial size); such a node can never run, and no later pass may fold the size.
    In a subgraph the node may be on a branch the model never takes at these shapes (an If whose
    other branch handles them), so there the size is only forgotten."""
    for graph in all_graphs(model):
        for node in graph:
            for value in node.outputs:
                if value.shape is not None and any(isinstance(d, int) and d < 0 for d in value.shape):
                    if graph is not model.graph:
                        value.shape = None
                        continue
                    raise PassError(
                        f"infer_shapes: {describe(node)} gives {value.name!r} the shape {value.shape}, with a "
                        "negative dimension: the node cannot run on the model's input shapes; check its "
                        "attributes (kernel, pads, strides, dilations) and the input shapes"
                    )


def _known(model: ir.Model) -> int:
    count = 0
    for graph in all_graphs(model):
        for node in graph:
            count += sum(1 for value in node.outputs if value.shape is not None)
    return count
