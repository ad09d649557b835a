"""What format 2.x's compact writer (:mod:`lite.format.writer`) may write once and share: the keys
that make two values equal on disk, and what walking one costs the reader's verifier.

Sharing trades the verifier's work for bytes: a shared item is walked once per reference, so an
item is shared only when its walk costs at most :data:`lite.format.verifier.SHARED_WALK_COST`
steps. The costs here count those steps as the verifier does; the keys compare values as they
are stored (floats by their bits, strings with their type), never as Python compares them.
"""

from __future__ import annotations

import numpy as np

from lite.format import ir


def vector_cost(count: int) -> int:
    """The verifier's steps for a string of ``count`` bytes or a scalar vector of ``count`` elements."""
    return 1 + count // 8


def attribute_value_cost(kind: ir.AttributeType, value: object) -> int:
    T = ir.AttributeType
    if kind in (T.FLOATS, T.INTS, T.GRAPHS):
        return vector_cost(len(value))
    if kind == T.STRING:
        return vector_cost(len(value.encode("utf-8") if isinstance(value, str) else value))
    if kind == T.STRINGS:
        return sum(vector_cost(len(v.encode("utf-8") if isinstance(v, str) else v)) for v in value)
    return 0


def attribute_key(kind: ir.AttributeType, value: object) -> tuple | None:
    """What makes two attribute values equal on disk (None: never share). Floats compare by
    their bits, so -0.0 and 0.0 stay apart."""
    T = ir.AttributeType
    try:
        if kind in (T.FLOAT, T.FLOATS):
            return (np.asarray(value, "<f4").tobytes(), np.ndim(value))
        if kind in (T.INT, T.GRAPH):
            return (int(value),)
        if kind in (T.INTS, T.GRAPHS):
            return tuple(int(v) for v in value)
        if kind == T.STRING:
            return (type(value), value) if isinstance(value, (bytes, str)) else None
        if kind == T.STRINGS:
            key = tuple((type(v), v) for v in value)
            hash(key)
            return key
    except (TypeError, ValueError, OverflowError):
        return None  # written unshared; new_attribute reports what is wrong
    return None
