"""LSTM (MindSpore ``ops.LSTM``, as ``nn.LSTM`` writes it on CPU; ONNX LSTM, opset 14 form).

``nn.LSTM`` exports one ``LSTM(x, h0, c0, w)`` primitive per layer and direction
(``num_layers=1``, ``bidirectional=False``; the backward direction runs on ``ReverseV2`` of the
sequence, and the results are concatenated by the graph). ``x`` is (seq, batch, input_size),
``h0``/``c0`` are (1, batch, hidden) and ``w`` is the flat parameter vector (shape (n, 1, 1))::

    w = [ w_ih.ravel() (4H × input_size) | w_hh.ravel() (4H × H) | (b_ih + b_hh) (4H, if has_bias) ]

with the gate blocks of ``w_ih``/``w_hh``/the bias in MindSpore's order i, f, g, o (input, forget,
cell candidate, output). ONNX wants W (1, 4H, input), R (1, 4H, H), B (1, 8H) with the gates in
the order i, o, f, c; the translation cuts ``w`` with Slices and reorders the rows with a Gather
(constant folding turns this into plain initializers). The result is ``(y, h_n, c_n, reserve,
state)``; ``y`` is ONNX ``Y`` (seq, 1, batch, H) without its direction axis, ``h_n``/``c_n`` are
``Y_h``/``Y_c``; the training-only ``reserve`` and ``state`` are not translated.
"""

from __future__ import annotations

import numpy as np

from converter.mindspore.call import PrimitiveCall
from converter.mindspore.graph import TensorValue, TranslationError, TupleValue, Value
from converter.mindspore.primitives._common import flag

# Position, in MindSpore's i, f, g, o layout, of each gate in ONNX's i, o, f, c order.
ONNX_GATES_FROM_MINDSPORE = (0, 3, 1, 2)


def _ints(call: PrimitiveCall, values, suffix: str) -> TensorValue:
    return call.initializer(np.asarray(values, dtype=np.int64), suffix)


def _gate_rows(hidden: int) -> np.ndarray:
    return np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in ONNX_GATES_FROM_MINDSPORE])


def _block(call: PrimitiveCall, flat: TensorValue, start: int, shape: tuple[int, ...], name: str) -> TensorValue:
    """``flat[start : start + prod(shape)]`` reshaped to ``shape`` with its gate rows reordered
    (rows are axis 0), then given a leading direction axis."""
    size = int(np.prod(shape))
    ends = [_ints(call, [start], f"{name}_start"), _ints(call, [start + size], f"{name}_end")]
    piece = call.step("Slice", [flat, *ends], like=flat)
    shaped = call.step("Reshape", [piece, _ints(call, shape, f"{name}_shape")], like=flat)
    rows = _ints(call, _gate_rows(shape[0] // 4), f"{name}_gates")
    reordered = call.step("Gather", [shaped, rows], like=flat, axis=0)
    return call.step("Unsqueeze", [reordered, _ints(call, [0], f"{name}_direction")], like=flat)


def _check_layout(call: PrimitiveCall) -> tuple[int, int, bool]:
    """(input_size, hidden_size, has_bias) of a primitive this translation covers."""
    if int(call.arg(None, "num_layers", default=1)) != 1:
        raise TranslationError("num_layers > 1 in one primitive is not translated (nn.LSTM on CPU writes one per layer)")
    if flag(call.arg(None, "bidirectional", default=False), "bidirectional"):
        raise TranslationError("bidirectional=True in one primitive is not translated (nn.LSTM on CPU writes one "
                               "primitive per direction)")
    if int(call.arg(None, "proj_size", default=0)) != 0:
        raise TranslationError("proj_size > 0 (a projected LSTM) has no ONNX LSTM equivalent")
    return (int(call.arg(None, "input_size")), int(call.arg(None, "hidden_size")),
            flag(call.arg(None, "has_bias", default=True), "has_bias"))


def lstm(call: PrimitiveCall) -> Value:
    inputs, hidden, has_bias = _check_layout(call)
    x, h0, c0, weights = (call.tensor(i) for i in range(4))
    expected = 4 * hidden * (inputs + hidden + int(has_bias))
    if weights.shape is None or None in weights.shape:
        raise TranslationError("the size of the weights (input 3) is unknown (no 'shape' attribute)")
    if hidden <= 0 or inputs <= 0 or int(np.prod(weights.shape)) != expected:
        raise TranslationError(f"the weights hold {int(np.prod(weights.shape))} values; input_size={inputs}, "
                               f"hidden_size={hidden}, has_bias={has_bias} need {expected}")
    flat = call.step("Reshape", [weights, _ints(call, [-1], "flat")], like=weights)
    w = _block(call, flat, 0, (4 * hidden, inputs), "W")
    r = _block(call, flat, 4 * hidden * inputs, (4 * hidden, hidden), "R")
    b = None
    if has_bias:  # MindSpore adds b_ih and b_hh before packing; ONNX's Rb is then zero
        gates = _block(call, flat, 4 * hidden * (inputs + hidden), (4 * hidden,), "B")
        zeros = call.initializer(np.zeros((1, 4 * hidden), dtype=weights.dtype or np.float32), "Rb")
        b = call.step("Concat", [gates, zeros], like=weights, axis=1)
    outputs = call.graph.add_outputs("LSTM", [x, w, r, b, None, h0, c0], call.base, 3, "", hidden_size=hidden)
    y = call.emit("Squeeze", [outputs[0], _ints(call, [1], "direction")])
    untranslated = "outputs 3 and 4: the reserve and state buffers"
    return TupleValue((y, outputs[1], outputs[2]), primary=0, untranslated=untranslated)


TABLE = {
    "LSTM": lstm,
}
