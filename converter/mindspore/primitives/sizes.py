"""Sizes computed by the graph: ``Shape`` and ``Zeros``, as a dynamic-batch export writes them.

``nn.LSTM`` exported with ``Tensor(shape=[None, ...])`` makes its zero initial states with
``Zeros((layers × directions, Shape(x)[1], hidden), dtype)``; a fixed-size export has the same
values as constants.

* ``Shape(x)`` is a tuple of ints: a constant where every size of ``x`` is known, else a tuple
  whose known sizes are constants and whose unknown ones are int64 scalars read by ONNX
  ``Shape`` and ``Gather``, so a primitive reading only the known sizes still sees constants.
* A tuple of int scalars used where a tensor is needed becomes one 1-D int64 tensor
  (:func:`converter.mindspore.call.to_tensor`).
* ``Zeros(shape, dtype)``: a constant when ``shape`` is, else ONNX ``ConstantOfShape``.
"""

from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import ConstValue, TranslationError, TupleValue, Value
from converter.mindspore.primitives._common import int_tuple
from converter.mindspore.values import TYPE_IDS, DType

_SCALAR = np.dtype(np.int64)


def shape(call: PrimitiveCall) -> Value:
    x = call.tensor(0)
    if x.shape is None:
        raise TranslationError("the rank of input 0 is unknown (no 'shape' attribute); its sizes cannot be read")
    if all(_known(size) for size in x.shape):
        return ConstValue(tuple(int(size) for size in x.shape))
    whole = call.graph.add("Shape", [x], call.base, dtype=_SCALAR, shape=(len(x.shape),))
    items: list[Value] = []
    for axis, size in enumerate(x.shape):
        if _known(size):
            items.append(ConstValue(int(size)))
        else:
            index = call.initializer(np.array([axis], np.int64), f"axis{axis}")
            size = call.graph.add("Gather", [whole, index], call.base, dtype=_SCALAR, shape=(1,), axis=0)
            items.append(call.graph.add("Squeeze", [size], call.base, dtype=_SCALAR, shape=()))
    return TupleValue(tuple(items))


def _known(size) -> bool:
    return size is not None and int(size) >= 0


def zeros(call: PrimitiveCall) -> Value:
    if not call.inputs:
        raise TranslationError("has no inputs; Zeros takes a shape")
    dtype = _dtype(call.arg(1, "type", "dtype"))
    sizes = call.inputs[0]
    if isinstance(sizes, ConstValue):
        return call.initializer(np.zeros(int_tuple(sizes.value, "shape"), dtype), "zeros")
    value = numpy_helper.from_array(np.zeros(1, dtype), "value")
    return call.emit("ConstantOfShape", [call.tensor(0)], value=value)


def _dtype(target) -> np.dtype:
    if isinstance(target, DType):
        return np.dtype(target.dtype)
    if isinstance(target, (int, np.integer)) and int(target) in TYPE_IDS:
        return np.dtype(TYPE_IDS[int(target)])
    raise TranslationError(f"type {target!r} is not a dtype Zeros can make")


TABLE = {
    "Shape": shape,
    "Zeros": zeros,
}
