"""converter.functions: model-local functions are inlined within a size and nesting budget."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import converter
from converter import cli
from converter.errors import ModelImportError
from converter.functions import MAX_NAME_PROBES, MAX_NESTING

OPSETS = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]


def _nested(levels: int, calls: int, main_calls: bool = True) -> onnx.ModelProto:
    """f0 = Relu; f(k) calls f(k-1) ``calls`` times in a chain; the main graph calls the top one
    (or, with ``main_calls=False``, just runs a Relu and leaves the functions unused)."""
    functions = []
    for level in range(levels):
        if level == 0:
            nodes = [helper.make_node("Relu", ["x"], ["y"])]
        else:
            names = ["x", *(f"t{k}" for k in range(calls - 1)), "y"]
            nodes = [helper.make_node(f"f{level - 1}", [names[k]], [names[k + 1]], domain="local") for k in range(calls)]
        functions.append(helper.make_function("local", f"f{level}", ["x"], ["y"], nodes, OPSETS))
    top = helper.make_node(f"f{levels - 1}", ["x"], ["y"], domain="local") if main_calls else helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [top], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=OPSETS, functions=functions)


@pytest.mark.timeout(30)
def test_exponential_inlining_is_refused_quickly_naming_the_function():
    bomb = _nested(14, 4)  # 4**13 = 67 million Relu nodes once inlined, from ~1.7 KB
    assert len(bomb.SerializeToString()) < 2048
    with pytest.raises(ModelImportError, match=r"model-local function local::f\d+ expands to more than 1,000,000"):
        converter.convert_model(bomb)


@pytest.mark.timeout(30)
def test_cli_refuses_the_inlining_bomb_with_one_line(tmp_path, capsys):
    source = tmp_path / "bomb.onnx"
    onnx.save(_nested(14, 4), source)
    assert cli.main(["convert", str(source), "-o", str(tmp_path / "out.lite"), "--no-verify"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lite convert: error:") and err.count("\n") == 1 and "local::f" in err
    assert not (tmp_path / "out.lite").exists()


@pytest.mark.timeout(30)
def test_nesting_deeper_than_the_limit_is_refused():
    with pytest.raises(ModelImportError, match=f"nest more than {MAX_NESTING} deep"):
        converter.convert_model(_nested(MAX_NESTING + 2, 1))


def test_a_function_calling_itself_is_refused():
    body = [helper.make_node("f", ["x"], ["y"], domain="local")]
    function = helper.make_function("local", "f", ["x"], ["y"], body, OPSETS)
    model = _nested(1, 1)
    model.functions.append(function)
    model.graph.node[0].op_type = "f"
    with pytest.raises(ModelImportError, match="local::f calls itself"):
        converter.convert_model(model)


@pytest.mark.timeout(30)
def test_unused_functions_are_dropped_without_expanding_them():
    lite_model = converter.convert_model(_nested(14, 4, main_calls=False))
    assert [node.op_type for node in lite_model.main.nodes] == ["Relu"]


def test_nested_functions_within_the_budget_inline_and_verify(tmp_path):
    report = converter.convert(_nested(4, 3), tmp_path / "m.lite")
    assert report.before.ops == {"Relu": 27} and report.verification.passed
    assert np.isclose(report.verification.outputs[0].max_rel, 0)


def _fanned(levels: int) -> onnx.ModelProto:
    """f(k) calls f(k+1) twice in a chain, the last is Relu: 2**(levels-1) Relu nodes, every copy
    of a function body with the same (empty) node names and value names."""
    functions = []
    for level in range(levels):
        nodes = [helper.make_node("Relu", ["a"], ["b"])]
        if level + 1 < levels:
            nodes = [helper.make_node(f"f{level + 1}", ["a"], ["t"], domain="local"),
                     helper.make_node(f"f{level + 1}", ["t"], ["b"], domain="local")]
        functions.append(helper.make_function("local", f"f{level}", ["a"], ["b"], nodes, OPSETS))
    graph = helper.make_graph(
        [helper.make_node("f0", ["x"], ["y"], domain="local")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=OPSETS, functions=functions)


@pytest.mark.timeout(30)
def test_copies_sharing_names_are_refused_before_the_quadratic_naming():
    # 4,096 Relu nodes, far under the node limit, but naming the copies apart takes onnx_ir's
    # inliner ~117 million probes (over a minute).
    bomb = _fanned(13)
    assert len(bomb.SerializeToString()) < 1100
    with pytest.raises(ModelImportError, match=rf"copy the node name 'node' 12,286 times; naming the copies apart "
                                               rf"takes 117,415,937 steps, more than the limit of {MAX_NAME_PROBES:,}"):
        converter.convert_model(bomb)


def test_a_function_called_hundreds_of_times_is_within_the_naming_budget():
    lite_model = converter.convert_model(_nested(2, 300))
    assert [node.op_type for node in lite_model.main.nodes] == ["Relu"] * 300
