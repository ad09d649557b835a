"""LSTM with peepholes for one batch entry and full sequences: madmom's layers, in fewer calls.

The loop of :func:`lite.ops._rnn_default_cells._lstm_peepholes_loop` makes sixteen elementwise
calls and a stacked matmul per step; with batch 1 and no ``sequence_lens`` this one makes a
2-D product and twelve calls, the same arithmetic up to the order of a few float32 sums:

- the states live in one buffer, ``S[t] = [h, c, o's input]`` of step t (every direction's h,
  then every c), so ``S[t][h, c] @ M`` is the recurrence of every direction *and* the peepholes
  of i and f on Ct-1 (``M``: R's columns of each direction on its own rows, block-diagonal, and
  Pi, Pf as diagonals under them), written gate-major ``(i, f, c~, o)`` as the step reads it;
- o's input is written next to Ct, so one tanh covers both (tanh(Ct) and tanh(x/2) for o);
- S holds 2h, not h: o = (1 + tanh(x/2)) / 2, so 2h = (1 + tanh(x/2)) * tanh(Ct) is two calls
  instead of three, and M's rows for h are halved. Scaling by 2 is exact in binary floating
  point, so h (and the recurrence) are the values of the loop that halves o, bit for bit.

``M`` has every direction's rows for every direction's columns (zeros off the diagonal blocks)
and two rows per hidden unit: up to :data:`_MAX_ROWS_WEIGHTS_BYTES` the product's extra reads
cost less than the calls they save; larger layers take the general loop.
"""

from __future__ import annotations

import numpy as np

from lite.ops._rnn_stack import Stack, in_time_order

# Above this the block-diagonal weights' zeros cost a product more time than the loop saves.
_MAX_ROWS_WEIGHTS_BYTES = 256 * 1024


def fits_rows_loop(stack: Stack) -> bool:
    """Whether :func:`lstm_peepholes_row_loop` runs ``stack``: batch 1, every sequence full,
    weights of at most :data:`_MAX_ROWS_WEIGHTS_BYTES` laid out as ``M``."""
    if stack.batch != 1 or stack.seq_length == 0 or stack.masks() is not None:
        return False
    width = len(stack.backwards) * stack.hidden
    return 2 * width * 4 * width * np.dtype(stack.dtype).itemsize <= _MAX_ROWS_WEIGHTS_BYTES


def _rows_weights(stack: Stack) -> np.ndarray:
    """``M`` ``(2 * D * H, 4 * D * H)``: rows h of every direction (halved: S holds 2h), then c;
    columns gate-major ``(gate, direction, H)``."""
    directions, hidden = len(stack.backwards), stack.hidden
    weights = np.zeros((2, directions, hidden, 4, directions, hidden), stack.dtype)
    rows = np.arange(hidden)
    for d in range(directions):
        weights[0, d, :, :, d, :] = (stack.r_t[d] * 0.5).reshape(hidden, 4, hidden)
        weights[1, d, rows, 0, d, rows] = stack.peepholes[0, d, 0]
        weights[1, d, rows, 1, d, rows] = stack.peepholes[1, d, 0]
    return weights.reshape(2 * directions * hidden, 4 * directions * hidden)


def lstm_peepholes_row_loop(stack: Stack) -> tuple:
    """Gates i, f, c~, o as :func:`lite.ops._rnn_default_cells._peephole_lstm_weights` orders
    and halves them; see the module docstring."""
    directions, hidden, dtype = len(stack.backwards), stack.hidden, stack.dtype
    projected = stack.project()  # (seq, 4, D, 1, H)
    seq_length = len(projected)
    S = np.empty((seq_length + 1, 3, directions, 1, hidden), dtype)
    np.multiply(stack.state(0), 2, out=S[0, 0])
    S[0, 1] = stack.state(1)
    weights = _rows_weights(stack)
    states = S.reshape(seq_length + 1, 1, 3 * directions * hidden)[:, :, : 2 * directions * hidden]
    z = np.empty((4, directions, 1, hidden), dtype)
    z_row = z.reshape(1, 4 * directions * hidden)
    input_forget, before_output = z[:2], z[:3]
    i, f, candidate, o = z
    half = np.full_like(input_forget, 0.5)
    one = np.ones_like(o)
    peepholes_o = stack.peepholes[2]
    pair = np.empty((2, directions, 1, hidden), dtype)  # tanh(Ct), tanh(x/2) of o
    tanh_c, tanh_o = pair
    product = np.empty_like(o)
    for state, c, new, projected_t in zip(states, S[:-1, 1], S[1:], projected):
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
    Y = np.multiply(S[1:, 0], 0.5)
    return stack.finish(in_time_order(Y, stack.backwards), [S[-1, 0] * 0.5, S[-1, 1].copy()])
