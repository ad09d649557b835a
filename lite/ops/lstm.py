"""LSTM: long short-term memory layer, gates in ONNX order i, o, f, c.

https://onnx.ai/onnx/operators/onnx__LSTM.html

    i = f(Xt Wi + Ht-1 Ri + Pi * Ct-1 + Wbi + Rbi)     c~ = g(Xt Wc + Ht-1 Rc + Wbc + Rbc)
    f = f(Xt Wf + Ht-1 Rf + Pf * Ct-1 + Wbf + Rbf)     Ct = f * Ct-1 + i * c~
    o = f(Xt Wo + Ht-1 Ro + Po * Ct + Wbo + Rbo)       Ht = o * h(Ct)

``input_forget`` couples f = 1 - i; ``clip`` bounds every gate's input. Outputs Y, Y_h, Y_c.
"""

from __future__ import annotations

import numpy as np

from lite.ops._rnn_common import activation_functions, clipper, direction_count, run_directions
from lite.ops.registry import kernel


def lstm(
    X, W, R, B, sequence_lens, initial_h, initial_c, P, *,
    activation_alpha, activation_beta, activations, clip, direction, hidden_size, input_forget, layout,
):
    directions = direction_count("LSTM", direction)
    hidden = int(hidden_size) if hidden_size else R.shape[-1]
    functions = activation_functions(
        "LSTM", activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"), directions
    )
    bound = clipper(clip)

    def factory(d):
        dtype = np.float64 if np.asarray(X).dtype == np.float64 else np.float32
        w = np.asarray(W[d], dtype=dtype)
        r_t = np.asarray(R[d], dtype=dtype).T
        bias = np.zeros(8 * hidden, dtype) if B is None else np.asarray(B[d], dtype=dtype)
        bias = bias[: 4 * hidden] + bias[4 * hidden :]
        peep = np.zeros(3 * hidden, dtype) if P is None else np.asarray(P[d], dtype=dtype)
        p_i, p_o, p_f = peep[:hidden], peep[hidden : 2 * hidden], peep[2 * hidden :]
        gate, cell_act, out_act = functions[d]

        def project(x):
            return np.matmul(x, w.T) + bias

        def standard_step(x_t, states):
            # The default cell (sigmoid gates, tanh, no peepholes, clip or coupling), in a dozen
            # array calls instead of about thirty: the gates i, o, f are contiguous in ONNX's
            # order, so one tanh-based sigmoid covers all three in place.
            h, c = states
            z = h @ r_t
            z += x_t
            gates = z[:, : 3 * hidden]
            gates *= 0.5
            np.tanh(gates, out=gates)
            gates *= 0.5
            gates += 0.5
            i, o, f = gates[:, :hidden], gates[:, hidden : 2 * hidden], gates[:, 2 * hidden :]
            c_new = f * c
            c_new += i * np.tanh(z[:, 3 * hidden :])
            h_new = o * np.tanh(c_new)
            return h_new, [h_new, c_new]

        def step(x_t, states):
            h, c = states
            z = x_t + h @ r_t
            zi, zo, zf, zc = (z[:, k * hidden : (k + 1) * hidden] for k in range(4))
            i = gate(bound(zi + p_i * c))
            f = 1 - i if input_forget else gate(bound(zf + p_f * c))
            c_new = f * c + i * cell_act(bound(zc))
            o = gate(bound(zo + p_o * c_new))
            h_new = o * out_act(c_new)
            return h_new, [h_new, c_new]

        return (standard_step if standard else step), project

    standard = P is None and clip is None and not input_forget and _default_activations(activations, directions)
    return run_directions(
        "LSTM", X, sequence_lens, [initial_h, initial_c], direction, layout, hidden, 2, factory
    )


def _default_activations(activations, directions: int) -> bool:
    if activations is None:
        return True
    names = [name.decode() if isinstance(name, bytes) else str(name) for name in activations]
    return [name.lower() for name in names] == ["sigmoid", "tanh", "tanh"] * directions


@kernel("LSTM", since=1)
def LSTM_1(
    X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0, output_sequence=0,
):
    return lstm(
        X, W, R, B, sequence_lens, initial_h, initial_c, P,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, input_forget=input_forget, layout=0,
    )


@kernel("LSTM", since=7)
def LSTM_7(
    X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0,
):
    return lstm(
        X, W, R, B, sequence_lens, initial_h, initial_c, P,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, input_forget=input_forget, layout=0,
    )


@kernel("LSTM", since=14)
def LSTM(
    X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0, layout=0,
):
    return lstm(
        X, W, R, B, sequence_lens, initial_h, initial_c, P,
        activation_alpha=activation_alpha, activation_beta=activation_beta, activations=activations,
        clip=clip, direction=direction, hidden_size=hidden_size, input_forget=input_forget, layout=layout,
    )
