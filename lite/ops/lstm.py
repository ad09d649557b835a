"""LSTM: long short-term memory layer, gates in ONNX order i, o, f, c.

https://onnx.ai/onnx/operators/onnx__LSTM.html

    i = f(Xt Wi + Ht-1 Ri + Pi * Ct-1 + Wbi + Rbi)     c~ = g(Xt Wc + Ht-1 Rc + Wbc + Rbc)
    f = f(Xt Wf + Ht-1 Rf + Pf * Ct-1 + Wbf + Rbf)     Ct = f * Ct-1 + i * c~
    o = f(Xt Wo + Ht-1 Ro + Po * Ct + Wbo + Rbo)       Ht = o * h(Ct)

``input_forget`` couples f = 1 - i; ``clip`` bounds every gate's input. Outputs Y, Y_h, Y_c.
"""

from __future__ import annotations

import numpy as np

from lite.ops._rnn_common import (
    activation_functions,
    clipper,
    compute_dtype,
    direction_count,
    run_directions,
    time_major,
)
from lite.ops._rnn_default_cells import is_default_cell, lstm_weights, run_lstm, usable
from lite.ops.registry import kernel


def lstm(
    X, W, R, B, sequence_lens, initial_h, initial_c, P, *,
    activation_alpha, activation_beta, activations, clip, direction, hidden_size, input_forget, layout, prepared,
):
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    inputs = time_major("LSTM", X, sequence_lens, [initial_h, initial_c], direction, layout, hidden)
    if _is_default(activations, len(inputs.backwards), clip, input_forget):
        if usable(prepared, B, inputs.dtype, P):
            return run_lstm(inputs, prepared)
        return run_lstm(inputs, lstm_weights(W, R, B, hidden, inputs.dtype, P))
    functions = activation_functions(
        "LSTM", activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"), len(inputs.backwards)
    )
    bound = clipper(clip)

    def factory(d):
        dtype = inputs.dtype
        w = np.asarray(W[d], dtype=dtype)
        r_t = np.asarray(R[d], dtype=dtype).T
        bias = summed_bias(B, d, hidden, dtype)

        def project(x):
            return np.matmul(x, w.T) + bias

        step = lstm_step(hidden, functions[d], bound, direction_peepholes(P, d, hidden, dtype), input_forget,
                         lambda h: h @ r_t)
        return step, project

    return run_directions("LSTM", inputs, 2, factory)


def summed_bias(B, direction: int, hidden: int, dtype) -> np.ndarray:
    """Wb + Rb of one direction (zeros where B is omitted): both are added to every step's gates."""
    if B is None:
        return np.zeros(4 * hidden, dtype)
    bias = np.asarray(B[direction], dtype=dtype)
    return bias[: 4 * hidden] + bias[4 * hidden :]


def direction_peepholes(P, direction: int, hidden: int, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pi, Po, Pf of one direction (zeros where P is omitted)."""
    peep = np.zeros(3 * hidden, dtype) if P is None else np.asarray(P[direction], dtype=dtype)
    return peep[:hidden], peep[hidden : 2 * hidden], peep[2 * hidden :]


def lstm_step(hidden: int, functions, bound, peepholes, input_forget, recur):
    """One direction's step of the general cell (any activations, clip, peepholes, coupled gates),
    for :func:`lite.ops._rnn_common.run_directions`: ``step(x_t, [h, c]) -> (h, [h, c])`` where
    ``x_t`` is the step's input projection with the biases and ``recur(h)`` gives ``Ht-1 R^T``
    (a float product here; ONNX Runtime's integer one in DynamicQuantizeLSTM)."""
    gate, cell_act, out_act = functions
    p_i, p_o, p_f = peepholes

    def step(x_t, states):
        h, c = states
        z = x_t + recur(h)
        zi, zo, zf, zc = (z[:, k * hidden : (k + 1) * hidden] for k in range(4))
        i = gate(bound(zi + p_i * c))
        f = 1 - i if input_forget else gate(bound(zf + p_f * c))
        c_new = f * c + i * cell_act(bound(zc))
        o = gate(bound(zo + p_o * c_new))
        h_new = o * out_act(c_new)
        return h_new, [h_new, c_new]

    return step


def _is_default(activations, directions: int, clip, input_forget) -> bool:
    """The cell of :func:`run_lstm`: default activations, no clip, no coupling (peepholes or not)."""
    return is_default_cell("LSTM", activations, directions, clip) and not input_forget


def prepare_lstm(constants, shapes, *, direction="forward", hidden_size=None, activations=None, clip=None,
                 input_forget=0, **_):
    """Load-time work (the registry's ``prepare`` hook): constant weights (and peepholes) of a
    default cell laid out for :func:`run_lstm`, for the dtype they come in; None where that cannot
    be done now."""
    _, W, R, B, _, _, _, P = (list(constants) + [None] * 8)[:8]
    if W is None or R is None:
        return None
    if not _is_default(activations, direction_count("LSTM", direction), clip, input_forget):
        return None
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    return lstm_weights(W, R, B, hidden, compute_dtype(W.dtype), P)


@kernel("LSTM", since=1, prepare=prepare_lstm)
def LSTM_1(
    X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0, output_sequence=0, prepared=None,
):
    return lstm(
        X, W, R, B, sequence_lens, initial_h, initial_c, P,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, input_forget=input_forget, layout=0,
        prepared=prepared,
    )


@kernel("LSTM", since=7, prepare=prepare_lstm)
def LSTM_7(
    X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0, prepared=None,
):
    return lstm(
        X, W, R, B, sequence_lens, initial_h, initial_c, P,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, input_forget=input_forget, layout=0,
        prepared=prepared,
    )


@kernel("LSTM", since=14, prepare=prepare_lstm)
def LSTM(
    X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0, layout=0, prepared=None,
):
    return lstm(
        X, W, R, B, sequence_lens, initial_h, initial_c, P,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, input_forget=input_forget, layout=layout,
        prepared=prepared,
    )
