"""float16 graphs computed in float32 on the numpy engine, as ONNX Runtime computes them on CPUs.

ONNX Runtime has few float16 kernels on x86 CPUs: the others run in float32 between Casts it
inserts, and it removes the Cast pairs between two such nodes, so a float16 graph is computed in
float32 with float16 at its inputs, its outputs and its own Casts. numpy has no float16 BLAS and
converts float16 element by element (several times an addition's cost), so node by node, each
rounding its output to float16, a MobileNetV3-small took about three times its float32 time and
moved twice as far from the float32 model's output as ONNX Runtime.

The engine therefore runs a model with float16 tensors as ONNX Runtime does:

- float16 constants are widened to float32 once, at load (float16 weights take twice their
  memory, as in ONNX Runtime);
- float16 graph inputs are widened on the way in, and outputs declared float16 rounded on the
  way out;
- a node whose output type its attributes or an input's type decide (Cast, CastLike,
  ConstantOfShape, Random*, ...) and that is declared float16 gives the float16 value (rounded
  once, as its float16 output would be) as float32; such nodes, and BitCast, get their inputs
  declared float16 as float16.

Everything else needs nothing: kernels keep their inputs' type, so no float16 array reaches them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from lite.format import ir
from lite.format.dtypes import DataType

# Nodes whose output's element type comes from an attribute or from another input than the data,
# or whose result depends on the input's type itself.
_TYPED = {"Cast", "CastLike", "BitCast", "Constant", "ConstantOfShape", "EyeLike", "RandomNormal", "RandomNormalLike",
          "RandomUniform", "RandomUniformLike", "Bernoulli", "Multinomial"}


def applies(model: ir.Model) -> bool:
    """Whether ``model`` has float16 tensors and declares every tensor's type: the types decide
    which outputs and Cast inputs are rounded to float16 (a model converted without its types
    inferred runs node by node, each kernel rounding its float16 output)."""
    tensors = [tensor for graph in model.graphs for tensor in graph.tensors]
    return (any(tensor.dtype == DataType.FLOAT16 for tensor in tensors)
            and all(tensor.dtype != DataType.UNDEFINED for tensor in tensors))


def widen(value: Any) -> Any:
    """A float16 array as float32 (the same values), read-only where it was; anything else as is."""
    if not isinstance(value, np.ndarray) or value.dtype != np.float16:
        return value
    wide = value.astype(np.float32)
    wide.flags.writeable = value.flags.writeable
    return wide


def widen_feeds(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``feeds`` with their float16 arrays as float32."""
    return {name: widen(value) for name, value in feeds.items()}


def narrow_outputs(graph: ir.Graph, outputs: dict[str, Any]) -> dict[str, Any]:
    """``outputs`` with those the graph declares float16 rounded to float16, once."""
    declared = {graph.tensors[index].name for index in graph.outputs
                if graph.tensors[index].dtype == DataType.FLOAT16}
    return {name: _narrow(value) if name in declared else value for name, value in outputs.items()}


def _narrow(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype.kind == "f" and value.dtype != np.float16:
        return value.astype(np.float16)
    return value


def typed_output(node: ir.Node, graph: ir.Graph, fn: Callable) -> Callable:
    """``fn``, the kernel of ``node``, for nodes whose result depends on their inputs' or their
    output's type (see the module docstring): inputs declared float16 given as float16 (rounded
    once, as ONNX Runtime rounds before its own Casts; BitCast reads their bits, Cast to string
    prints them), an output declared float16 given as float32 holding its float16 values."""
    narrowed = [position for position, index in enumerate(node.inputs)
                if index >= 0 and graph.tensors[index].dtype == DataType.FLOAT16]
    rounds = (len(node.outputs) == 1 and node.outputs[0] >= 0
              and graph.tensors[node.outputs[0]].dtype == DataType.FLOAT16)
    if node.op_type not in _TYPED or not (narrowed or rounds):
        return fn

    def typed(*args: Any, **keywords: Any) -> Any:
        args = tuple(_narrow(value) if position in narrowed else value for position, value in enumerate(args))
        value = fn(*args, **keywords)
        if rounds and isinstance(value, np.ndarray) and value.dtype.kind == "f":
            return value.astype(np.float16).astype(np.float32)
        return value

    return typed
