"""Independent recurrent nodes of one cell run as one time loop (lite.engines.numpy_recurrent_stack):
madmom's bidirectional layers (two forward nodes, one on the input reversed in time) give what
their nodes give, node by node."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_recurrent_stack import StackedRecurrence
from lite.errors import LiteError
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node

rng = np.random.default_rng(5)
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
HIDDEN, SIZE = 6, 5
CELLS = [("LSTM", {}, True), ("LSTM", {}, False), ("GRU", {"linear_before_reset": 1}, False),
         ("GRU", {"linear_before_reset": 0}, False), ("RNN", {}, False)]
CELL_IDS = ["LSTM-peepholes", "LSTM", "GRU-linear-before-reset", "GRU", "RNN"]


def normal(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def weights(b, name, op, directions=1, peepholes=False, size=SIZE):
    """W, R, B (and P) of a node as constants."""
    gates = GATES[op]
    names = [b.constant(f"{name}_w", normal(directions, gates * HIDDEN, size)),
             b.constant(f"{name}_r", normal(directions, gates * HIDDEN, HIDDEN)),
             b.constant(f"{name}_b", normal(directions, 2 * gates * HIDDEN))]
    return names, (b.constant(f"{name}_p", normal(directions, 3 * HIDDEN)) if peepholes else None)


def recurrent(b, op, name, x, attributes, *, peepholes=False, lengths=None, directions=1, size=SIZE):
    """One node with its initial states as graph inputs; its outputs' names."""
    (w, r, bias), p = weights(b, name, op, directions, peepholes, size)
    h = b.input(f"{name}_h", np.float32, [directions, 1, HIDDEN])
    inputs = [x, w, r, bias, lengths, h]
    if op == "LSTM":
        inputs += [b.input(f"{name}_c", np.float32, [directions, 1, HIDDEN]), p]
    outputs = [f"{name}_y", f"{name}_yh"] + ([f"{name}_yc"] if op == "LSTM" else [])
    b.node(op, inputs, outputs, hidden_size=HIDDEN, **attributes)
    return outputs


def madmom_model(op, attributes, peepholes):
    """x (seq, SIZE) -> a bidirectional layer as madmom writes it -> (seq, 2 * HIDDEN), and the states."""
    b = GraphBuilder("madmom", opset=18)
    x = b.input("x", np.float32, ["T", SIZE])
    axis1 = b.constant("axis1", np.array([1], np.int64))
    squeezed = b.constant("axes12", np.array([1, 2], np.int64))
    reverse = [b.constant(name, np.array([value], np.int64))
               for name, value in [("start", -1), ("end", np.iinfo(np.int64).min), ("axis0", 0), ("step", -1)]]
    forward = recurrent(b, op, "fw", b.node("Unsqueeze", [x, axis1], ["x3"]), attributes, peepholes=peepholes)
    x_reversed = b.node("Slice", [x, *reverse], ["x_reversed"])
    backward = recurrent(b, op, "bw", b.node("Unsqueeze", [x_reversed, axis1], ["xr3"]), attributes,
                         peepholes=peepholes)
    y_fw = b.node("Squeeze", [forward[0], squeezed], ["y_fw"])
    y_bw = b.node("Slice", [b.node("Squeeze", [backward[0], squeezed], ["y_bw_reversed"]), *reverse], ["y_bw"])
    b.output(b.node("Concat", [y_fw, y_bw], ["y"], axis=1), np.float32)
    for name in forward[1:] + backward[1:]:
        b.output(name, np.float32)
    return load(to_bytes(b.build()))


def feeds(model, seq=9):
    values = {}
    for tensor in (model.main.tensors[i] for i in model.main.inputs):
        shape = [seq if not isinstance(dim, int) else dim for dim in tensor.shape]
        values[tensor.name] = normal(*shape)
    return values


def stacked(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, StackedRecurrence)]


def assert_same_outputs(got, expected):
    assert got.keys() == expected.keys()
    for name in expected:
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(("op", "attributes", "peepholes"), CELLS, ids=CELL_IDS)
def test_a_madmom_bidirectional_layer_runs_as_one_loop(op, attributes, peepholes):
    model = madmom_model(op, attributes, peepholes)
    engine = NumpyEngine(model)
    assert len(stacked(engine)) == 1
    assert [step.node.op_type for step in engine.plans[0].steps].count(op) == 1
    values = feeds(model)
    assert_same_outputs(engine.run(values), node_by_node(model, values))


def two_nodes_model(op, first, second, *, lengths=False):
    """Two nodes on inputs x1 and x2 (each its own sequence length), with the attributes given."""
    b = GraphBuilder("two", opset=18)
    lens = b.input("lens", np.int32, [1]) if lengths else None
    outputs = []
    for name, attributes in (("a", first), ("b", second)):
        directions = 2 if attributes.get("direction") == "bidirectional" else 1
        x = b.input(f"x_{name}", np.float32, [1, f"T{name}", SIZE] if attributes.get("layout") else [f"T{name}", 1, SIZE])
        outputs += recurrent(b, op, name, x, attributes, directions=directions, lengths=lens if name == "a" else None)
    for name in outputs:
        b.output(name, np.float32)
    return load(to_bytes(b.build()))


def two_feeds(model, seq_a, seq_b):
    values = {}
    for tensor in (model.main.tensors[i] for i in model.main.inputs):
        if tensor.name == "lens":
            values["lens"] = np.array([seq_a - 3], np.int32)
            continue
        seq = seq_a if tensor.name.startswith(("x_a", "a_")) else seq_b
        shape = [seq if not isinstance(dim, int) else dim for dim in tensor.shape]
        values[tensor.name] = normal(*shape)
    return values


@pytest.mark.parametrize(("first", "second"), [
    ({"direction": "bidirectional"}, {"direction": "reverse"}),
    ({"direction": "forward", "layout": 1}, {"direction": "bidirectional"}),
])
def test_nodes_of_other_directions_and_layouts_stack(first, second):
    model = two_nodes_model("LSTM", first, second)
    engine = NumpyEngine(model)
    assert len(stacked(engine)) == 1
    values = two_feeds(model, 7, 7)
    assert_same_outputs(engine.run(values), node_by_node(model, values))


def test_sequence_lens_of_one_node_apply_to_it_alone():
    model = two_nodes_model("GRU", {"linear_before_reset": 1}, {"linear_before_reset": 1}, lengths=True)
    engine = NumpyEngine(model)
    assert len(stacked(engine)) == 1
    values = two_feeds(model, 8, 8)
    got = engine.run(values)
    assert_same_outputs(got, node_by_node(model, values))
    assert not got["a_y"][5:].any() and got["b_y"][5:].any()


def test_sequences_of_other_lengths_run_node_by_node():
    model = two_nodes_model("RNN", {}, {})
    engine = NumpyEngine(model)
    values = two_feeds(model, 6, 9)
    assert_same_outputs(engine.run(values), node_by_node(model, values))


def test_a_refused_state_names_its_node():
    model = two_nodes_model("LSTM", {}, {})
    values = two_feeds(model, 6, 6)
    values["b_c"] = normal(1, 2, HIDDEN)
    with pytest.raises(LiteError, match=r"node .*\(LSTM\).*initial_c has shape \(1, 2, 6\)"):
        NumpyEngine(model).run(values)


def test_a_node_reading_anothers_output_is_not_stacked_with_it():
    b = GraphBuilder("deep", opset=18)
    x = b.input("x", np.float32, ["T", 1, SIZE])
    first = recurrent(b, "LSTM", "one", x, {})
    second = recurrent(b, "LSTM", "two", b.node("Squeeze", [first[0], b.constant("axes", np.array([1], np.int64))],
                                                ["y1"]), {}, size=HIDDEN)
    b.output(second[0], np.float32)
    model = load(to_bytes(b.build()))
    engine = NumpyEngine(model)
    assert stacked(engine) == []
    values = feeds(model, 6)
    assert_same_outputs(engine.run(values), node_by_node(model, values))
