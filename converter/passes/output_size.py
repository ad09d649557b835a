"""How many elements a node's outputs will hold, known from its constant inputs before it runs.

Constant folding evaluates nodes with ``onnx.reference``, which allocates whatever the node asks
for: ``Range(0, 1e10)`` wants 80 GB, ``ConstantOfShape([2**20, 2**20])`` 4 TiB. A model file is
untrusted input, so :func:`predicted_elements` computes the size first and folding skips nodes
over its budget (or whose size cannot be known), leaving them in the graph.

- ``Range``, ``ConstantOfShape``, ``Expand`` and ``Tile`` take their output shape from input
  *values*; their size is computed here in Python integers (exact, no int64 overflow), from the
  formulas on their ONNX operator pages.
- Every other op: ONNX's own shape inference on the single node (``infer_node_outputs``), given
  the input types and the values of the small inputs (shapes, scales, pads, ...). It never reads
  the shapes the model declares for the outputs, which a hostile model may understate.
- Ops whose output size depends on the data (``NonZero``, ``Unique``, ``Compress``) are bounded
  by their input's size.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import onnx
import onnx.defs
import onnx.shape_inference
from onnx import helper, numpy_helper

_DATA_ELEMENTS = 1 << 16  # inputs up to this size are handed to shape inference with their values


def predicted_elements(
    proto: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int
) -> tuple[list[int] | None, str | None]:
    """``(element count of each output, None)`` for ``proto`` (a default-domain node whose inputs
    ``feeds`` holds by name), or ``(None, why)`` when they cannot be known without evaluating it."""
    arrays = [feeds[name] if name else None for name in proto.input]
    explicit = _VALUE_SHAPED.get(proto.op_type)
    if explicit is not None:
        try:
            return explicit(arrays), None
        except (TypeError, ValueError, IndexError, OverflowError, ZeroDivisionError) as err:
            return None, f"its inputs do not give {proto.op_type} a valid output shape ({err})"
    bound = _DATA_DEPENDENT.get(proto.op_type)
    if bound is not None and arrays and arrays[0] is not None:
        return [bound(arrays[0])] * len(proto.output), None
    return _inferred(proto, feeds, opset)


def _range(arrays: list[np.ndarray | None]) -> list[int]:
    # https://onnx.ai/onnx/operators/onnx__Range.html: max(ceil((limit - start) / delta), 0)
    start, limit, delta = (array.item() for array in arrays)
    if all(isinstance(v, int) for v in (start, limit, delta)):
        return [max(-(-(limit - start) // delta), 0)]
    count = (float(limit) - float(start)) / float(delta)
    if not math.isfinite(count):
        raise ValueError("Range: the element count is not finite")
    return [max(math.ceil(count), 0)]


def _constant_of_shape(arrays: list[np.ndarray | None]) -> list[int]:
    return [_product(_dims(arrays[0]))]


def _expand(arrays: list[np.ndarray | None]) -> list[int]:
    # Bidirectional (numpy) broadcasting of the input's shape and the requested one.
    return [_product(_broadcast(list(arrays[0].shape), _dims(arrays[1])))]


def _tile(arrays: list[np.ndarray | None]) -> list[int]:
    data, repeats = arrays[0], _dims(arrays[1])
    if len(repeats) != data.ndim:
        raise ValueError("Tile: repeats must have one entry per input dimension")
    return [_product(d * r for d, r in zip(data.shape, repeats))]


_VALUE_SHAPED: dict[str, Callable[[list[np.ndarray | None]], list[int]]] = {
    "Range": _range,
    "ConstantOfShape": _constant_of_shape,
    "Expand": _expand,
    "Tile": _tile,
}

_DATA_DEPENDENT: dict[str, Callable[[np.ndarray], int]] = {
    "NonZero": lambda data: data.ndim * data.size,
    "Unique": lambda data: data.size,
    "Compress": lambda data: data.size,
}


def _dims(array: np.ndarray | None) -> list[int]:
    values = [int(v) for v in np.asarray(array).reshape(-1)]
    if any(v < 0 for v in values):
        raise ValueError("a dimension is negative")
    return values


def _broadcast(first: list[int], second: list[int]) -> list[int]:
    rank = max(len(first), len(second))
    first, second = [1] * (rank - len(first)) + first, [1] * (rank - len(second)) + second
    if any(a != b and 1 not in (a, b) for a, b in zip(first, second)):
        raise ValueError("the shapes do not broadcast")
    return [max(a, b) if 0 not in (a, b) else 0 for a, b in zip(first, second)]


def _product(values) -> int:
    return math.prod(int(v) for v in values)


def _inferred(proto: onnx.NodeProto, feeds: dict[str, np.ndarray], opset: int) -> tuple[list[int] | None, str | None]:
    try:
        schema = onnx.defs.get_schema(proto.op_type, opset, "")
        types = {name: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                 for name, a in feeds.items()}
        data = {name: numpy_helper.from_array(a, name) for name, a in feeds.items() if a.size <= _DATA_ELEMENTS}
        outputs = onnx.shape_inference.infer_node_outputs(
            schema, proto, types, data, None, [helper.make_opsetid("", opset)]
        )
    except Exception as err:  # noqa: BLE001 (SchemaError, InferenceError, TypeError...: the size stays unknown)
        lines = str(err).strip().splitlines()
        return None, f"ONNX shape inference rejects it ({lines[-1] if lines else type(err).__name__})"
    sizes = []
    for name in proto.output:
        kind = outputs.get(name)
        if kind is None or not kind.HasField("tensor_type"):
            return None, "an output is not a tensor"
        dims = kind.tensor_type.shape.dim
        if not kind.tensor_type.HasField("shape") or any(not d.HasField("dim_value") or d.dim_value < 0 for d in dims):
            return None, "its output size cannot be known before evaluating it, so it is not evaluated"
        sizes.append(_product(dim.dim_value for dim in dims))
    return sizes, None
