"""The default cells of LSTM, GRU and RNN, every direction in one time loop.

What exported models use (PyTorch, Keras via tf2onnx, paddle2onnx, madmom): sigmoid gates, tanh,
no clip or coupled gates; LSTM with or without peepholes. A step of such a layer is a few dozen
small numpy calls, so the time goes to calls, not arithmetic; these loops make as few as the cell
allows:

- the directions are stacked on a leading axis: the reverse direction's input projection is
  stored reversed in time, so step t reads one ``(directions, batch, k)`` slice and every
  elementwise call covers both directions. Its outputs land reversed too, and are flipped once
  at the end. Independent nodes of one cell stack the same way (:func:`run_stacked`,
  :mod:`lite.ops._rnn_stack`): the numpy engine runs a bidirectional layer written as two
  forward nodes as one loop;
- weights are laid out once (transposed, biases summed; by the engine at load, see the
  kernels' ``prepare``), buffers allocated once per call, and every step writes with ``out=``,
  h straight into its slice of Y;
- the gates are kept gate-major, ``(gates, directions, batch, H)``: numpy takes about twice as
  long over a strided view (a gate whose directions' blocks interleave) as over contiguous memory;
- sigmoid is computed as ``(1 + tanh(x / 2)) / 2`` (no overflow of ``exp(-x)``), with the
  halving of x folded into the gates' weights and biases: scaling by 0.5 is exact in binary
  floating point, so one ``tanh`` over all of LSTM's gates gives tanh(x/2) for the sigmoid gates
  and tanh(x) for the candidate, and two calls turn the former into sigmoids.

Per step: one stacked matmul for the recurrence of every direction (numpy runs the stack in one
call, faster than a call per direction), then ten elementwise calls for LSTM and GRU, two for RNN;
sixteen for LSTM with peepholes, in a loop of its own so that the default one does no extra work.
With batch 1 and full sequences, RNN and LSTM with peepholes run the loops of
:mod:`lite.ops._rnn_rows` (a 2-D product per step; twelve elementwise calls for the latter).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.errors import ModelFormatError
from lite.ops._rnn_common import TimeMajor
from lite.ops._rnn_rows import fits_rows_loop, lstm_peepholes_row_loop, rnn_row_loop
from lite.ops._rnn_stack import Layer, Stack, Steps, gate_major

# The activation lists of the default cells, per direction (compared case-insensitively).
DEFAULT_ACTIVATIONS = {"LSTM": ("sigmoid", "tanh", "tanh"), "GRU": ("sigmoid", "tanh"), "RNN": ("tanh",)}


def is_default_cell(op: str, activations, directions: int, clip) -> bool:
    """Whether the node's activations are the defaults and it has no clip (the op's own
    features, peepholes and coupled gates, are the caller's to check)."""
    if clip is not None:
        return False
    if activations is None:
        return True
    names = [name.decode() if isinstance(name, bytes) else str(name) for name in activations]
    return [name.lower() for name in names] == list(DEFAULT_ACTIVATIONS[op]) * directions


@dataclass(frozen=True)
class CellWeights:
    """A node's weights as the loops use them. ``X @ w_t`` projects the inputs of every direction
    in one GEMM (direction d's ``k`` columns after those of the directions before it; its bias
    ``bias[d]``); ``h[d] @ r_t[d]`` is the recurrence (GRU without linear_before_reset: ``r_t``
    for z and r, ``r_h_t`` for the candidate). Gate columns feeding a sigmoid are halved.
    ``recurrent_bias`` is GRU's Rbh where linear_before_reset puts it inside the reset product."""

    w_t: np.ndarray  # (input, directions * k)
    bias: np.ndarray  # (directions, k)
    r_t: np.ndarray  # (directions, hidden, n)
    r_h_t: np.ndarray | None = None  # (directions, hidden, hidden)
    recurrent_bias: np.ndarray | None = None  # (directions, hidden)
    has_bias: bool = True  # whether B was given (a prepared value holds for calls that agree)
    peepholes: np.ndarray | None = None  # LSTM's P: (3, directions, 1, hidden), i, f, o, halved

    def __post_init__(self) -> None:
        # Prepared at load and shared by every thread's calls: read-only, so none can change it.
        for value in (self.w_t, self.bias, self.r_t, self.r_h_t, self.recurrent_bias, self.peepholes):
            if value is not None:
                value.flags.writeable = False

    @property
    def dtype(self) -> np.dtype:
        return self.w_t.dtype


def _halving(gates: int, sigmoid_gates: int, hidden: int, dtype) -> np.ndarray:
    """Per gate row: 0.5 for the sigmoid gates (which come first), 1 for the rest."""
    scale = np.ones(gates * hidden, dtype)
    scale[: sigmoid_gates * hidden] = 0.5
    return scale


def _transposed(weights, scale: np.ndarray, dtype) -> np.ndarray:
    """R ``(directions, rows, cols)`` scaled per row, as a C-contiguous ``(directions, cols, rows)``."""
    scaled = np.asarray(weights, dtype=dtype) * scale[:, None]
    return np.ascontiguousarray(np.swapaxes(scaled, 1, 2))


def _side_by_side(weights, scale: np.ndarray, dtype) -> np.ndarray:
    """W ``(directions, rows, input)`` scaled per row, as ``(input, directions * rows)``."""
    scaled = np.asarray(weights, dtype=dtype) * scale[:, None]
    return np.ascontiguousarray(scaled.transpose(2, 0, 1)).reshape(scaled.shape[2], -1)


def _biases(B, gates: int, hidden: int, directions: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """(Wb, Rb), each ``(directions, gates * hidden)``; zeros where B is omitted."""
    if B is None:
        zeros = np.zeros((directions, gates * hidden), dtype)
        return zeros, zeros
    B = np.asarray(B, dtype=dtype)
    return B[:, : gates * hidden], B[:, gates * hidden :]


def has_peepholes(P) -> bool:
    """Whether an LSTM's P is given and not all zero (some exporters write zeros for none)."""
    return P is not None and bool(np.any(P))


def lstm_weights(W, R, B, hidden: int, dtype, P=None) -> CellWeights:
    """Gates i, o, f sigmoid (halved), c tanh; both biases in the projection. With peepholes see
    :func:`_peephole_lstm_weights`."""
    if has_peepholes(P):
        return _peephole_lstm_weights(W, R, B, P, hidden, dtype)
    scale = _halving(4, 3, hidden, dtype)
    w_bias, r_bias = _biases(B, 4, hidden, len(W), dtype)
    return CellWeights(_side_by_side(W, scale, dtype), (w_bias + r_bias) * scale, _transposed(R, scale, dtype),
                       has_bias=B is not None)


# ONNX's gates i, o, f, c reordered i, f, c, o: the two that see Ct-1 side by side, o (which
# sees Ct) last, so one call adds both peepholes of Ct-1 and one tanh covers i, f and c~.
_PEEPHOLE_GATE_ORDER = (0, 2, 3, 1)


def _peephole_lstm_weights(W, R, B, P, hidden: int, dtype) -> CellWeights:
    """The weights of :func:`_run_lstm_peepholes`: gates reordered i, f, c, o; the rows of i, f
    and o halved, their peepholes too (Pi * Ct-1 is part of the sigmoid's input, like Xt Wi)."""
    if np.shape(P) != (len(W), 3 * hidden):
        raise ModelFormatError(
            f"LSTM: P (peepholes) has shape {np.shape(P)}; with {len(W)} direction(s) of hidden size {hidden} it "
            f"must be {(len(W), 3 * hidden)} (Pi, Po, Pf per direction): re-export the layer's peephole weights"
        )
    rows = np.concatenate([np.arange(gate * hidden, (gate + 1) * hidden) for gate in _PEEPHOLE_GATE_ORDER])
    W, R = np.asarray(W)[:, rows], np.asarray(R)[:, rows]
    if B is not None:
        B = np.asarray(B)[:, np.concatenate([rows, rows + 4 * hidden])]
    scale = np.full(4 * hidden, 0.5, dtype)
    scale[2 * hidden : 3 * hidden] = 1  # c~, the tanh gate
    w_bias, r_bias = _biases(B, 4, hidden, len(W), dtype)
    i, o, f = np.swapaxes(np.asarray(P, dtype=dtype).reshape(len(W), 3, hidden), 0, 1)  # ONNX order i, o, f
    peepholes = np.ascontiguousarray(np.stack([i, f, o])[:, :, None, :] * 0.5)
    return CellWeights(_side_by_side(W, scale, dtype), (w_bias + r_bias) * scale, _transposed(R, scale, dtype),
                       has_bias=B is not None, peepholes=peepholes)


def gru_weights(W, R, B, hidden: int, dtype, linear_before_reset: int) -> CellWeights:
    """Gates z, r sigmoid (halved), h tanh. Rbz, Rbr join the projection; Rbh too, unless
    linear_before_reset applies r after it."""
    scale = _halving(3, 2, hidden, dtype)
    w_bias, r_bias = _biases(B, 3, hidden, len(W), dtype)
    R_t = _transposed(R, scale, dtype)
    if linear_before_reset:
        bias = np.concatenate([w_bias[:, : 2 * hidden] + r_bias[:, : 2 * hidden], w_bias[:, 2 * hidden :]], axis=1)
        return CellWeights(_side_by_side(W, scale, dtype), bias * scale, R_t,
                           recurrent_bias=np.array(r_bias[:, 2 * hidden :]), has_bias=B is not None)
    return CellWeights(_side_by_side(W, scale, dtype), (w_bias + r_bias) * scale,
                       np.ascontiguousarray(R_t[:, :, : 2 * hidden]), np.ascontiguousarray(R_t[:, :, 2 * hidden :]),
                       has_bias=B is not None)


def rnn_weights(W, R, B, hidden: int, dtype) -> CellWeights:
    scale = np.ones(hidden, dtype)
    w_bias, r_bias = _biases(B, 1, hidden, len(W), dtype)
    return CellWeights(_side_by_side(W, scale, dtype), w_bias + r_bias, _transposed(R, scale, dtype),
                       has_bias=B is not None)


def usable(weights: CellWeights | None, B, dtype, P=None) -> bool:
    """Whether weights prepared at load fit this call: same dtype, B given iff it was then, and
    LSTM's peepholes likewise (the engine prepares only constant inputs: a B or P computed at run
    time was None there)."""
    return (
        weights is not None
        and weights.dtype == dtype
        and weights.has_bias == (B is not None)
        and (weights.peepholes is not None) == has_peepholes(P)
    )


def run_lstm(inputs: TimeMajor, weights: CellWeights) -> tuple:
    """One LSTM node's outputs (:func:`run_stacked`)."""
    return run_stacked("LSTM", [Layer(inputs, weights)])


def run_gru(inputs: TimeMajor, weights: CellWeights) -> tuple:
    """One GRU node's outputs (:func:`run_stacked`)."""
    return run_stacked("GRU", [Layer(inputs, weights)])


def run_rnn(inputs: TimeMajor, weights: CellWeights) -> tuple:
    """One RNN node's outputs (:func:`run_stacked`)."""
    return run_stacked("RNN", [Layer(inputs, weights)])


def run_stacked(op: str, layers: list[Layer]) -> tuple:
    """The outputs of every layer, one layer's after the other's, from one time loop over all
    their directions. The layers share the cell (LSTM with or without peepholes, GRU with or
    without linear_before_reset), the hidden size, dtype, sequence length and batch."""
    stack = Stack(layers)
    weights = layers[0].weights
    if op == "LSTM":
        if weights.peepholes is None:
            return _lstm_loop(stack)
        return lstm_peepholes_row_loop(stack) if fits_rows_loop(stack, 2) else _lstm_peepholes_loop(stack)
    if op == "GRU":
        return _gru_reset_first_loop(stack) if weights.recurrent_bias is None else _gru_loop(stack)
    return rnn_row_loop(stack) if fits_rows_loop(stack) else _rnn_loop(stack)


def _lstm_loop(stack: Stack) -> tuple:
    """Ct = f * Ct-1 + i * c~, Ht = o * tanh(Ct)."""
    projected = stack.project()
    steps = Steps(stack)
    h, c = steps.h, stack.state(1)
    c_next, product = np.empty_like(c), np.empty_like(c)
    recurrence = np.empty(c.shape[:-1] + (4 * stack.hidden,), stack.dtype)
    recurrence_gates = gate_major(recurrence, stack.hidden)
    z = np.empty(projected.shape[1:], stack.dtype)  # i, o, f, c~
    sigmoid_gates = z[:3]
    i, o, f, candidate = z
    half = np.full_like(sigmoid_gates, 0.5)  # numpy multiplies by an array faster than by a scalar
    for t in range(len(projected)):
        np.matmul(h, stack.r_t, out=recurrence)
        np.add(recurrence_gates, projected[t], out=z)
        np.tanh(z, out=z)  # tanh(x/2) for i, o, f (their rows are halved), tanh(x) for c~
        _halved_plus_half(sigmoid_gates, half)
        np.multiply(f, c, out=c_next)
        np.multiply(i, candidate, out=product)
        np.add(c_next, product, out=c_next)
        np.tanh(c_next, out=product)
        output = steps.Y[t]
        np.multiply(o, product, out=output)
        h = steps.emit(t, output)
        steps.keep(t, c_next, c)
        c, c_next = c_next, c
    return steps.finish(c)


def _lstm_peepholes_loop(stack: Stack) -> tuple:
    """:func:`_lstm_loop` with Pi * Ct-1 and Pf * Ct-1 added to i and f, Po * Ct to o: o's sigmoid
    waits for Ct. Gates in the order i, f, c~, o (:func:`_peephole_lstm_weights`)."""
    projected = stack.project()
    steps = Steps(stack)
    h, c = steps.h, stack.state(1)
    c_next, product = np.empty_like(c), np.empty_like(c)
    recurrence = np.empty(c.shape[:-1] + (4 * stack.hidden,), stack.dtype)
    recurrence_gates = gate_major(recurrence, stack.hidden)
    z = np.empty(projected.shape[1:], stack.dtype)  # i, f, c~, o
    input_forget, before_output = z[:2], z[:3]
    i, f, candidate, o = z
    peepholes_if, peepholes_o = stack.peepholes[:2], stack.peepholes[2]
    peeped = np.empty_like(input_forget)
    half = np.full_like(input_forget, 0.5)
    half_o = half[0]
    for t in range(len(projected)):
        np.matmul(h, stack.r_t, out=recurrence)
        np.add(recurrence_gates, projected[t], out=z)
        np.multiply(peepholes_if, c, out=peeped)
        np.add(input_forget, peeped, out=input_forget)
        np.tanh(before_output, out=before_output)  # tanh(x/2) for i, f (halved rows), tanh(x) for c~
        _halved_plus_half(input_forget, half)
        np.multiply(f, c, out=c_next)
        np.multiply(i, candidate, out=product)
        np.add(c_next, product, out=c_next)
        np.multiply(peepholes_o, c_next, out=product)
        np.add(o, product, out=o)
        np.tanh(o, out=o)
        _halved_plus_half(o, half_o)
        np.tanh(c_next, out=product)
        output = steps.Y[t]
        np.multiply(o, product, out=output)
        h = steps.emit(t, output)
        steps.keep(t, c_next, c)
        c, c_next = c_next, c
    return steps.finish(c)


def _gru_loop(stack: Stack) -> tuple:
    """Ht = h~ + z * (Ht-1 - h~), i.e. (1 - z) * h~ + z * Ht-1; h~ = tanh(x Wh + Wbh + r * (h Rh + Rbh))
    (linear_before_reset)."""
    hidden = stack.hidden
    projected = stack.project()  # z, r, Rbh, h
    steps = Steps(stack)
    h = steps.h
    recurrence = np.empty(h.shape[:-1] + (3 * hidden,), stack.dtype)
    recurrence_gates = gate_major(recurrence, hidden)
    summed = np.empty((3, *h.shape), stack.dtype)  # z, r (before their sigmoid), h Rh + Rbh
    sigmoid_gates = summed[:2]
    z, r, h_rh = summed
    half = np.full_like(sigmoid_gates, 0.5)
    candidate = np.empty_like(h)
    projected_summed, projected_h = projected[:, :3], projected[:, 3]
    for t in range(len(projected)):
        np.matmul(h, stack.r_t, out=recurrence)
        np.add(recurrence_gates, projected_summed[t], out=summed)
        np.tanh(sigmoid_gates, out=sigmoid_gates)
        _halved_plus_half(sigmoid_gates, half)
        np.multiply(r, h_rh, out=candidate)  # h~ = tanh(x Wh + Wbh + r * (h Rh + Rbh))
        np.add(candidate, projected_h[t], out=candidate)
        np.tanh(candidate, out=candidate)
        h = steps.emit(t, _interpolate(h, candidate, z, steps.Y[t]))
    return steps.finish()


def _gru_reset_first_loop(stack: Stack) -> tuple:
    """GRU without linear_before_reset: h~ = tanh(x Wh + Wbh + Rbh + (r * h) Rh)."""
    hidden = stack.hidden
    projected = stack.project()  # z, r, h
    steps = Steps(stack)
    h = steps.h
    recurrence = np.empty(h.shape[:-1] + (2 * hidden,), stack.dtype)
    recurrence_gates = gate_major(recurrence, hidden)
    gates = np.empty((2, *h.shape), stack.dtype)
    z, r = gates
    half = np.full_like(gates, 0.5)
    reset_h, candidate = np.empty_like(h), np.empty_like(h)
    projected_gates, projected_h = projected[:, :2], projected[:, 2]
    for t in range(len(projected)):
        np.matmul(h, stack.r_t, out=recurrence)
        np.add(recurrence_gates, projected_gates[t], out=gates)
        np.tanh(gates, out=gates)
        _halved_plus_half(gates, half)
        np.multiply(r, h, out=reset_h)
        np.matmul(reset_h, stack.r_h_t, out=candidate)
        np.add(candidate, projected_h[t], out=candidate)
        np.tanh(candidate, out=candidate)
        h = steps.emit(t, _interpolate(h, candidate, z, steps.Y[t]))
    return steps.finish()


def _halved_plus_half(gates: np.ndarray, half: np.ndarray) -> None:
    """``gates = 0.5 * gates + 0.5`` in place: sigmoid(x) from tanh(x / 2), the gates' rows of
    the weights halved at load."""
    np.multiply(gates, half, out=gates)
    np.add(gates, half, out=gates)


def _interpolate(h: np.ndarray, candidate: np.ndarray, z: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out = candidate + z * (h - candidate)``: GRU's (1 - z) * h~ + z * Ht-1 in three calls."""
    np.subtract(h, candidate, out=out)
    np.multiply(out, z, out=out)
    np.add(out, candidate, out=out)
    return out


def _rnn_loop(stack: Stack) -> tuple:
    """Ht = tanh(Xt W^T + Ht-1 R^T + Wb + Rb)."""
    projected = stack.project()
    steps = Steps(stack)
    h = steps.h
    projected = projected[:, 0]
    for t in range(len(projected)):
        output = steps.Y[t]
        np.matmul(h, stack.r_t, out=output)
        np.add(output, projected[t], out=output)
        np.tanh(output, out=output)
        h = steps.emit(t, output)
    return steps.finish()
