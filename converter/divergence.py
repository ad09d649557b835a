"""Where a converted model starts to differ from the original: the first diverging node.

When verification fails, both models run once more on the same inputs with every intermediate
tensor that kept its name as an output: the original in ONNX Runtime with its graph
optimizations off (so its tensors are the ones the file names), the converted one on lite's
numpy engine. Walking the original's nodes in order, the first whose output differs beyond the
tolerance is the one to look at; the node that computes that tensor in the converted graph (its
op type, a fused activation) says which rewrite made it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from lite.compare import Tolerance, output_error
from lite.errors import LiteError
from lite.format import ir as lite_ir

_MAX_TENSORS = 4000  # intermediate tensors compared at most (the first ones in node order)


def first_divergence(original: onnx.ModelProto, converted: lite_ir.Model, feeds: dict[str, np.ndarray],
                     tolerance: Tolerance) -> dict[str, Any]:
    """The first node of ``original`` whose output differs in ``converted`` (see the module
    docstring); ``{"node": None, ...}`` with a note when no shared tensor differs."""
    from converter.errors import VerificationError
    from converter.quantize.runner import with_outputs
    from converter.reference_session import ReferenceSession
    from lite.engines.numpy_engine import NumpyEngine

    graph = converted.main
    converted_names = {tensor.name: tensor for tensor in graph.tensors if tensor.data is None}
    producers = {graph.tensors[i].name: node for node in graph.nodes for i in node.outputs if i >= 0}
    outputs = {value.name for value in original.graph.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in original.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    # A name means the same value on both sides when the same kind of node computes it and every
    # node that reads it in the original still exists in the converted model. A fold or fusion
    # moves a later node's work into this one (Conv + BatchNormalization: the Conv keeps its name
    # and computes the normalized values), which the missing reader gives away.
    shared = [(node, name) for node in original.graph.node for name in node.output
              if name in converted_names
              and (name in outputs or (_same_computation(node, producers.get(name))
                                       and _readers_kept(readers.get(name, []), converted_names)))]
    shared = shared[:_MAX_TENSORS]
    if not shared:
        return {"node": None, "note": "no intermediate tensor of the original kept its name in the converted model"}
    names = list(dict.fromkeys(name for _, name in shared))
    try:
        expected = ReferenceSession(_with_outputs(original, names, converted_names), what="the original model",
                              optimize=False).run(feeds)
        actual = NumpyEngine(with_outputs(converted, names)).run(feeds)
    except (VerificationError, LiteError, MemoryError, ValueError) as err:
        return {"node": None, "note": f"the intermediate tensors could not be compared ({err})"}
    agreeing = 0
    for node, name in shared:
        if name not in expected or name not in actual:
            continue
        error = output_error(name, expected[name], actual[name])
        if error.within(tolerance):
            agreeing += 1
            continue
        converted_node = producers.get(name)
        return {
            "node": node.name or f"{node.op_type} writing {name!r}",
            "op_type": node.op_type,
            "tensor": name,
            "error": error.describe(tolerance),
            "converted_as": _describe(converted_node),
            "agreeing_before": agreeing,
        }
    return {"node": None, "note": f"all {agreeing} shared intermediate tensors agree; only the outputs differ"}


def _with_outputs(proto: onnx.ModelProto, names: list[str], tensors: dict[str, lite_ir.Tensor]) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    declared = {value.name: value for value in (*copy.graph.value_info, *copy.graph.output)}
    del copy.graph.output[:]
    for name in names:
        if name in declared:
            copy.graph.output.append(declared[name])
        elif tensors[name].dtype == lite_ir.DataType.UNDEFINED:
            # A type nothing inferred (ops ONNX's inference does not know): ONNX Runtime fills it in.
            copy.graph.output.append(onnx.ValueInfoProto(name=name))
        else:
            copy.graph.output.append(onnx.helper.make_tensor_value_info(name, int(tensors[name].dtype), None))
    return copy


def _readers_kept(readers: list[onnx.NodeProto], converted_names) -> bool:
    return all(output in converted_names for reader in readers for output in reader.output if output)


def _same_computation(original: onnx.NodeProto, converted: lite_ir.Node | None) -> bool:
    return (converted is not None and converted.op_type == original.op_type
            and "fused_activation" not in converted.attributes)


def _describe(node: lite_ir.Node | None) -> str | None:
    if node is None:
        return None
    fused = node.attributes.get("fused_activation")
    activation = f" with fused {fused.value.decode()}" if fused is not None else ""
    return f"{node.op_type}{activation} ({node.name or 'unnamed'})"
