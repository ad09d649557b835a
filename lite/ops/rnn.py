"""RNN: simple recurrent layer, Ht = f(Xt Wi + Ht-1 Ri + Wbi + Rbi).

https://onnx.ai/onnx/operators/onnx__RNN.html

Outputs Y, Y_h.
"""

from __future__ import annotations

import numpy as np

from lite.ops._rnn_common import activation_functions, clipper, direction_count, run_directions
from lite.ops.registry import kernel


def rnn(
    X, W, R, B, sequence_lens, initial_h, *,
    activation_alpha, activation_beta, activations, clip, direction, hidden_size, layout,
):
    directions = direction_count("RNN", direction)
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    functions = activation_functions("RNN", activations, activation_alpha, activation_beta, ("Tanh",), directions)
    bound = clipper(clip)

    def factory(d):
        dtype = np.float64 if np.asarray(X).dtype == np.float64 else np.float32
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

    return run_directions("RNN", X, sequence_lens, [initial_h], direction, layout, hidden, 1, factory)


@kernel("RNN", since=1)
def RNN_1(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, output_sequence=0,
):
    return rnn(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=0,
    )


@kernel("RNN", since=7)
def RNN_7(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None,
):
    return rnn(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=0,
    )


@kernel("RNN", since=14)
def RNN(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, layout=0,
):
    return rnn(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=layout,
    )
