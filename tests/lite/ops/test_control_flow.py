"""If, Loop and Scan: our kernels driven by subgraph callables, checked against onnx.reference
running the whole control-flow node."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import lite
import lite.ops.loop
from lite.errors import KernelError
from lite.ops import KERNELS
from tests.lite.engines.models import endless_loop

F = TensorProto.FLOAT


def graph_callable(graph: onnx.GraphProto):
    """What the engine hands a kernel for a GRAPH attribute: body(*inputs) -> list of outputs."""
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    evaluator = ReferenceEvaluator(model)
    names = [i.name for i in graph.input]

    def body(*values):
        return evaluator.run(None, dict(zip(names, values)))

    return body


def run_whole(node, inputs, input_infos, output_count, opset=17, oracle="reference"):
    """The whole control-flow node run by onnx.reference, or by ONNX Runtime where the reference
    lacks a feature (Scan axes/directions other than 0, Loop without a condition input)."""
    graph = helper.make_graph(
        [node], "outer", input_infos, [onnx.ValueInfoProto(name=n) for n in node.output[:output_count]]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = dict(zip([i.name for i in input_infos], inputs))
    if oracle == "reference":
        return ReferenceEvaluator(model).run(None, feeds)
    import onnxruntime

    model.ir_version = 10
    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def assert_all_close(actual, expected):
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected):
        assert got.dtype == np.asarray(want).dtype
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def branch(name, op, constant):
    const = helper.make_node("Constant", [], [f"{name}_c"], value=helper.make_tensor("c", F, [2], constant))
    out = helper.make_node(op, [f"{name}_c", f"{name}_c"], [f"{name}_y"])
    return helper.make_graph([const, out], name, [], [helper.make_tensor_value_info(f"{name}_y", F, [2])])


@pytest.mark.parametrize("cond", [True, False])
def test_if(cond):
    then_graph, else_graph = branch("then", "Add", [1.0, 2.0]), branch("else", "Mul", [3.0, 4.0])
    node = helper.make_node("If", ["cond"], ["y"], then_branch=then_graph, else_branch=else_graph)
    flag = np.array(cond)
    expected = run_whole(node, [flag], [helper.make_tensor_value_info("cond", TensorProto.BOOL, [])], 1)
    fn = KERNELS.select("If", "", 17).fn
    actual = fn(flag, then_branch=graph_callable(then_graph), else_branch=graph_callable(else_graph))
    assert_all_close(list(actual), expected)


def loop_body():
    # carried: total (float [2]); scan output: total * iteration; stop when total[0] > 10
    i = helper.make_tensor_value_info("i", TensorProto.INT64, [])
    cond_in = helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])
    total_in = helper.make_tensor_value_info("total_in", F, [2])
    nodes = [
        helper.make_node("Cast", ["i"], ["i_f"], to=F),
        helper.make_node("Add", ["total_in", "i_f"], ["total_out"]),
        helper.make_node("Mul", ["total_out", "i_f"], ["scan_out"]),
        helper.make_node("Constant", [], ["limit"], value=helper.make_tensor("l", F, [], [10.0])),
        helper.make_node("ReduceMax", ["total_out"], ["peak"], keepdims=0),
        helper.make_node("Less", ["peak", "limit"], ["cond_out"]),
    ]
    outputs = [
        helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
        helper.make_tensor_value_info("total_out", F, [2]),
        helper.make_tensor_value_info("scan_out", F, [2]),
    ]
    return helper.make_graph(nodes, "body", [i, cond_in, total_in], outputs)


@pytest.mark.parametrize("trip_count, cond", [(3, True), (100, True), (None, True), (4, None), (5, False)])
def test_loop(trip_count, cond):
    body = loop_body()
    names = ["M" if trip_count is not None else "", "cond" if cond is not None else "", "v0"]
    node = helper.make_node("Loop", names, ["total", "scans"], body=body)
    values = [
        None if trip_count is None else np.array(trip_count, dtype=np.int64),
        None if cond is None else np.array(cond),
        np.array([0.5, -1.0], dtype=np.float32),
    ]
    infos = [
        helper.make_tensor_value_info("M", TensorProto.INT64, []),
        helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        helper.make_tensor_value_info("v0", F, [2]),
    ]
    present = [(v, info) for v, info, n in zip(values, infos, names) if n]
    actual = KERNELS.select("Loop", "", 17).fn(*values, body=graph_callable(body), output_count=2)
    if cond is False:
        np.testing.assert_array_equal(actual[0], values[2])
        assert actual[1].shape[0] == 0
        return
    oracle = "reference" if cond is not None else "onnxruntime"
    expected = run_whole(node, [v for v, _ in present], [i for _, i in present], 2, oracle=oracle)
    assert_all_close(list(actual), expected)


def scan_body():
    state = helper.make_tensor_value_info("s_in", F, [3])
    x = helper.make_tensor_value_info("x", F, [3])
    w = helper.make_tensor_value_info("w", F, [2, 3])
    nodes = [
        helper.make_node("Add", ["s_in", "x"], ["s_out"]),
        helper.make_node("Mul", ["w", "s_out"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("s_out", F, [3]), helper.make_tensor_value_info("y", F, [2, 3])]
    return helper.make_graph(nodes, "body", [state, x, w], outputs)


@pytest.mark.parametrize(
    "attributes",
    [
        {},
        {"scan_input_directions": [1, 0], "scan_output_directions": [1]},
        {"scan_input_axes": [1, -1], "scan_output_axes": [2]},
        {"scan_input_axes": [0, 2], "scan_output_axes": [-1], "scan_input_directions": [0, 1]},
    ],
)
def test_scan(attributes):
    rng = np.random.default_rng(3)
    body = scan_body()
    axes = attributes.get("scan_input_axes", [0, 0])
    x = rng.standard_normal((4, 3)).astype(np.float32)
    if axes[0] == 1:
        x = np.ascontiguousarray(x.T)
    w_shape = [2, 3]
    w_axis = axes[1] % 3
    w_shape.insert(w_axis, 4)
    w = rng.standard_normal(w_shape).astype(np.float32)
    s0 = rng.standard_normal(3).astype(np.float32)
    node = helper.make_node("Scan", ["s0", "x", "w"], ["s", "ys"], body=body, num_scan_inputs=2, **attributes)
    infos = [helper.make_tensor_value_info(n, F, None) for n in ("s0", "x", "w")]
    expected = run_whole(node, [s0, x, w], infos, 2, oracle="reference" if not attributes else "onnxruntime")
    actual = KERNELS.select("Scan", "", 17).fn(s0, x, w, body=graph_callable(body), num_scan_inputs=2, **attributes)
    assert_all_close(list(actual), expected)


def test_scan_8_batches_and_sequence_lens():
    def body(state, x):
        total = state + x
        return [total, total * 2]

    states = np.zeros((2, 3), dtype=np.float32)
    xs = np.arange(2 * 4 * 3, dtype=np.float32).reshape(2, 4, 3)
    final, ys = KERNELS.select("Scan", "", 8).fn(None, states, xs, body=body, num_scan_inputs=1)
    np.testing.assert_allclose(final, xs.sum(axis=1))
    np.testing.assert_allclose(ys, np.cumsum(xs, axis=1) * 2)


@pytest.mark.parametrize("trip_count", [None, 2**62])
def test_loop_whose_condition_stays_true_stops_at_the_iteration_bound(monkeypatch, trip_count):
    monkeypatch.setattr(lite.ops.loop, "MAX_ITERATIONS", 50)
    runs = []

    def endless_body(iteration, cond, value):
        runs.append(int(iteration))
        return [np.array(True), value]

    M = None if trip_count is None else np.array(trip_count, dtype=np.int64)
    with pytest.raises(KernelError, match="still running after 50 iterations"):
        KERNELS.select("Loop", "", 17).fn(M, None, np.zeros(2, np.float32), body=endless_body, output_count=1)
    assert runs == list(range(50))


def test_an_endless_loop_in_a_model_is_a_kernel_error_naming_the_node(monkeypatch):
    monkeypatch.setattr(lite.ops.loop, "MAX_ITERATIONS", 1000)
    model = lite.Model.load(endless_loop(), device="numpy")
    with pytest.raises(KernelError, match=r"node 'endless_loop' \(Loop\).*1,000 iterations \(no trip count") as info:
        model.predict({"INPUT0": np.ones((1, 16), np.float32)})
    assert info.value.node.name == "endless_loop"
