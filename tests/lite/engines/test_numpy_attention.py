"""The numpy engine's attention fusion (lite.engines.numpy_attention): which blocks become one
step, and that the step computes what the nodes compute, fused or run in turn."""

from __future__ import annotations

import numpy as np
import pytest

from lite.engines.numpy_attention import FusedAttention
from lite.engines.numpy_engine import NumpyEngine
from lite.errors import KernelError
from lite.format import GraphBuilder, load, to_bytes
from tests.lite.engines.fusion_tools import node_by_node

HEADS, WIDTH = 2, 8  # two heads of 8: a model width of 16


def attention_model(*, scale="Mul", masks=1, nan_guard=False, head_scale=False, merge=True, softmax_axis=-1,
                    probabilities_output=False, scores_output=False, opset=18):
    """q, k, v (N, T, 16) -> heads -> softmax(q kᵀ · s + masks) v -> merged heads (N, T, 16), the
    nodes torch.export writes for a BERT layer (options: its variants in other models)."""
    b = GraphBuilder("attention", opset=opset)
    q, k, v = (b.input(name, np.float32, ["N", "T", HEADS * WIDTH]) for name in "qkv")
    split = b.constant("split", np.array([0, 0, HEADS, WIDTH], np.int64))
    heads = [b.node("Reshape", [x, split]) for x in (q, k, v)]
    q = b.node("Transpose", [heads[0]], perm=[0, 2, 1, 3])
    k = b.node("Transpose", [heads[1]], perm=[0, 2, 3, 1])
    v = b.node("Transpose", [heads[2]], perm=[0, 2, 1, 3])
    if head_scale:  # each operand scaled by the fourth root of the width, as torch's decomposed SDPA does
        root = b.constant("root", np.array(WIDTH ** -0.25, np.float32))
        q, k = b.node("Mul", [q, root]), b.node("Mul", [root, k])
    scores = b.node("MatMul", [q, k], outputs=["scores"])
    if scale == "Mul":
        scores = b.node("Mul", [scores, b.constant("scale", np.array(WIDTH ** -0.5, np.float32))])
    elif scale == "Div":
        scores = b.node("Div", [scores, b.constant("scale", np.array(WIDTH ** 0.5, np.float32))])
    elif scale == "per head":
        scores = b.node("Mul", [b.constant("scale", np.array([[[0.5]], [[0.25]]], np.float32)), scores])
    for index in range(masks):
        mask = b.input(f"mask{index}", np.float32, ["N", 1, "T", "T"])
        scores = b.node("Add", [mask, scores] if index else [scores, mask])
    probabilities = b.node("Softmax", [scores], axis=softmax_axis, outputs=["probabilities"])
    if nan_guard:
        nan = b.node("IsNaN", [probabilities])
        probabilities = b.node("Where", [nan, b.constant("zero", np.array(0.0, np.float32)), probabilities])
    context = b.node("MatMul", [probabilities, v], outputs=["context" if not merge else "context_heads"])
    if merge:
        merged = b.node("Transpose", [context], perm=[0, 2, 1, 3])
        context = b.node("Reshape", [merged, b.constant("merge", np.array([0, 0, HEADS * WIDTH], np.int64))],
                         outputs=["context"])
    b.output(context, np.float32, None)
    if probabilities_output:
        b.output("probabilities", np.float32, None)
    if scores_output:
        b.output("scores", np.float32, None)
    return load(to_bytes(b.build()))


def feeds(model, batch=2, length=5, seed=0, mask_batch=None):
    rng = np.random.default_rng(seed)
    values = {name: rng.standard_normal((batch, length, HEADS * WIDTH)).astype(np.float32) for name in "qkv"}
    for index, tensor in enumerate(t for t in model.main.inputs if model.main.tensors[t].name.startswith("mask")):
        mask = np.where(rng.random((mask_batch or batch, 1, length, length)) < 0.3, -1e4, 0.0).astype(np.float32)
        values[model.main.tensors[tensor].name] = mask
    return values


def reference(inputs, *, scale=WIDTH ** -0.5, masks=1, merge=True):
    """Attention in float64, from its definition."""
    q, k, v = (inputs[name].astype(np.float64) for name in "qkv")
    split = [q.reshape(q.shape[0], q.shape[1], HEADS, WIDTH).transpose(0, 2, 1, 3) for q in (q, k, v)]
    scores = split[0] @ split[1].transpose(0, 1, 3, 2) * scale
    for index in range(masks):
        scores = scores + inputs[f"mask{index}"]
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    context = (weights / weights.sum(axis=-1, keepdims=True)) @ split[2]
    return context.transpose(0, 2, 1, 3).reshape(q.shape) if merge else context


def fused(engine):
    return [step for step in engine.plans[0].steps if isinstance(step.fn, FusedAttention)]


@pytest.mark.parametrize("options, scale", [
    ({}, WIDTH ** -0.5),
    ({"scale": "Div"}, WIDTH ** -0.5),
    ({"scale": None}, 1.0),
    ({"scale": "per head"}, np.array([[[0.5]], [[0.25]]])),
    ({"masks": 0}, WIDTH ** -0.5),
    ({"masks": 2}, WIDTH ** -0.5),
    ({"nan_guard": True, "head_scale": True, "scale": None}, WIDTH ** -0.5),
    ({"merge": False}, WIDTH ** -0.5),
], ids=["Mul scale", "Div scale", "no scale", "per-head scale", "no mask", "two masks", "decomposed SDPA",
        "heads not merged"])
def test_an_attention_block_is_one_step(options, scale):
    model = attention_model(**options)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    assert [step.node.op_type for step in engine.plans[0].steps] == ["Reshape" if options.get("merge", True) else "MatMul"]
    for batch, length in [(2, 5), (1, 7), (2, 5)]:  # shapes remembered per sequence length
        inputs = feeds(model, batch, length, seed=length)
        got = engine.run(inputs)["context"]
        expected = reference(inputs, scale=scale, masks=options.get("masks", 1), merge=options.get("merge", True))
        np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-6)
        # The same numpy operations in the same order as the nodes' kernels: the same float32 values.
        np.testing.assert_array_equal(got, node_by_node(model, inputs)["context"])
    # Each set of shapes was planned once, the merged heads' product written in the merged order.
    (step,) = fused(engine)
    plans = list(step.fn.plans.values())
    assert len(plans) == 2 and all(plan is not None for plan in plans)
    assert all((plan.merge is not None and plan.merge[0] == "buffer") == options.get("merge", True) for plan in plans)


@pytest.mark.parametrize("options", [{"probabilities_output": True}, {"scores_output": True}, {"softmax_axis": 1}],
                         ids=["probabilities returned", "scores returned", "softmax over another axis"])
def test_blocks_whose_intermediates_are_needed_stay_as_they_are(options):
    model = attention_model(**options)
    engine = NumpyEngine(model)
    assert not fused(engine)
    inputs = feeds(model)
    expected = node_by_node(model, inputs)
    for name, value in engine.run(inputs).items():
        np.testing.assert_allclose(value, expected[name], rtol=1e-6, atol=1e-7)


def test_inputs_the_fused_step_does_not_handle_run_the_original_kernels():
    """A mask with a larger batch than the scores broadcasts them to its shape: the nodes run in turn."""
    model = attention_model(merge=False)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    inputs = feeds(model, batch=1, mask_batch=3)
    got = engine.run(inputs)["context"]
    assert got.shape == (3, HEADS, 5, WIDTH)
    np.testing.assert_allclose(got, node_by_node(model, inputs)["context"], rtol=1e-6, atol=1e-7)
    inputs = {name: value.astype(np.float64) for name, value in feeds(model).items()}  # not the graph's float32
    np.testing.assert_allclose(engine.run(inputs)["context"], node_by_node(model, inputs)["context"], rtol=1e-12)


def test_a_fully_masked_row_gives_the_guards_fill():
    """An all -inf row makes softmax NaN; the decomposed SDPA's Where(IsNaN) turns it into zeros."""
    model = attention_model(nan_guard=True)
    engine = NumpyEngine(model)
    assert len(fused(engine)) == 1
    inputs = feeds(model)
    inputs["mask0"][0, 0, 2, :] = -np.inf
    got = engine.run(inputs)["context"]
    np.testing.assert_array_equal(got[0, 2], np.zeros(HEADS * WIDTH, np.float32))
    np.testing.assert_allclose(got, node_by_node(model, inputs)["context"], rtol=1e-6, atol=1e-7)


def test_a_damaged_block_is_not_fused_and_fails_when_run():
    """A product that lost its second input (a damaged file) is left alone: a KernelError when run."""
    model = attention_model()
    context = next(node for node in model.main.nodes if node.op_type == "MatMul" and node.inputs[0] ==
                   model.main.tensors.index(next(t for t in model.main.tensors if t.name == "probabilities")))
    context.inputs = context.inputs[:1]
    engine = NumpyEngine(model)
    assert not fused(engine)
    with pytest.raises(KernelError):
        engine.run(feeds(model))


def test_a_plan_serves_only_the_inputs_it_was_made_for():
    """A step plans its work once per set of q, k and v shapes; a mask of another shape, a
    shape tensor of other values or another element type is computed with every check made,
    with the same values as the nodes."""
    model = attention_model()
    engine = NumpyEngine(model)
    (step,) = fused(engine)
    inputs = feeds(model, batch=2, length=5)
    expected = node_by_node(model, inputs)["context"]
    np.testing.assert_array_equal(engine.run(inputs)["context"], expected)
    (plan,) = step.fn.plans.values()
    args = [inputs["q"], inputs["k"], inputs["v"], inputs["mask0"], *[
        engine.plans[0].constants[index] for index in step.inputs[4:]]]
    assert plan.accepts(tuple(args))
    # A mask broadcast along the query axis: the plan declines it, the step still fuses it.
    broad = dict(inputs, mask0=np.ascontiguousarray(inputs["mask0"][:, :, :1, :]))
    assert not plan.accepts((*args[:3], broad["mask0"], *args[4:]))
    np.testing.assert_array_equal(engine.run(broad)["context"], node_by_node(model, broad)["context"])
    # Shape tensors of the same values (writeable copies) are accepted; other values are not.
    same = [np.array(value) for value in args[4:]]
    assert plan.accepts((*args[:4], *same))
    np.testing.assert_array_equal(step.fn(*args[:4], *same), expected)
    other = [*same[:-1], np.array([0, 0, -1], np.int64)]
    assert not plan.accepts((*args[:4], *other))
    np.testing.assert_array_equal(step.fn(*args[:4], *other), expected)
    # float64 operands: a plan of their own.
    wide = {name: value.astype(np.float64) for name, value in inputs.items()}
    np.testing.assert_allclose(engine.run(wide)["context"], node_by_node(model, wide)["context"], rtol=1e-12)
    assert len(step.fn.plans) == 2


def split_attention_model(*, split_read_elsewhere=False, num_outputs=False):
    """q, k and v cut from one (N, T, HEADS, 2·8 + 16) product by a Split along the last axis,
    each moved to heads by a Transpose (LeViT's attention); by sizes, or into ``num_outputs``
    parts (GPT-2's)."""
    b = GraphBuilder("split_attention", opset=18)
    x = b.input("x", np.float32, ["N", "T", HEADS, 3 * WIDTH])
    if num_outputs:
        q, k, v = b.node("Split", [x], axis=-1, num_outputs=3, outputs=["q", "k", "v"])
    else:
        sizes = b.constant("sizes", np.array([WIDTH, WIDTH, WIDTH], np.int64))
        q, k, v = b.node("Split", [x, sizes], axis=-1, outputs=["q", "k", "v"])
    scores = b.node("MatMul", [b.node("Transpose", [q], perm=[0, 2, 1, 3]), b.node("Transpose", [k], perm=[0, 2, 3, 1])])
    scores = b.node("Mul", [scores, b.constant("scale", np.array(WIDTH ** -0.5, np.float32))])
    probabilities = b.node("Softmax", [scores], axis=-1)
    context = b.node("MatMul", [probabilities, b.node("Transpose", [v], perm=[0, 2, 1, 3])])
    merged = b.node("Transpose", [context], perm=[0, 2, 1, 3])
    b.output(b.node("Reshape", [merged, b.constant("merge", np.array([0, 0, HEADS * WIDTH], np.int64))],
                    outputs=["context"]), np.float32, None)
    if split_read_elsewhere:
        b.output(b.node("Relu", [v], outputs=["values"]), np.float32, None)
    return load(to_bytes(b.build()))


@pytest.mark.parametrize("num_outputs", [False, True], ids=["sizes", "num_outputs"])
@pytest.mark.parametrize("read_elsewhere", [False, True], ids=["Split read by the block", "a part read elsewhere"])
def test_q_k_v_cut_by_a_split_are_views_of_its_input(read_elsewhere, num_outputs):
    model = split_attention_model(split_read_elsewhere=read_elsewhere, num_outputs=num_outputs)
    engine = NumpyEngine(model)
    (step,) = fused(engine)
    op_types = [s.node.op_type for s in engine.plans[0].steps]
    assert ("Split" in op_types) == read_elsewhere
    rng = np.random.default_rng(2)
    for length in (5, 1, 5):
        inputs = {"x": rng.standard_normal((2, length, HEADS, 3 * WIDTH)).astype(np.float32)}
        expected = node_by_node(model, inputs)
        for name, value in engine.run(inputs).items():
            np.testing.assert_array_equal(value, expected[name])
    assert len(step.fn.plans) == 2 and all(plan is not None for plan in step.fn.plans.values())
    if num_outputs:
        # Another width along the split axis: parts of ceil(26 / 3) = 9, the last one 8 wide (the width the merge takes).
        inputs = {"x": rng.standard_normal((1, 3, HEADS, 3 * WIDTH + 2)).astype(np.float32)}
        np.testing.assert_array_equal(engine.run(inputs)["context"], node_by_node(model, inputs)["context"])
        assert len(step.fn.plans) == 3 and all(plan is not None for plan in step.fn.plans.values())
        return
    # A tensor of another width along the split axis: the nodes in turn, which report the Split's failure.
    with pytest.raises(KernelError):
        engine.run({"x": np.zeros((1, 3, HEADS, 3 * WIDTH + 1), np.float32)})
