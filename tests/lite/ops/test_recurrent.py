"""LSTM, GRU and RNN against onnx.reference (and ONNX Runtime where the reference lacks a feature)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.lite.ops._reference import check_against_onnxruntime, check_against_reference

rng = np.random.default_rng(21)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": 3, "GRU": 2, "RNN": 2}


def normal(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def inputs(op, *, seq=4, batch=3, size=5, hidden=6, directions=1, layout=0, bias=True,
           lengths=None, initial=False, peepholes=False):
    gates = GATES[op]
    x = normal(batch, seq, size) if layout else normal(seq, batch, size)
    values = [x, normal(directions, gates * hidden, size), normal(directions, gates * hidden, hidden)]
    values.append(normal(directions, 2 * gates * hidden) if bias else None)
    values.append(None if lengths is None else np.array(lengths, dtype=np.int32))
    state_shape = (batch, directions, hidden) if layout else (directions, batch, hidden)
    values.append(normal(*state_shape) if initial else None)
    if op == "LSTM":
        values.append(normal(*state_shape) if initial else None)
        values.append(normal(directions, 3 * hidden) if peepholes else None)
    return values


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("initial", [False, True])
def test_recurrent_directions(op, direction, initial):
    directions = 2 if direction == "bidirectional" else 1
    values = inputs(op, directions=directions, initial=initial)
    attributes = {"hidden_size": 6, "direction": direction}
    check_against_onnxruntime(op, values, attributes, opset=14, output_count=OUTPUTS[op], atol=1e-5)


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
def test_recurrent_against_reference(op):
    values = inputs(op, initial=True, peepholes=True)
    check_against_reference(op, values, {"hidden_size": 6}, opset=14, output_count=OUTPUTS[op])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent_layout_1(op, direction):
    directions = 2 if direction == "bidirectional" else 1
    values = inputs(op, directions=directions, layout=1, initial=True)
    attributes = {"hidden_size": 6, "direction": direction, "layout": 1}
    # ONNX Runtime does not implement layout 1.
    check_against_reference(op, values, attributes, opset=14, output_count=OUTPUTS[op])


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_recurrent_sequence_lens(op, direction):
    directions = 2 if direction == "bidirectional" else 1
    values = inputs(op, directions=directions, lengths=[4, 2, 1], initial=True)
    attributes = {"hidden_size": 6, "direction": direction}
    check_against_onnxruntime(op, values, attributes, opset=14, output_count=OUTPUTS[op])


def test_lstm_peepholes_clip_input_forget():
    values = inputs("LSTM", peepholes=True, initial=True)
    attributes = {"hidden_size": 6, "clip": 0.7, "input_forget": 1}
    check_against_onnxruntime("LSTM", values, attributes, opset=14, output_count=3)


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset(linear_before_reset):
    values = inputs("GRU", initial=True)
    attributes = {"hidden_size": 6, "linear_before_reset": linear_before_reset}
    check_against_reference("GRU", values, attributes, opset=14, output_count=2)


def test_rnn_activations_with_alpha_beta():
    values = inputs("RNN", directions=2)
    attributes = {
        "hidden_size": 6,
        "direction": "bidirectional",
        "activations": ["LeakyRelu", "HardSigmoid"],
        "activation_alpha": [0.2, 0.3],
        "activation_beta": [0.4],
    }
    check_against_onnxruntime("RNN", values, attributes, opset=14, output_count=2)


def test_lstm_custom_activations_and_old_opset():
    values = inputs("LSTM", bias=False)
    attributes = {"hidden_size": 6, "activations": ["HardSigmoid", "Tanh", "Softsign"]}
    check_against_onnxruntime("LSTM", values, attributes, opset=7, output_count=3)


def test_saturated_gates_give_no_overflow_warning():
    """Sigmoid as (1 + tanh(x/2)) / 2: exp(-x) overflowed float32 for x << 0 and warned."""
    import warnings

    from lite.ops.lstm import LSTM

    x, w, r, b, *_ = inputs("LSTM")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, y_h, y_c = LSTM(x * 1e4, w, r, b, hidden_size=6)
    assert np.isfinite(y).all() and np.isfinite(y_c).all()


@pytest.mark.parametrize("op", ["LSTM", "GRU", "RNN"])
@pytest.mark.parametrize("layout", [0, 1])
def test_a_state_of_another_batch_is_named_with_the_shape_it_needs(op, layout):
    from lite.ops.registry import KERNELS

    values = inputs(op, batch=3, layout=layout, initial=True)
    state = (1, 1, 6)  # kept from a stream of batch 1
    values[5] = normal(*state)
    wanted = "(3, 1, 6)" if layout else "(1, 3, 6)"
    message = f"{op}: initial_h has shape (1, 1, 6); with X of batch 3 it must be {wanted}"
    with pytest.raises(ValueError, match=re.escape(message)):
        KERNELS.select(op, "", 22).fn(*values, hidden_size=6, layout=layout)
