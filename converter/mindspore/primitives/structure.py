"""Bookkeeping primitives: tuples and side effects, which become no ONNX node.

* ``MakeTuple(*xs)`` builds a tuple; ``TupleGetItem(t, i)`` takes item ``i``;
* ``Load(param, u)`` reads a parameter under the monad ``u`` — the parameter itself;
* ``Depend(x, y)`` is ``x`` (``y`` only orders side effects); ``UpdateState`` yields a monad;
* ``Return(x)`` (older writers) is ``x``.
"""

from __future__ import annotations

import numpy as np

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import ConstValue, TranslationError, TupleValue, Value
from converter.mindspore.values import MONAD


def make_tuple(call: PrimitiveCall) -> Value:
    return TupleValue(tuple(call.inputs))


def tuple_get_item(call: PrimitiveCall) -> Value:
    container = call.inputs[0] if call.inputs else None
    index = call.arg(1, "index")
    if not isinstance(index, (int, np.integer)):
        raise TranslationError(f"index {index!r} is not an int")
    if isinstance(container, TupleValue):
        items = container.items
    elif isinstance(container, ConstValue) and isinstance(container.value, (tuple, list)):
        items = tuple(ConstValue(v) for v in container.value)
    elif index == 0 and container is not None:  # a single-output writer (see BatchNorm)
        return container
    else:
        raise TranslationError("input 0 is not a tuple")
    if isinstance(container, TupleValue) and container.untranslated and int(index) >= len(items):
        raise TranslationError(f"output {index} of this primitive ({container.untranslated}) is not translated; "
                               "it is only read when training")
    if not -len(items) <= int(index) < len(items):
        raise TranslationError(f"index {index} is out of range for a tuple of {len(items)}")
    return items[int(index)]


def first_input(call: PrimitiveCall) -> Value:
    if not call.inputs:
        raise TranslationError("has no inputs")
    return call.inputs[0]


def update_state(call: PrimitiveCall) -> Value:
    return MONAD


TABLE = {
    "MakeTuple": make_tuple,
    "make_tuple": make_tuple,
    "TupleGetItem": tuple_get_item,
    "tuple_getitem": tuple_get_item,
    "Load": first_input,
    "Depend": first_input,
    "Return": first_input,
    "UpdateState": update_state,
}
