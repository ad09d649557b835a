"""LSTM, GRU and RNN default cells: every direction in one time loop, weights prepared at load.

Checked against ONNX Runtime (sequence_lens; onnx.reference ignores them) and onnx.reference
(layout 1, float64), with the weights prepared as the engine prepares constant ones.
"""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.errors import ModelFormatError
from lite.format import GraphBuilder, load, to_bytes
from lite.ops import _rnn_default_cells as default_cells
from lite.ops import lstm as lstm_module
from lite.ops.registry import KERNELS
from tests.lite.ops._reference import assert_same, one_node_model, reference_outputs
from tests.lite.ops.test_recurrent import OUTPUTS, inputs, normal

CELLS = [("LSTM", {}), ("GRU", {"linear_before_reset": 0}), ("GRU", {"linear_before_reset": 1}), ("RNN", {})]
CELL_IDS = ["LSTM", "GRU", "GRU-linear-before-reset", "RNN"]
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def prepared_outputs(op, values, attributes, *, constant=(1, 2, 3, 7)):
    """The kernel's outputs with its weights prepared as the engine does for constant inputs
    (``constant``: the input positions known at load)."""
    chosen = KERNELS.select(op, "", 14)
    constants = [value if index in constant else None for index, value in enumerate(values)]
    shapes = [None if value is None else value.shape for value in values]
    prepared = chosen.prepare(constants, shapes, **attributes)
    assert prepared is not None, f"{op} {attributes}: the default cell's weights were not prepared"
    return list(chosen.fn(*values, prepared=prepared, **attributes))


def onnxruntime_outputs(op, values, attributes):
    import onnxruntime

    model = one_node_model(op, values, attributes, 14, OUTPUTS[op])
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {f"in{i}": value for i, value in enumerate(values) if value is not None})


def assert_all_same(actual, expected, what, rtol=1e-4, atol=1e-5):
    assert len(actual) == len(expected)
    for index, (got, want) in enumerate(zip(actual, expected)):
        assert_same(got, want, rtol, atol, f"{what} output {index}")


@pytest.mark.parametrize(("op", "extra"), CELLS, ids=CELL_IDS)
@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("lengths", [None, [5, 2, 1]], ids=["full", "sequence_lens"])
def test_prepared_cells_agree_with_onnxruntime(op, extra, direction, lengths):
    values = inputs(op, seq=5, directions=DIRECTIONS[direction], lengths=lengths, initial=True)
    attributes = {"hidden_size": 6, "direction": direction, **extra}
    got = prepared_outputs(op, values, attributes)
    assert_all_same(got, onnxruntime_outputs(op, values, attributes), f"{op} {attributes}")


@pytest.mark.parametrize(("op", "extra"), CELLS, ids=CELL_IDS)
def test_bidirectional_layout_1_with_sequence_lens_is_layout_0_transposed(op, extra):
    """ONNX Runtime lacks layout 1 and onnx.reference sequence_lens: layout 1 is checked against
    layout 0, which is checked against ONNX Runtime above."""
    values = inputs(op, seq=5, batch=3, directions=2, lengths=[3, 5, 1], initial=True)
    attributes = {"hidden_size": 6, "direction": "bidirectional", **extra}
    time_major = prepared_outputs(op, values, attributes)
    swapped = (0, 5, 6) if op == "LSTM" else (0, 5)  # X and the states
    batch_major = [np.swapaxes(v, 0, 1) if index in swapped else v for index, v in enumerate(values)]
    got = prepared_outputs(op, batch_major, {**attributes, "layout": 1})
    expected = [np.transpose(time_major[0], (2, 0, 1, 3))] + [np.swapaxes(s, 0, 1) for s in time_major[1:]]
    assert_all_same(got, expected, f"{op} layout 1", rtol=0, atol=0)


@pytest.mark.parametrize(("op", "extra"), CELLS, ids=CELL_IDS)
def test_float64_runs_in_float64(op, extra):
    values = [None if v is None else v.astype(np.float64) for v in inputs(op, directions=2, initial=True)]
    attributes = {"hidden_size": 6, "direction": "bidirectional", **extra}
    got = prepared_outputs(op, values, attributes)
    expected = reference_outputs(op, values, attributes, 14, OUTPUTS[op])
    assert_all_same(got, expected, f"{op} float64", rtol=1e-12, atol=1e-12)


def test_float16_is_computed_in_float32_and_returned_in_float16():
    values = [None if v is None else v.astype(np.float16) for v in inputs("LSTM", directions=2, initial=True)]
    attributes = {"hidden_size": 6, "direction": "bidirectional"}
    got = prepared_outputs("LSTM", values, attributes)
    expected = reference_outputs("LSTM", values, attributes, 14, 3)
    assert_all_same(got, expected, "LSTM float16", rtol=1e-2, atol=2e-3)


@pytest.mark.parametrize(("op", "extra"), CELLS, ids=CELL_IDS)
def test_a_bias_computed_at_run_time_is_not_taken_for_absent(op, extra):
    """The engine passes None for a B it cannot know at load: weights prepared without a bias
    must not serve a call that has one."""
    values = inputs(op, directions=2, initial=True)
    attributes = {"hidden_size": 6, "direction": "bidirectional", **extra}
    got = prepared_outputs(op, values, attributes, constant=(1, 2))
    assert_all_same(got, onnxruntime_outputs(op, values, attributes), f"{op} run-time bias")


@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("lengths", [None, [5, 2, 1]], ids=["full", "sequence_lens"])
def test_peephole_lstm_agrees_with_onnxruntime(direction, lengths):
    values = inputs("LSTM", seq=5, directions=DIRECTIONS[direction], lengths=lengths, initial=True, peepholes=True)
    attributes = {"hidden_size": 6, "direction": direction}
    got = prepared_outputs("LSTM", values, attributes)
    assert_all_same(got, onnxruntime_outputs("LSTM", values, attributes), f"LSTM peepholes {direction}")


@pytest.mark.parametrize("direction", list(DIRECTIONS))
def test_peephole_lstm_float64_agrees_with_reference(direction):
    values = inputs("LSTM", directions=DIRECTIONS[direction], initial=True, peepholes=True)
    values = [None if v is None else v.astype(np.float64) for v in values]
    attributes = {"hidden_size": 6, "direction": direction}
    got = prepared_outputs("LSTM", values, attributes)
    expected = reference_outputs("LSTM", values, attributes, 14, 3)
    assert_all_same(got, expected, f"LSTM peepholes float64 {direction}", rtol=1e-12, atol=1e-12)


def test_peephole_lstm_layout_1_is_layout_0_transposed():
    values = inputs("LSTM", seq=5, batch=3, directions=2, lengths=[3, 5, 1], initial=True, peepholes=True)
    attributes = {"hidden_size": 6, "direction": "bidirectional"}
    time_major = prepared_outputs("LSTM", values, attributes)
    batch_major = [np.swapaxes(v, 0, 1) if index in (0, 5, 6) else v for index, v in enumerate(values)]
    got = prepared_outputs("LSTM", batch_major, {**attributes, "layout": 1})
    expected = [np.transpose(time_major[0], (2, 0, 1, 3))] + [np.swapaxes(s, 0, 1) for s in time_major[1:]]
    assert_all_same(got, expected, "LSTM peepholes layout 1", rtol=0, atol=0)


def test_peepholes_computed_at_run_time_are_not_taken_for_absent():
    """The engine passes None for a P it cannot know at load: weights prepared without
    peepholes must not serve a call that has them."""
    values = inputs("LSTM", directions=2, initial=True, peepholes=True)
    attributes = {"hidden_size": 6, "direction": "bidirectional"}
    got = prepared_outputs("LSTM", values, attributes, constant=(1, 2, 3))
    assert_all_same(got, onnxruntime_outputs("LSTM", values, attributes), "LSTM run-time peepholes")


def test_peepholes_of_the_wrong_shape_are_named():
    values = inputs("LSTM", directions=2, peepholes=True)
    values[7] = values[7][:, :12]
    with pytest.raises(ModelFormatError, match=r"P \(peepholes\) has shape \(2, 12\).* must be \(2, 18\)"):
        unprepared_outputs("LSTM", values, {"hidden_size": 6, "direction": "bidirectional"})


def unprepared_outputs(op, values, attributes):
    """The kernel's outputs with nothing prepared (weights computed at run time)."""
    return list(KERNELS.select(op, "", 14).fn(*values, **attributes))


@pytest.mark.parametrize("run", [prepared_outputs, unprepared_outputs], ids=["prepared", "at-run-time"])
def test_peepholes_take_the_default_cells_loop_and_zero_ones_its_plain_loop(monkeypatch, run):
    """Non-zero peepholes run in the stacked loop with peepholes, all-zero ones (as some exporters
    write) in the loop without; neither in the per-direction loop of other cells."""
    def refuse(*args, **kwargs):
        raise AssertionError("LSTM took the per-direction loop")

    loops = []
    with_peepholes = default_cells._lstm_peepholes_loop

    def counted(*args):
        loops.append("peepholes")
        return with_peepholes(*args)

    monkeypatch.setattr(lstm_module, "run_directions", refuse)
    monkeypatch.setattr(default_cells, "_lstm_peepholes_loop", counted)
    values = inputs("LSTM", directions=2, initial=True, peepholes=True)
    attributes = {"hidden_size": 6, "direction": "bidirectional"}
    for peepholes in (values[7], np.zeros_like(values[7])):
        values[7] = peepholes
        got = run("LSTM", values, attributes)
        assert_all_same(got, reference_outputs("LSTM", values, attributes, 14, 3), "LSTM peepholes")
    assert loops == ["peepholes"]


@pytest.mark.parametrize(("op", "attributes"), [
    ("LSTM", {"clip": 0.5}),
    ("LSTM", {"input_forget": 1}),
    ("LSTM", {"activations": ["HardSigmoid", "Tanh", "Tanh"]}),
    ("GRU", {"clip": 0.5}),
    ("RNN", {"activations": ["Relu"]}),
])
def test_other_cells_are_not_prepared(op, attributes):
    values = inputs(op)
    constants = [None, *values[1:4]]
    assert KERNELS.select(op, "", 14).prepare(constants, [None] * 4, hidden_size=6, **attributes) is None


def test_the_engine_prepares_constant_recurrent_weights():
    values = inputs("GRU", seq=7, batch=2, directions=2, initial=True)
    builder = GraphBuilder("gru", opset=14)
    x = builder.input("x", np.float32, [7, 2, 5])
    h = builder.input("h", np.float32, [2, 2, 6])
    w, r, b = (builder.constant(name, value) for name, value in zip("wrb", values[1:4]))
    y, y_h = builder.node("GRU", [x, w, r, b, None, h], ["y", "y_h"], hidden_size=6, direction="bidirectional",
                          linear_before_reset=1)
    builder.output(y, np.float32)
    builder.output(y_h, np.float32)
    engine = NumpyEngine(load(to_bytes(builder.build())))
    (step,) = engine.plans[0].steps
    assert step.prepared is not None
    attributes = {"hidden_size": 6, "direction": "bidirectional", "linear_before_reset": 1}
    expected = onnxruntime_outputs("GRU", values, attributes)
    got = engine.run({"x": values[0], "h": values[5]})
    assert_all_same([got["y"], got["y_h"]], expected, "GRU through the engine")


def test_a_state_of_another_batch_is_refused_before_the_loop():
    values = inputs("LSTM", batch=3, directions=2, initial=True)
    values[6] = normal(2, 1, 6)
    with pytest.raises(ValueError, match=r"initial_c has shape \(2, 1, 6\)"):
        prepared_outputs("LSTM", values, {"hidden_size": 6, "direction": "bidirectional"})
