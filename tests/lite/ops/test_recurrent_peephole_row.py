"""LSTM with peepholes for one batch entry (lite.ops._rnn_peephole_row): the states in one buffer,
the peepholes of Ct-1 inside the recurrent product, 2h kept; the values of the general loop within
float32 rounding, and ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import _rnn_default_cells as default_cells
from lite.ops import _rnn_peephole_row as peephole_row
from lite.ops._rnn_common import TimeMajor
from lite.ops._rnn_stack import Layer, Stack
from tests.lite.ops._reference import reference_outputs
from tests.lite.ops.test_recurrent import inputs
from tests.lite.ops.test_recurrent_default_cells import (
    DIRECTIONS,
    assert_all_same,
    onnxruntime_outputs,
    prepared_outputs,
)


@pytest.fixture
def loops(monkeypatch):
    """The loops the peephole LSTM took, by name."""
    taken = []
    row_loop, general_loop = default_cells.lstm_peepholes_row_loop, default_cells._lstm_peepholes_loop

    def counted(name, loop):
        return lambda stack: taken.append(name) or loop(stack)

    monkeypatch.setattr(default_cells, "lstm_peepholes_row_loop", counted("row", row_loop))
    monkeypatch.setattr(default_cells, "_lstm_peepholes_loop", counted("general", general_loop))
    return taken


def general_outputs(monkeypatch, values, attributes):
    """The outputs of the general peephole loop (the row loop refused)."""
    with monkeypatch.context() as patch:
        patch.setattr(default_cells, "fits_rows_loop", lambda stack: False)
        return prepared_outputs("LSTM", values, attributes)


@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("initial", [False, True], ids=["zero-states", "initial-states"])
@pytest.mark.parametrize("layout", [0, 1])
def test_one_entry_takes_the_row_loop_and_agrees(monkeypatch, loops, direction, initial, layout):
    values = inputs("LSTM", seq=7, batch=1, directions=DIRECTIONS[direction], layout=layout, initial=initial,
                    peepholes=True)
    attributes = {"hidden_size": 6, "direction": direction, "layout": layout}
    got = prepared_outputs("LSTM", values, attributes)
    assert loops == ["row"]
    assert_all_same(got, general_outputs(monkeypatch, values, attributes), "row loop vs general", rtol=1e-6,
                    atol=1e-6)
    # ONNX Runtime runs no layout 1: onnx.reference does
    expected = (reference_outputs("LSTM", values, attributes, 14, 3) if layout
                else onnxruntime_outputs("LSTM", values, attributes))
    assert_all_same(got, expected, f"LSTM peepholes batch 1 {direction}")


def test_float64_agrees_with_reference(loops):
    values = inputs("LSTM", seq=6, batch=1, directions=2, initial=True, peepholes=True)
    values = [None if v is None else v.astype(np.float64) for v in values]
    attributes = {"hidden_size": 6, "direction": "bidirectional"}
    got = prepared_outputs("LSTM", values, attributes)
    assert loops == ["row"] and got[0].dtype == np.float64
    assert_all_same(got, reference_outputs("LSTM", values, attributes, 14, 3), "row loop float64", rtol=1e-12,
                    atol=1e-12)


@pytest.mark.parametrize(("batch", "lengths", "hidden"), [(2, None, 6), (1, [3], 6), (1, None, 48)],
                         ids=["batch-2", "sequence_lens", "large-hidden"])
def test_other_calls_take_the_general_loop(loops, batch, lengths, hidden):
    values = inputs("LSTM", seq=5, batch=batch, hidden=hidden, directions=2, lengths=lengths, initial=True,
                    peepholes=True)
    attributes = {"hidden_size": hidden, "direction": "bidirectional"}
    got = prepared_outputs("LSTM", values, attributes)
    assert loops == ["general"]
    assert_all_same(got, onnxruntime_outputs("LSTM", values, attributes), "general loop")


def test_the_weights_rows_hold_halved_recurrence_and_diagonal_peepholes():
    values = inputs("LSTM", seq=2, batch=1, hidden=3, directions=2, peepholes=True)
    weights = default_cells.lstm_weights(values[1], values[2], values[3], 3, np.float32, values[7])
    layer_inputs = TimeMajor(values[0], [None, None], None, (False, True), 3, 0, np.dtype(np.float32))
    stack = Stack([Layer(layer_inputs, weights)])
    rows = peephole_row._rows_weights(stack).reshape(2, 2, 3, 4, 2, 3)
    assert not rows[:, 0, :, :, 1].any() and not rows[:, 1, :, :, 0].any()  # block-diagonal
    np.testing.assert_array_equal(rows[0, 1, :, :, 1].reshape(3, 12), weights.r_t[1] * 0.5)
    np.testing.assert_array_equal(np.diagonal(rows[1, 0, :, 0, 0]), weights.peepholes[0, 0, 0])
    assert not rows[1, :, :, 2:].any()  # c~ and o see no Ct-1 in the product
