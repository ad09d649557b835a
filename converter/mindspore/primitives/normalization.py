"""Normalizations over feature axes: LayerNorm, GroupNorm (MindSpore operator docs; op yaml
``layer_norm_op.yaml``, ``group_norm_op.yaml``).

* ``LayerNorm(x, gamma, beta, begin_norm_axis=1, begin_params_axis=1, epsilon=1e-7)``:
  ``(x − mean) / sqrt(var + epsilon) · gamma + beta`` with mean and (biased) variance over the
  axes from ``begin_norm_axis`` on; ``gamma`` and ``beta`` have the shape
  ``x.shape[begin_params_axis:]`` and line up with the trailing axes. Where they have the
  normalized shape this is ONNX ``LayerNormalization(axis=begin_norm_axis)``; otherwise the
  normalization runs with a scale of ones and the affine map follows as Mul and Add.
* ``GroupNorm(x, num_groups, gamma, beta, eps=1e-5)`` on ``(N, C, *)``: each sample's channels
  are split into ``num_groups`` groups normalized over their channels and positions, then
  ``gamma``/``beta`` (per channel) apply. Opset 17 has no GroupNormalization, so it is written as
  exporters write it (and as the runtime's group-norm fusion recognizes)::

      x ─┬─► Reshape(0, G, −1) ─► InstanceNormalization(1, 0, eps) ─► Reshape ─► Mul(γ) ─► Add(β)
         └─► Shape ───────────────────────────────────────────────────┘

Both primitives return ``(y, mean, rstd)``; only ``y`` is translated (the statistics are only
read when training; a graph that reads them is refused, naming them).
"""

from __future__ import annotations

import numpy as np

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import TensorValue, TranslationError, TupleValue, Value

STATISTICS = "outputs 1 and 2: the mean and the reciprocal standard deviation"


def _axis(value: object, rank: int, what: str) -> int:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
        raise TranslationError(f"{what} {value!r} is not an int")
    if not -rank <= int(value) < rank:
        raise TranslationError(f"{what} {value} is out of range for an input of rank {rank}")
    return int(value) % rank


def _trailing_shape(value: TensorValue, start: int, what: str) -> tuple[int, ...]:
    """``value.shape[start:]``, which must be known (leading axes, the batch, may be dynamic)."""
    trailing = None if value.shape is None else value.shape[start:]
    if trailing is None or any(d is None for d in trailing):
        raise TranslationError(f"the sizes of {what} from axis {start} on are not known (no 'shape' attribute)")
    return tuple(int(d) for d in trailing)  # type: ignore[arg-type]


def layer_norm(call: PrimitiveCall) -> Value:
    x, gamma, beta = call.tensor(0), call.tensor(1), call.tensor(2)
    if x.rank is None:
        raise TranslationError("the rank of input 0 is unknown (no 'shape' attribute)")
    norm_axis = _axis(call.arg(3, "begin_norm_axis", default=1), x.rank, "begin_norm_axis")
    params_axis = _axis(call.arg(4, "begin_params_axis", default=1), x.rank, "begin_params_axis")
    epsilon = float(call.arg(5, "epsilon", default=1e-7))
    if params_axis == norm_axis:
        y = call.emit("LayerNormalization", [x, gamma, beta], axis=norm_axis, epsilon=epsilon)
        return TupleValue((y,), primary=0, untranslated=STATISTICS)
    normalized = _trailing_shape(x, norm_axis, "input 0")
    ones = call.initializer(np.ones(normalized, dtype=x.dtype or np.float32), "ones")
    zeros = call.initializer(np.zeros(normalized, dtype=x.dtype or np.float32), "zeros")
    plain = call.step("LayerNormalization", [x, ones, zeros], like=x, axis=norm_axis, epsilon=epsilon)
    y = call.emit("Add", [call.step("Mul", [plain, gamma], like=x), beta])
    return TupleValue((y,), primary=0, untranslated=STATISTICS)


def _per_channel(call: PrimitiveCall, value: TensorValue, rank: int, suffix: str) -> TensorValue:
    """A (C,) parameter shaped (C, 1, ..., 1) to broadcast along axis 1 of a rank-``rank`` input."""
    shape = [-1] + [1] * (rank - 2)
    array = call.graph.constant_of(value)
    if array is not None:
        return call.initializer(array.reshape(shape), suffix)
    target = call.initializer(np.asarray(shape, np.int64), f"{suffix}_shape")
    return call.step("Reshape", [value, target], like=value)


def group_norm(call: PrimitiveCall) -> Value:
    x = call.tensor(0)
    groups = int(call.arg(1, "num_groups"))
    gamma, beta = call.tensor(2), call.tensor(3)
    epsilon = float(call.arg(4, "eps", "epsilon", default=1e-5))
    if x.rank is None or x.rank < 2:
        raise TranslationError("input 0 must have a known rank of at least 2 (N, C, ...)")
    channels = x.shape[1] if x.shape is not None else None
    if groups <= 0 or (channels is not None and channels % groups):
        raise TranslationError(f"{channels} channels do not split into num_groups={groups}")
    dtype = x.dtype or np.float32
    planes = call.step("Reshape", [x, call.initializer(np.asarray([0, groups, -1], np.int64), "planes")], like=x)
    scale = call.initializer(np.ones(groups, dtype=dtype), "group_scale")
    bias = call.initializer(np.zeros(groups, dtype=dtype), "group_bias")
    normalized = call.step("InstanceNormalization", [planes, scale, bias], like=x, epsilon=epsilon)
    shape = call.step("Shape", [x])
    restored = call.step("Reshape", [normalized, shape], like=x)
    scaled = call.step("Mul", [restored, _per_channel(call, gamma, x.rank, "gamma")], like=x)
    y = call.emit("Add", [scaled, _per_channel(call, beta, x.rank, "beta")])
    return TupleValue((y,), primary=0, untranslated=STATISTICS)


TABLE = {
    "LayerNorm": layer_norm,
    "GroupNorm": group_norm,
}
