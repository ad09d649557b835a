"""Translators from MindSpore primitives to ONNX nodes, keyed by primitive name.

A translator takes a :class:`~converter.mindspore.call.PrimitiveCall` and returns the value the
primitive produces (a tensor, a tuple, a constant or a monad), appending ONNX nodes to the graph
under construction. The registry is the dict literal below; a name registered twice is an error
at import time.
"""

from __future__ import annotations

from collections.abc import Callable

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import Value
from converter.mindspore.primitives import (
    elementwise,
    nn,
    normalization,
    padding,
    recurrent,
    shape,
    sizes,
    structure,
)

Translator = Callable[[PrimitiveCall], Value]


def _merge(*tables: dict[str, Translator]) -> dict[str, Translator]:
    merged: dict[str, Translator] = {}
    for table in tables:
        for name, translator in table.items():
            if name in merged:
                raise ValueError(f"MindSpore primitive {name!r} is registered twice")
            merged[name] = translator
    return merged


PRIMITIVES: dict[str, Translator] = _merge(
    nn.TABLE,
    normalization.TABLE,
    recurrent.TABLE,
    padding.TABLE,
    elementwise.TABLE,
    shape.TABLE,
    sizes.TABLE,
    structure.TABLE,
)

__all__ = ["PRIMITIVES", "Translator"]
