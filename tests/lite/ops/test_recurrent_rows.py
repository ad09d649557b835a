"""The loops for one batch entry and full sequences (lite.ops._rnn_rows): RNN, and LSTM with
peepholes (the states in one buffer, the peepholes of Ct-1 inside the recurrent product, 2h
kept); the values of the general loops within float32 rounding, and ONNX Runtime's."""

from __future__ import annotations

import numpy as np
import pytest

from lite.ops import _rnn_default_cells as default_cells
from lite.ops import _rnn_rows as rows_loops
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

# op -> (its row loop, its general loop), by name in lite.ops._rnn_default_cells
LOOPS = {"LSTM": ("lstm_peepholes_row_loop", "_lstm_peepholes_loop"), "RNN": ("rnn_row_loop", "_rnn_loop")}


@pytest.fixture
def loops(monkeypatch):
    """The loops taken, "row" or "general"."""
    taken = []

    def counted(name, loop):
        return lambda stack: taken.append(name) or loop(stack)

    for row_loop, general_loop in LOOPS.values():
        monkeypatch.setattr(default_cells, row_loop, counted("row", getattr(default_cells, row_loop)))
        monkeypatch.setattr(default_cells, general_loop, counted("general", getattr(default_cells, general_loop)))
    return taken


def general_outputs(monkeypatch, op, values, attributes):
    """The outputs of the general loop (the row loops refused)."""
    with monkeypatch.context() as patch:
        patch.setattr(default_cells, "fits_rows_loop", lambda stack, rows_per_unit=1: False)
        return prepared_outputs(op, values, attributes)


def one_entry(op, **options):
    return inputs(op, seq=7, batch=1, peepholes=op == "LSTM", **options)


@pytest.mark.parametrize("op", list(LOOPS))
@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("initial", [False, True], ids=["zero-states", "initial-states"])
@pytest.mark.parametrize("layout", [0, 1])
def test_one_entry_takes_the_row_loop_and_agrees(monkeypatch, loops, op, direction, initial, layout):
    values = one_entry(op, directions=DIRECTIONS[direction], layout=layout, initial=initial)
    attributes = {"hidden_size": 6, "direction": direction, "layout": layout}
    got = prepared_outputs(op, values, attributes)
    assert loops == ["row"]
    assert_all_same(got, general_outputs(monkeypatch, op, values, attributes), "row loop vs general", rtol=1e-6,
                    atol=1e-6)
    # ONNX Runtime runs no layout 1: onnx.reference does
    expected = (reference_outputs(op, values, attributes, 14, len(got)) if layout
                else onnxruntime_outputs(op, values, attributes))
    assert_all_same(got, expected, f"{op} batch 1 {direction}")


@pytest.mark.parametrize("op", list(LOOPS))
def test_float64_agrees_with_reference(loops, op):
    values = [None if v is None else v.astype(np.float64) for v in one_entry(op, directions=2, initial=True)]
    attributes = {"hidden_size": 6, "direction": "bidirectional"}
    got = prepared_outputs(op, values, attributes)
    assert loops == ["row"] and got[0].dtype == np.float64
    assert_all_same(got, reference_outputs(op, values, attributes, 14, len(got)), "row loop float64", rtol=1e-12,
                    atol=1e-12)


@pytest.mark.parametrize("op", list(LOOPS))
@pytest.mark.parametrize(("batch", "lengths", "hidden"), [(2, None, 6), (1, [3], 6), (1, None, 160)],
                         ids=["batch-2", "sequence_lens", "large-hidden"])
def test_other_calls_take_the_general_loop(loops, op, batch, lengths, hidden):
    values = inputs(op, seq=5, batch=batch, hidden=hidden, directions=2, lengths=lengths, initial=True,
                    peepholes=op == "LSTM")
    attributes = {"hidden_size": hidden, "direction": "bidirectional"}
    got = prepared_outputs(op, values, attributes)
    assert loops == ["general"]
    # sums of 2 * 160 products of N(0, 0.25) values: float32 rounding reaches 1e-5 there
    assert_all_same(got, onnxruntime_outputs(op, values, attributes), "general loop", atol=1e-4)


def test_block_diagonal_feeds_each_direction_its_own_gate_major_columns():
    r_t = np.arange(2 * 3 * 6, dtype=np.float32).reshape(2, 3, 6) + 1  # 2 directions, H 3, 2 gates
    weights = rows_loops.block_diagonal(r_t, 3).reshape(2, 3, 2, 2, 3)  # (d, row, gate, d', H)
    assert not weights[0, :, :, 1].any() and not weights[1, :, :, 0].any()
    np.testing.assert_array_equal(weights[1, :, :, 1].reshape(3, 6), r_t[1])


def test_the_peephole_rows_hold_halved_recurrence_and_diagonal_peepholes():
    values = inputs("LSTM", seq=2, batch=1, hidden=3, directions=2, peepholes=True)
    weights = default_cells.lstm_weights(values[1], values[2], values[3], 3, np.float32, values[7])
    layer_inputs = TimeMajor(values[0], [None, None], None, (False, True), 3, 0, np.dtype(np.float32))
    stack = Stack([Layer(layer_inputs, weights)])
    rows = rows_loops._peephole_rows_weights(stack).reshape(2, 2, 3, 4, 2, 3)  # (h|c, d, row, gate, d', H)
    np.testing.assert_array_equal(rows[0, 1, :, :, 1].reshape(3, 12), weights.r_t[1] * 0.5)
    np.testing.assert_array_equal(np.diagonal(rows[1, 0, :, 0, 0]), weights.peepholes[0, 0, 0])
    np.testing.assert_array_equal(np.diagonal(rows[1, 1, :, 1, 1]), weights.peepholes[1, 1, 0])
    assert not rows[1, :, :, 2:].any()  # c~ and o see no Ct-1 in the product
    assert not rows[:, 0, :, :, 1].any() and not rows[:, 1, :, :, 0].any()  # block-diagonal


def test_chains_of_madmom_size_fit_the_chain_loop_and_larger_ones_do_not():
    assert rows_loops.fits_chain_loop(3, 25, np.float32)  # madmom's beat tracker: 3 layers of 25
    assert not rows_loops.fits_chain_loop(3, 64, np.float32)
