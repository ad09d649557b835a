"""Loops for one batch entry and full sequences (madmom's layers): a 2-D product per step, fewer calls.

With batch 1 the state of every direction is one row, and a block-diagonal ``M`` (each
direction's recurrent weights on its own rows and columns, zeros elsewhere) makes the recurrence
of all directions one 2-D product ``row @ M``, written gate-major ``(gate, direction, H)`` as
the step reads it: faster than the stacked matmul, and the projection is then added over
contiguous memory instead of a strided view. Without ``sequence_lens`` each step's state is its
output, so a step reads the row the last one wrote.

RNN: Ht = tanh(Ht-1 @ M + projected), three calls. LSTM with peepholes: the loop of
:func:`lite.ops._rnn_default_cells._lstm_peepholes_loop` makes sixteen elementwise calls and a
stacked matmul per step, this one twelve and the product, the same arithmetic up to the order of
a few float32 sums:

- the states live in one buffer, ``S[t] = [h, c, o's input]`` of step t (every direction's h,
  then every c), so ``S[t][h, c] @ M`` is the recurrence *and* the peepholes of i and f on Ct-1
  (Pi, Pf as diagonals under R's rows);
- o's input is written next to Ct, so one tanh covers both (tanh(Ct) and tanh(x/2) for o);
- S holds 2h, not h: o = (1 + tanh(x/2)) / 2, so 2h = (1 + tanh(x/2)) * tanh(Ct) is two calls
  instead of three, and M's rows for h are halved. Scaling by 2 is exact in binary floating
  point, so h (and the recurrence) are the values of the loop that halves o, bit for bit.

``M`` holds every direction's rows for every direction's columns: up to
:data:`_MAX_ROWS_WEIGHTS_BYTES` the product's extra reads of zeros cost less than the calls the
loop saves; larger layers take the general loops.
"""

from __future__ import annotations

import numpy as np

from lite.ops._rnn_stack import Layer, Stack, in_time_order

# Above this the block-diagonal weights' zeros cost a product more time than the loop saves.
_MAX_ROWS_WEIGHTS_BYTES = 256 * 1024


def fits_rows_loop(stack: Stack, rows_per_unit: int = 1) -> bool:
    """Whether a loop of this module runs ``stack``: batch 1, every sequence full, ``M`` (of
    ``rows_per_unit`` rows per hidden unit: LSTM with peepholes has h's and c's) of at most
    :data:`_MAX_ROWS_WEIGHTS_BYTES`."""
    if stack.batch != 1 or stack.seq_length == 0 or stack.masks() is not None:
        return False
    directions, columns = len(stack.backwards), stack.r_t.shape[-1]
    size = rows_per_unit * directions * stack.hidden * directions * columns * np.dtype(stack.dtype).itemsize
    return size <= _MAX_ROWS_WEIGHTS_BYTES


def fits_chain_loop(count: int, hidden: int, dtype) -> bool:
    """Whether :func:`lstm_peepholes_chain_loop` runs ``count`` layers of ``hidden`` units: its
    ``M`` of at most :data:`_MAX_ROWS_WEIGHTS_BYTES`."""
    return 2 * count * hidden * 4 * count * hidden * np.dtype(dtype).itemsize <= _MAX_ROWS_WEIGHTS_BYTES


def block_diagonal(r_t: np.ndarray, hidden: int) -> np.ndarray:
    """``(D, H, gates * H)`` recurrent weights as ``M`` ``(D * H, gates * D * H)``: direction d's
    rows feed its own columns, gate-major ``(gate, direction, H)``."""
    directions, rows, columns = r_t.shape
    gates = columns // hidden
    weights = np.zeros((directions, rows, gates, directions, hidden), r_t.dtype)
    for d in range(directions):
        weights[d, :, :, d, :] = r_t[d].reshape(rows, gates, hidden)
    return weights.reshape(directions * rows, gates * directions * hidden)


def rnn_row_loop(stack: Stack) -> tuple:
    """Ht = tanh(Ht-1 @ M + projected); S[t + 1] is step t's output, S[0] the initial state."""
    directions, hidden = len(stack.backwards), stack.hidden
    projected = stack.project().reshape(stack.seq_length, 1, directions * hidden)
    S = np.empty((stack.seq_length + 1, 1, directions * hidden), stack.dtype)
    S[0] = stack.state(0).reshape(1, -1)
    weights = block_diagonal(stack.r_t, hidden)
    for state, new, projected_t in zip(S[:-1], S[1:], projected):
        np.dot(state, weights, out=new)
        np.add(new, projected_t, out=new)
        np.tanh(new, out=new)
    Y = S[1:].reshape(stack.seq_length, directions, 1, hidden)
    final = Y[-1].copy()  # before Y's reverse directions are flipped in place
    return stack.finish(in_time_order(Y, stack.backwards), [final])


def _peephole_rows_weights(stack: Stack) -> np.ndarray:
    """``M`` ``(2 * D * H, 4 * D * H)`` of :func:`lstm_peepholes_row_loop`: rows h of every
    direction (halved: S holds 2h), then c (Pi and Pf on the diagonals of i's and f's columns)."""
    directions, hidden = len(stack.backwards), stack.hidden
    peepholes = np.zeros((directions, hidden, 4, directions, hidden), stack.dtype)
    units = np.arange(hidden)
    for d in range(directions):
        peepholes[d, units, 0, d, units] = stack.peepholes[0, d, 0]
        peepholes[d, units, 1, d, units] = stack.peepholes[1, d, 0]
    return np.concatenate([block_diagonal(stack.r_t * 0.5, hidden), peepholes.reshape(directions * hidden, -1)])


def lstm_peepholes_row_loop(stack: Stack) -> tuple:
    """Gates i, f, c~, o as :func:`lite.ops._rnn_default_cells._peephole_lstm_weights` orders
    and halves them; see the module docstring."""
    directions, hidden, dtype = len(stack.backwards), stack.hidden, stack.dtype
    projected = stack.project()  # (seq, 4, D, 1, H)
    seq_length = len(projected)
    S = np.empty((seq_length + 1, 3, directions, 1, hidden), dtype)
    np.multiply(stack.state(0), 2, out=S[0, 0])
    S[0, 1] = stack.state(1)
    weights = _peephole_rows_weights(stack)
    _peephole_steps(S, projected, weights, stack.peepholes[2])
    Y = np.multiply(S[1:, 0], 0.5)
    return stack.finish(in_time_order(Y, stack.backwards), [S[-1, 0] * 0.5, S[-1, 1].copy()])


def lstm_peepholes_chain_loop(layers: list[Layer]) -> list[tuple]:
    """Forward LSTM layers with peepholes, each reading the one before (its Y as X), batch 1:
    one loop of :func:`lstm_peepholes_row_loop`'s calls over all of them, in a wavefront.

    Iteration s runs layer k's step s - k, whose input is layer k - 1's output of the iteration
    before: ``M`` holds W of layer k (halved, as S holds 2h) on layer k - 1's h rows beside R on
    its own, and the projection of layers past the first is their bias alone. K layers of T
    steps take T + K - 1 iterations instead of K * T. A layer not started yet has its initial
    state put back after each of the first iterations; one finished computes steps no one reads.
    ``layers[k].inputs.X`` past the first is a stand-in giving the shape. Each layer's outputs.
    """
    count, hidden, dtype = len(layers), layers[0].inputs.hidden, layers[0].inputs.dtype
    seq_length = layers[0].inputs.X.shape[0]
    first = Stack(layers[:1])
    projected = np.zeros((seq_length + count - 1, 4, count, 1, hidden), dtype)
    projected[:seq_length, :, :1] = first.project()
    for k, layer in enumerate(layers[1:], 1):
        projected[:, :, k] = layer.weights.bias[0].reshape(4, 1, hidden)
    S = np.empty((seq_length + count, 3, count, 1, hidden), dtype)
    for k, layer in enumerate(layers):
        np.multiply(layer.inputs.state(0), 2, out=S[0, 0, k : k + 1])
        S[0, 1, k : k + 1] = layer.inputs.state(1)
    weights = _chain_weights(layers)
    peepholes_o = np.concatenate([layer.weights.peepholes[2] for layer in layers])
    _peephole_steps(S, projected, weights, peepholes_o, warm_up=count - 1)
    outputs = []
    for k, layer in enumerate(layers):
        Y = np.multiply(S[k + 1 : k + 1 + seq_length, 0, k : k + 1], 0.5)
        last = S[seq_length + k]
        outputs.append(layer.inputs.finish(Y, [last[0, k : k + 1] * 0.5, last[1, k : k + 1].copy()]))
    return outputs


def _chain_weights(layers: list[Layer]) -> np.ndarray:
    """``M`` ``(2 * K * H, 4 * K * H)`` of :func:`lstm_peepholes_chain_loop`: layer k's h rows
    feed its own columns (R) and layer k + 1's (W), both halved; c rows its peepholes."""
    count, hidden = len(layers), layers[0].inputs.hidden
    weights = np.zeros((2, count, hidden, 4, count, hidden), layers[0].inputs.dtype)
    units = np.arange(hidden)
    for k, layer in enumerate(layers):
        weights[0, k, :, :, k, :] = (layer.weights.r_t[0] * 0.5).reshape(hidden, 4, hidden)
        if k + 1 < count:
            weights[0, k, :, :, k + 1, :] = (layers[k + 1].weights.w_t * 0.5).reshape(hidden, 4, hidden)
        weights[1, k, units, 0, k, units] = layer.weights.peepholes[0, 0, 0]
        weights[1, k, units, 1, k, units] = layer.weights.peepholes[1, 0, 0]
    return weights.reshape(2 * count * hidden, 4 * count * hidden)


def _peephole_steps(S: np.ndarray, projected: np.ndarray, weights: np.ndarray, peepholes_o: np.ndarray,
                    warm_up: int = 0) -> None:
    """The steps of the peephole loops: S[t + 1] from S[t] and projected[t] (see the module
    docstring). After each of the first ``warm_up`` iterations s, the layers past s get their
    initial states back (:func:`lstm_peepholes_chain_loop`)."""
    columns, hidden = weights.shape[1], S.shape[-1]
    width = columns // 4 // hidden
    dtype = S.dtype
    states = S.reshape(len(S), 1, 3 * width * hidden)[:, :, : 2 * width * hidden]
    z = np.empty((4, width, 1, hidden), dtype)
    z_row = z.reshape(1, columns)
    input_forget, before_output = z[:2], z[:3]
    i, f, candidate, o = z
    half = np.full_like(input_forget, 0.5)
    one = np.ones_like(o)
    pair = np.empty((2, width, 1, hidden), dtype)  # tanh(Ct), tanh(x/2) of o
    tanh_c, tanh_o = pair
    product = np.empty_like(o)
    for s, (state, c, new, projected_t) in enumerate(zip(states, S[:-1, 1], S[1:], projected)):
        np.dot(state, weights, out=z_row)
        np.add(z, projected_t, out=z)
        np.tanh(before_output, out=before_output)  # tanh(x/2) for i, f (halved rows), tanh(x) for c~
        np.multiply(input_forget, half, out=input_forget)
        np.add(input_forget, half, out=input_forget)
        c_new = new[1]
        np.multiply(f, c, out=c_new)
        np.multiply(i, candidate, out=product)
        np.add(c_new, product, out=c_new)
        np.multiply(peepholes_o, c_new, out=product)
        np.add(o, product, out=new[2])
        np.tanh(new[1:], out=pair)
        np.add(tanh_o, one, out=tanh_o)
        np.multiply(tanh_c, tanh_o, out=new[0])  # 2h
        if s < warm_up:
            new[:2, s + 1 :] = S[0, :2, s + 1 :]
