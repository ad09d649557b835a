"""The numpy engine's remembered steps (lite/engines/numpy_steps.py): nodes computed from input
shapes alone (Shape, the arithmetic on it, Range) are computed once per input shape and looked up
afterwards, alone or in groups, between other nodes; a result too large to keep is recomputed, and
a failing node among them is named once."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.engines.numpy_engine import NumpyEngine, _MemoGroup
from lite.format import GraphBuilder, load, to_bytes

rng = np.random.default_rng(2024)


def normal(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def _shape_chain_model():
    """y = x reshaped to (N, L/2, 2) through a shape computed at run time, plus a position index
    Range(0, L) broadcast to (N, L) added to the first half: every node between Shape and the
    Reshape's shape input, and the Range, depend on the input's shape alone."""
    b = GraphBuilder("shapes", opset=14)
    x = b.input("x", np.float32, ["N", "L"])
    shape = b.node("Shape", [x])
    length = b.node("Gather", [shape, b.constant("one", np.array(1, np.int64))], axis=0)
    half = b.node("Div", [length, b.constant("two", np.array(2, np.int64))])
    batch = b.node("Gather", [shape, b.constant("zero", np.array(0, np.int64))], axis=0)
    target = b.node("Concat", [b.node("Unsqueeze", [batch, b.constant("axes0", np.array([0], np.int64))]),
                               b.node("Unsqueeze", [half, b.constant("axes1", np.array([0], np.int64))]),
                               b.constant("pair", np.array([2], np.int64))], axis=0)
    positions = b.node("Cast", [b.node("Range", [b.constant("start", np.array(0, np.int64)), length,
                                                  b.constant("step", np.array(1, np.int64))])], to=1)
    y = b.node("Reshape", [b.node("Add", [x, positions]), target], outputs=["y"])
    b.output(y, np.float32, ["N", "H", 2])
    b.output(b.node("Identity", [shape], outputs=["shape"]), np.int64, [2])
    return load(to_bytes(b.build()))


def _remembered(engine: NumpyEngine):
    """The main graph's remembered steps, alone or in the groups looked up together, and (now)
    their memos: for either, its results (a tuple) by key."""
    steps, memos = [], []
    for step in engine.plans[0].steps:
        if isinstance(step.fn, _MemoGroup):
            steps += step.fn.steps
            memos.append({key: entry[1] for key, entry in step.fn.memo.items()})
        elif step.memo is not None:
            steps.append(step)
            memos.append({key: (value,) for key, value in step.memo.items()})
    return steps, memos


def test_nodes_computed_from_shapes_are_remembered_per_shape():
    engine = NumpyEngine(_shape_chain_model())
    remembered, memos = _remembered(engine)
    assert {step.node.op_type for step in remembered} >= {"Gather", "Div", "Unsqueeze", "Concat", "Range", "Cast"}
    assert all(step.node.op_type not in ("Shape", "Add", "Reshape", "Identity") for step in remembered)
    # Each runs right after the Shape it reads: all of them one step, one lookup.
    assert len(memos) == 1 and len(engine.plans[0].steps) == 5
    for length in (4, 6, 4, 8, 6, 4):
        x = normal(3, length)
        outputs = engine.run({"x": x})
        np.testing.assert_array_equal(outputs["y"], (x + np.arange(length, dtype=np.float32)).reshape(3, length // 2, 2))
        assert outputs["shape"].tolist() == [3, length] and outputs["shape"].flags.writeable
    _, memos = _remembered(engine)
    assert all(len(memo) == 3 for memo in memos)
    assert all(not value.flags.writeable for memo in memos for values in memo.values() for value in values)


def test_a_shape_only_remembered_nodes_read_is_looked_up_by_its_input_shape():
    """A Shape node read by remembered nodes alone runs only when they are looked up in vain:
    their group reads the Shape's input and keys by its shape. Read by anything else too (a
    graph output here), it stays a node of its own."""
    for returned in (False, True):
        b = GraphBuilder("folded_shape", opset=14)
        x = b.input("x", np.float32, ["N", "L"])
        shape = b.node("Shape", [x], start=1)
        one = b.constant("one", np.array([1], np.int64))
        target = b.node("Concat", [b.constant("batch", np.array([-1], np.int64)), b.node("Mul", [shape, one]), one],
                        axis=0)
        b.output(b.node("Reshape", [x, target], outputs=["y"]), np.float32, None)
        if returned:
            b.output(b.node("Identity", [shape], outputs=["shape"]), np.int64, [1])
        engine = NumpyEngine(load(to_bytes(b.build())))
        op_types = [step.node.op_type for step in engine.plans[0].steps]
        assert ("Shape" in op_types) == returned
        for n, length in [(2, 3), (2, 5), (4, 3), (2, 3)]:
            x_value = normal(n, length)
            outputs = engine.run({"x": x_value})
            np.testing.assert_array_equal(outputs["y"], x_value.reshape(n, length, 1))
            if returned:
                assert outputs["shape"].tolist() == [length]
        remembered, memos = _remembered(engine)
        assert [step.node.op_type for step in remembered] == ["Mul", "Concat"]
        assert len(memos[0]) == (2 if returned else 3)  # by the Shape's values, or by x's shape


def test_remembered_nodes_between_others_and_a_result_too_large_to_keep():
    """Nodes computed from shapes run, as one group, after the last node they read from (here
    the second Shape, of an intermediate), ahead of nodes between them in the file; a result
    above the size kept (an (L, 8192) float mask) is computed again on every run, the rest are
    looked up."""
    b = GraphBuilder("interleaved", opset=14)
    x = b.input("x", np.float32, ["N", "L"])
    doubled = b.node("Add", [x, x])
    length = b.node("Gather", [b.node("Shape", [x]), b.constant("one", np.array(1, np.int64))], axis=0)
    shifted = b.node("Relu", [doubled])
    wide = b.node("ConstantOfShape", [b.node("Concat", [
        b.node("Unsqueeze", [length, b.constant("axes", np.array([0], np.int64))]),
        b.constant("width", np.array([8192], np.int64))], axis=0)], value=np.array([0.5], np.float32))
    second = b.node("Gather", [b.node("Shape", [shifted]), b.constant("zero", np.array(0, np.int64))], axis=0)
    count = b.node("Cast", [b.node("Mul", [second, length])], to=1)
    y = b.node("Add", [shifted, count], outputs=["y"])
    total = b.node("ReduceSum", [wide], outputs=["total"], keepdims=0)
    b.output(y, np.float32, ["N", "L"])
    b.output(total, np.float32, [])
    engine = NumpyEngine(load(to_bytes(b.build())))
    remembered, memos = _remembered(engine)
    assert {step.node.op_type for step in remembered} == {"Gather", "Unsqueeze", "Concat", "ConstantOfShape", "Mul",
                                                          "Cast"}
    assert len(memos) == 2
    for n, length in [(2, 3), (4, 5), (2, 3), (2, 3)]:
        x = normal(n, length)
        outputs = engine.run({"x": x})
        np.testing.assert_array_equal(outputs["y"], np.maximum(x + x, 0) + np.float32(n * length))
        assert outputs["total"] == np.float32(0.5 * 8192 * length)
    _, memos = _remembered(engine)
    assert all(len(memo) == 2 for memo in memos)
    kept = [value for memo in memos for values in memo.values() for value in values]
    assert any(value is None for value in kept)  # the (L, 8192) mask
    assert all(value is None or value.nbytes < 64 * 1024 for value in kept)


def test_a_failing_node_among_remembered_ones_is_named_once():
    b = GraphBuilder("bad_index", opset=14)
    x = b.input("x", np.float32, ["N", "L"])
    third = b.node("Gather", [b.node("Shape", [x]), b.constant("two", np.array(2, np.int64))], axis=0,
                   name="third_axis")
    count = b.node("Unsqueeze", [third, b.constant("axes", np.array([0], np.int64))])
    b.output(b.node("Reshape", [x, b.node("Concat", [count, b.constant("rest", np.array([-1], np.int64))], axis=0)],
                    outputs=["y"]), np.float32, None)
    engine = NumpyEngine(load(to_bytes(b.build())))
    assert any(isinstance(step.fn, _MemoGroup) for step in engine.plans[0].steps)
    for observer in (None, lambda node, seconds, values: None):  # the run loop, and the profile's
        with pytest.raises(lite.KernelError) as raised:
            engine.run({"x": normal(2, 3)}, observer=observer)
        assert str(raised.value).startswith("node 'third_axis' (Gather)") and str(raised.value).count("node '") == 1
