"""ONNX export by tracing: run the network once on sample inputs while every op records its
ONNX node (:mod:`train._trace`), then assemble the nodes with ``onnx.helper``.

The model is stamped IR version 8 and opset 17 (ONNX Runtime 1.31 and 1.32 load IR ≤ 11), the first
dimension of every input and output is the symbolic ``batch``, parameters become initializers
under their MindSpore names (``conv1.weight``), and BatchNormalization stays a node of its own
(folding it is the converter's job). The network is traced in inference mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from train import _trace
from train.autograd import no_grad
from train.checkpoint import atomic_write
from train.errors import ExportError, MissingDependencyError
from train.tensor import Tensor

IR_VERSION = 8
OPSET = 17


def trace(net: Any, inputs: Sequence[Any]) -> tuple[_trace.Tracer, list[str], list[Tensor], list[Tensor]]:
    """Run ``net`` in inference mode on ``inputs``; return the tracer, input names, inputs, outputs."""
    tensors = [x if isinstance(x, Tensor) else Tensor(np.asarray(x)) for x in inputs]
    tensors = [Tensor(t.data) for t in tensors]  # fresh objects: the trace names them
    names = ["input"] if len(tensors) == 1 else [f"input_{i}" for i in range(len(tensors))]
    was_training = getattr(net, "training", False)
    net.set_train(False)
    try:
        with _trace.tracing() as tracer, no_grad():
            for tensor, name in zip(tensors, names):
                tracer.bind(tensor, name)
            result = net(*tensors)
    finally:
        net.set_train(was_training)
    outputs = list(result) if isinstance(result, (tuple, list)) else [result]
    if not all(isinstance(o, Tensor) for o in outputs):
        raise ExportError(
            f"{type(net).__name__} must return Tensors to be exported, got "
            f"{[type(o).__name__ for o in outputs]}"
        )
    return tracer, names, tensors, outputs


def build_model(net: Any, inputs: Sequence[Any], dynamic_batch: bool = True) -> Any:
    """The ``onnx.ModelProto`` for ``net`` traced on ``inputs``."""
    try:
        import onnx
        from onnx import helper, numpy_helper
    except ImportError as err:
        raise MissingDependencyError("ONNX export needs onnx: pip install onnx") from err
    tracer, input_names, input_tensors, outputs = trace(net, inputs)
    output_names = ["output"] if len(outputs) == 1 else [f"output_{i}" for i in range(len(outputs))]
    rename: dict[str, str] = {}
    nodes = []
    for value, name in zip(outputs, output_names):
        traced = tracer.names.get(id(value))
        if traced is None:
            raise ExportError(f"output {name} of {type(net).__name__} was not computed by traceable ops")
        if traced in rename or traced in input_names:  # the same tensor twice, or an input passed through
            nodes.append(helper.make_node("Identity", [traced], [name], name=f"identity_{name}"))
        else:
            rename[traced] = name
    for index, node in enumerate(tracer.nodes):
        node_inputs = [rename.get(n, n) for n in node.inputs]
        while node_inputs and node_inputs[-1] == "":
            node_inputs.pop()
        attrs = {k: v for k, v in node.attrs.items() if v is not None}
        nodes.insert(
            index,
            helper.make_node(
                node.op_type,
                node_inputs,
                [rename.get(o, o) for o in node.outputs],
                name=f"{node.op_type}_{index}",
                **attrs,
            ),
        )
    used = {n for node in nodes for n in node.input}
    initializers = [
        numpy_helper.from_array(value, name) for name, value in tracer.initializers.items() if name in used
    ]

    def value_info(name: str, tensor: Tensor) -> Any:
        elem = helper.np_dtype_to_tensor_dtype(tensor.dtype)
        shape: list[Any] = list(tensor.shape)
        if dynamic_batch and shape:
            shape[0] = "batch"
        return helper.make_tensor_value_info(name, elem, shape)

    graph = helper.make_graph(
        nodes,
        type(net).__name__,
        [value_info(n, t) for n, t in zip(input_names, input_tensors)],
        [value_info(n, t) for n, t in zip(output_names, outputs)],
        initializers,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", OPSET)],
        producer_name="lite-train",
        producer_version="0.1.0",
    )
    model.ir_version = IR_VERSION
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as err:
        raise ExportError(
            f"the exported graph of {type(net).__name__} fails the ONNX checker: {err}"
        ) from err
    return model


def export_onnx(net: Any, inputs: Sequence[Any], path: Path, dynamic_batch: bool = True) -> Path:
    if not inputs:
        raise ExportError("export needs at least one sample input: export(net, Tensor(x), file_name=...)")
    model = build_model(net, inputs, dynamic_batch)
    atomic_write(path, model.SerializeToString())
    return path
