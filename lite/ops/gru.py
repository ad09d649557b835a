"""GRU: gated recurrent unit layer, gates in ONNX order z, r, h.

https://onnx.ai/onnx/operators/onnx__GRU.html

    z = f(Xt Wz + Ht-1 Rz + Wbz + Rbz)      r = f(Xt Wr + Ht-1 Rr + Wbr + Rbr)
    h~ = g(Xt Wh + (r * Ht-1) Rh + Rbh + Wbh)        linear_before_reset = 0
    h~ = g(Xt Wh + r * (Ht-1 Rh + Rbh) + Wbh)        linear_before_reset = 1
    Ht = (1 - z) * h~ + z * Ht-1

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
from lite.ops._rnn_default_cells import gru_weights, is_default_cell, run_gru, usable
from lite.ops.registry import kernel


def gru(
    X, W, R, B, sequence_lens, initial_h, *,
    activation_alpha, activation_beta, activations, clip, direction, hidden_size, layout, linear_before_reset,
    prepared,
):
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    inputs = time_major("GRU", X, sequence_lens, [initial_h], direction, layout, hidden)
    if is_default_cell("GRU", activations, len(inputs.backwards), clip):
        fits = usable(prepared, B, inputs.dtype) and (prepared.recurrent_bias is not None) == bool(linear_before_reset)
        weights = prepared if fits else gru_weights(W, R, B, hidden, inputs.dtype, linear_before_reset)
        return run_gru(inputs, weights)
    functions = activation_functions(
        "GRU", activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh"), len(inputs.backwards)
    )
    bound = clipper(clip)

    def factory(d):
        dtype = inputs.dtype
        w = np.asarray(W[d], dtype=dtype)
        r = np.asarray(R[d], dtype=dtype)
        bias = np.zeros(6 * hidden, dtype) if B is None else np.asarray(B[d], dtype=dtype)
        w_bias, r_bias = bias[: 3 * hidden], bias[3 * hidden :]
        r_zr_t = r[: 2 * hidden].T
        r_h_t = r[2 * hidden :].T
        gate, candidate = functions[d]

        def project(x):
            projected = np.matmul(x, w.T) + w_bias
            projected[..., : 2 * hidden] += r_bias[: 2 * hidden]
            return projected

        def step(x_t, states):
            (h,) = states
            zr = x_t[:, : 2 * hidden] + h @ r_zr_t
            z = gate(bound(zr[:, :hidden]))
            reset = gate(bound(zr[:, hidden:]))
            if linear_before_reset:
                recurrent = reset * (h @ r_h_t + r_bias[2 * hidden :])
            else:
                recurrent = (reset * h) @ r_h_t + r_bias[2 * hidden :]
            h_tilde = candidate(bound(x_t[:, 2 * hidden :] + recurrent))
            h_new = (1 - z) * h_tilde + z * h
            return h_new, [h_new]

        return step, project

    return run_directions("GRU", inputs, 1, factory)


def prepare_gru(constants, shapes, *, direction="forward", hidden_size=None, activations=None, clip=None,
                linear_before_reset=0, **_):
    """Load-time work (the registry's ``prepare`` hook): constant weights of a default cell laid
    out for :func:`run_gru`, for the dtype they come in; None where that cannot be done now."""
    _, W, R, B = (list(constants) + [None] * 4)[:4]
    if W is None or R is None or not is_default_cell("GRU", activations, direction_count("GRU", direction), clip):
        return None
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    return gru_weights(W, R, B, hidden, compute_dtype(W.dtype), linear_before_reset)


@kernel("GRU", since=1, prepare=prepare_gru)
def GRU_1(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, output_sequence=0, prepared=None,
):
    # GRU-1 had no linear_before_reset attribute; its formula is linear_before_reset = 0.
    return gru(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=0, linear_before_reset=0,
        prepared=prepared,
    )


@kernel("GRU", since=3, prepare=prepare_gru)
def GRU_3(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, linear_before_reset=0, output_sequence=0, prepared=None,
):
    return gru(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=0, linear_before_reset=linear_before_reset,
        prepared=prepared,
    )


@kernel("GRU", since=7, prepare=prepare_gru)
def GRU_7(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, linear_before_reset=0, prepared=None,
):
    return gru(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=0, linear_before_reset=linear_before_reset,
        prepared=prepared,
    )


@kernel("GRU", since=14, prepare=prepare_gru)
def GRU(
    X, W, R, B=None, sequence_lens=None, initial_h=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, layout=0, linear_before_reset=0, prepared=None,
):
    return gru(
        X, W, R, B, sequence_lens, initial_h,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, layout=layout, linear_before_reset=linear_before_reset,
        prepared=prepared,
    )
