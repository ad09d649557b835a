"""Forward LSTM layers with peepholes, each reading the last one's output, as one wavefront loop
(lite.engines.numpy_recurrent_chain): madmom's unidirectional beat tracker gives what its nodes
give, node by node."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_engine import NumpyEngine
from lite.engines.numpy_recurrent_chain import ChainedRecurrence
from lite.errors import LiteError
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node
from tests.lite.engines.test_numpy_recurrent_stack import assert_same_outputs

rng = np.random.default_rng(8)
HIDDEN, SIZE = 6, 5


def normal(*shape):
    return (rng.standard_normal(shape) * 0.5).astype(np.float32)


def layer(b, name, x, size, *, peepholes=True, initial_h=None):
    """An LSTM node on x with its initial states as graph inputs (or initial_h given): its outputs."""
    w = b.constant(f"{name}_w", normal(1, 4 * HIDDEN, size))
    r = b.constant(f"{name}_r", normal(1, 4 * HIDDEN, HIDDEN))
    bias = b.constant(f"{name}_b", normal(1, 8 * HIDDEN))
    p = b.constant(f"{name}_p", normal(1, 3 * HIDDEN)) if peepholes else None
    h = initial_h or b.input(f"{name}_h", np.float32, [1, 1, HIDDEN])
    c = b.input(f"{name}_c", np.float32, [1, 1, HIDDEN])
    return b.node("LSTM", [x, w, r, bias, None, h, c, p], [f"{name}_y", f"{name}_yh", f"{name}_yc"],
                  hidden_size=HIDDEN)


def chain_model(*, layers=3, madmom=True, peepholes=True, y_output=False, state_from_last=False, batch=1):
    """x -> ``layers`` LSTMs, each reading the last one's Y: madmom's Squeeze([1, 2]) + Unsqueeze([1])
    between them, or PyTorch's Squeeze([1])."""
    b = GraphBuilder("chain", opset=18)
    squeeze = b.constant("squeeze_axes", np.array([1, 2] if madmom else [1], np.int64))
    unsqueeze = b.constant("unsqueeze_axes", np.array([1], np.int64))
    x = b.input("x", np.float32, ["T", batch, SIZE])
    size, last_h = SIZE, None
    for k in range(layers):
        initial_h = last_h if state_from_last and k == layers - 1 else None
        y, y_h, y_c = layer(b, f"l{k}", x, size, peepholes=peepholes, initial_h=initial_h)
        b.output(y_h, np.float32)
        b.output(y_c, np.float32)
        x = b.node("Squeeze", [y, squeeze], [f"s{k}"])
        if madmom:
            x = b.node("Unsqueeze", [x, unsqueeze], [f"u{k}"])
        size, last_h = HIDDEN, y_h
        if y_output and k == 0:
            b.output(y, np.float32)
    b.output(x, np.float32)
    return load(to_bytes(b.build()))


def feeds(model, seq=8, batch=1):
    values = {}
    for tensor in (model.main.tensors[i] for i in model.main.inputs):
        values[tensor.name] = normal(seq, batch, SIZE) if tensor.name == "x" else normal(1, batch, HIDDEN)
    return values


def chained(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, ChainedRecurrence)]


@pytest.mark.parametrize("layers", [2, 3])
@pytest.mark.parametrize("madmom", [True, False], ids=["squeeze-unsqueeze", "squeeze"])
def test_a_chain_of_layers_runs_as_one_loop(layers, madmom):
    model = chain_model(layers=layers, madmom=madmom)
    engine = NumpyEngine(model)
    assert len(chained(engine)) == 1
    assert [step.node.op_type for step in engine.plans[0].steps].count("LSTM") == 1
    values = feeds(model)
    assert_same_outputs(engine.run(values), node_by_node(model, values))


def test_a_batch_of_two_runs_node_by_node():
    model = chain_model(batch=2, madmom=False)
    engine = NumpyEngine(model)
    assert len(chained(engine)) == 1
    values = feeds(model, batch=2)
    assert_same_outputs(engine.run(values), node_by_node(model, values))


@pytest.mark.parametrize(("options", "chained_layers"), [
    ({"peepholes": False}, []),
    ({"y_output": True}, ["l1", "l2"]),  # the first layer's Y is read by the caller too
    ({"layers": 2, "state_from_last": True}, []),
], ids=["no-peepholes", "y-is-an-output", "state-from-the-last-layer"])
def test_layers_the_loop_cannot_take_stay_out_of_it(options, chained_layers):
    model = chain_model(**options)
    engine = NumpyEngine(model)
    names = [step.node.name for fused in chained(engine) for step in fused.fn.members]
    tensors = model.main.tensors
    assert [tensors[step.outputs[0]].name for fused in chained(engine) for step in fused.fn.members] == [
        f"{layer}_y" for layer in chained_layers], names
    values = feeds(model)
    assert_same_outputs(engine.run(values), node_by_node(model, values))


def test_a_refused_state_names_its_node():
    model = chain_model()
    values = feeds(model)
    values["l2_c"] = normal(1, 2, HIDDEN)
    with pytest.raises(LiteError, match=r"node .*\(LSTM\).*initial_c has shape \(1, 2, 6\)"):
        NumpyEngine(model).run(values)
