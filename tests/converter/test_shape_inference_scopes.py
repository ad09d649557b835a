"""Shape inference on graphs whose subgraphs reuse value names (each graph is a scope of its own).

Hugging Face optimum's merged decoders define the same names in both branches of their If. ONNX's
data propagation keyed what it learned by name across the model and gave one branch the other's
shapes; constant folding then froze a size, and the converted model answered wrongly (or failed)
at every other size, while the original ran."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import converter
import lite


def _branch(name: str, from_constant: bool) -> onnx.GraphProto:
    """``r = Reshape(x, Shape(t))``: t is a (1, 4, 16) constant, or x itself."""
    if from_constant:
        first = helper.make_node("Constant", [], ["t"], value=numpy_helper.from_array(np.zeros((1, 4, 16), np.float32)))
    else:
        first = helper.make_node("Identity", ["x"], ["t"])
    nodes = [first, helper.make_node("Shape", ["t"], ["sh"]), helper.make_node("Reshape", ["x", "sh"], ["r"])]
    return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])


def _model() -> onnx.ModelProto:
    """The If's output's axis-1 size: 4 on the then branch, x's on the else branch."""
    one = numpy_helper.from_array(np.array(1, np.int64))
    graph = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], then_branch=_branch("then", True), else_branch=_branch("else", False)),
         helper.make_node("Shape", ["y"], ["shape"]),
         helper.make_node("Constant", [], ["one"], value=one),
         helper.make_node("Gather", ["shape", "one"], ["n"])],
        "if_scopes",
        [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, "E", 16])],
        [helper.make_tensor_value_info("n", TensorProto.INT64, [])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_a_size_one_branch_knows_is_not_given_to_the_other(tmp_path, device):
    pytest.importorskip("onnxruntime")
    converter.convert(_model(), tmp_path / "m.lite", verify=False)
    model = lite.Model.load(tmp_path / "m.lite", device=device)
    x = np.zeros((1, 7, 16), np.float32)
    assert int(model.predict({"cond": np.array(False), "x": x})["n"]) == 7
    assert int(model.predict({"cond": np.array(True), "x": np.zeros((1, 4, 16), np.float32)})["n"]) == 4


def test_the_branches_keep_their_value_names(tmp_path):
    converter.convert(_model(), tmp_path / "m.onnx", verify=False)
    written = onnx.load(tmp_path / "m.onnx")
    branches = [attribute.g for node in written.graph.node if node.op_type == "If" for attribute in node.attribute]
    assert len(branches) == 2
    for branch in branches:
        names = {output for node in branch.node for output in node.output} | {value.name for value in branch.output}
        assert not any("__scope" in name for name in names), names


def test_verification_judges_a_failure_inside_a_branch_by_the_node_that_failed(tmp_path):
    """A kernel failing inside an If on values the branch computed is the converted model's
    failure (verification fails), not the inputs' (verification skipped), though the If itself
    reads a model input."""
    from converter.verify_output import _innermost, _reads_an_input
    from lite.errors import KernelError

    converter.convert(_model(), tmp_path / "m.lite", verify=False, optimize=False)
    graphs = lite.Model.load(tmp_path / "m.lite", device="numpy").ir
    branch = next(graph for graph in graphs.graphs[1:] if any(node.op_type == "Identity" for node in graph.nodes))
    reads_x = next(node for node in branch.nodes if node.op_type == "Identity")
    computed = next(node for node in branch.nodes if node.op_type == "Shape")
    if_node = next(node for node in graphs.main.nodes if node.op_type == "If")
    assert _reads_an_input(graphs, reads_x) and _reads_an_input(graphs, if_node)
    assert not _reads_an_input(graphs, computed)

    inner = KernelError("inside")
    inner.node = computed
    outer = KernelError("node 'if' (If): inside")
    outer.node = if_node
    outer.__cause__ = inner
    assert _innermost(outer) is computed
