"""RNN: simple recurrent layer, Ht = f(Xt Wi + Ht-1 Ri + Wbi + Rbi).

https://onnx.ai/onnx/operators/onnx__RNN.html

Outputs Y, Y_h.
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
from lite.ops._rnn_default_cells import is_default_cell, rnn_weights, run_rnn, usable
from lite.ops.registry import kernel


def rnn(
    X, W, R, B, sequence_lens, initial_h, *,
    activation_alpha, activation_beta, activations, clip, direction, hidden_size, layout, prepared,
):
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    inputs = time_major("RNN", X, sequence_lens, [initial_h], direction, layout, hidden)
    if is_default_cell("RNN", activations, len(inputs.backwards), clip):
        weights = prepared if usable(prepared, B, inputs.dtype) else rnn_weights(W, R, B, hidden, inputs.dtype)
        return run_rnn(inputs, weights)
    functions = activation_functions(
        "RNN", activations, activation_alpha, activation_beta, ("Tanh",), len(inputs.backwards)
    )
    bound = clipper(clip)

    def factory(d):
        dtype = inputs.dtype
        w = np.asarray(W[d], dtype=dtype)
        r_t = np.asarray(R[d], dtype=dtype).T
        bias = np.zeros(2 * hidden, dtype) if B is None else np.asarray(B[d], dtype=dtype)
        (activation,) = functions[d]

        def project(x):
            return np.matmul(x, w.T) + bias[:hidden] + bias[hidden:]

        def step(x_t, states):
            (h,) = states
            h_new = activation(bound(x_t + h @ r_t))
            return h_new, [h_new]

        return step, project

    return run_directions("RNN", inputs, 1, factory)


def prepare_rnn(constants, shapes, *, direction="forward", hidden_size=None, activations=None, clip=None, **_):
    """Load-time work (the registry's ``prepare`` hook): constant weights of a default cell laid
    out for :func:`run_rnn`, for the dtype they come in; None where that cannot be done now."""
    _, W, R, B = (list(constants) + [None] * 4)[:4]
    if W is None or R is None or not is_default_cell("RNN", activations, direction_count("RNN", direction), clip):
        return None
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    return rnn_weights(W, R, B, hidden, compute_dtype(W.dtype))


@kernel("RNN", since=1, prepare=prepare_rnn)
def RNN_1(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, output_sequence=0, prepared=None,
):
    return rnn(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=0, prepared=prepared,
    )


@kernel("RNN", since=7, prepare=prepare_rnn)
def RNN_7(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, prepared=None,
):
    return rnn(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=0, prepared=prepared,
    )


@kernel("RNN", since=14, prepare=prepare_rnn)
def RNN(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, layout=0, prepared=None,
):
    return rnn(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=layout, prepared=prepared,
    )
