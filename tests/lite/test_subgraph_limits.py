"""Subgraph bodies nest at most MAX_SUBGRAPH_NESTING deep and sharing does not multiply the model's
size: hostile files are refused by the reader, the same for every engine, before anything recurses
or copies a body."""

from __future__ import annotations

import numpy as np
import pytest

import lite
from lite.cli import main
from lite.errors import ModelFormatError
from lite.format import ir, load, to_bytes
from lite.format.dtypes import DataType
from lite.format.graph_checks import MAX_COPIED_ELEMENTS, MAX_SUBGRAPH_NESTING

FEED = {"cond": np.array(True), "x": np.arange(2, dtype=np.float32)}


def _body(name: str) -> ir.Graph:
    """A graph whose first two tensors are ``cond`` and ``x``, captured from the enclosing graph."""
    tensors = [ir.Tensor("cond", DataType.BOOL, ()), ir.Tensor("x", DataType.FLOAT, (2,))]
    return ir.Graph(name, tensors=tensors, captures=[0, 1])


def _nested_ifs(depth: int, shared: int = 0) -> ir.Model:
    """If bodies nested ``depth`` deep, ending in Identity(x). The last ``shared`` levels name the
    next body in both branches (the file stores it once; ONNX needs a copy per branch); the
    others name it in then_branch and a leaf of their own in else_branch."""
    main = _body("main")
    main.inputs, main.captures = [0, 1], []
    levels = [main, *(_body(f"level{i}") for i in range(1, depth + 1))]
    leaves = []
    for level, graph in enumerate(levels):
        graph.tensors.append(ir.Tensor(f"y{level}", DataType.FLOAT, (2,)))
        graph.outputs = [2]
        if level == depth:
            graph.nodes.append(ir.Node("Identity", [1], [2], name="leaf"))
            continue
        other = level + 1
        if level < depth - shared:
            other = len(levels) + len(leaves)
            leaf = _body(f"else{level}")
            leaf.tensors.append(ir.Tensor("z", DataType.FLOAT, (2,)))
            leaf.nodes.append(ir.Node("Identity", [1], [2], name="leaf"))
            leaf.outputs = [2]
            leaves.append(leaf)
        branches = {"then_branch": ir.Attribute(ir.AttributeType.GRAPH, level + 1),
                    "else_branch": ir.Attribute(ir.AttributeType.GRAPH, other)}
        graph.nodes.append(ir.Node("If", [0], [2], branches, name=f"if{level}"))
    return ir.Model(graphs=levels + leaves, opset_imports={"": 21})


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_nesting_at_the_limit_loads_and_runs_on_every_engine(device):
    model = lite.Model.load(to_bytes(_nested_ifs(MAX_SUBGRAPH_NESTING)), device=device)
    np.testing.assert_array_equal(model.predict(FEED)["y0"], FEED["x"])


def test_nesting_past_the_limit_is_refused_by_the_reader_naming_depth_and_limit():
    with pytest.raises(ModelFormatError, match=rf"'main'\) -> 1 \('level1'\).* nests subgraph bodies 2000 deep, "
                                               rf"more than the limit of {MAX_SUBGRAPH_NESTING}"):
        load(to_bytes(_nested_ifs(2000)))


@pytest.mark.parametrize("device", ["numpy", "cpu", "auto"])
def test_every_engine_refuses_deep_nesting_at_load(device):
    with pytest.raises(ModelFormatError, match=f"nests subgraph bodies {MAX_SUBGRAPH_NESTING + 1} deep"):
        lite.Model.load(to_bytes(_nested_ifs(MAX_SUBGRAPH_NESTING + 1)), device=device)


@pytest.mark.parametrize("command", [["run", "--device", "cpu"], ["bench", "--device", "cpu", "--loops", "1"]])
def test_commands_refuse_deep_nesting_in_one_line(tmp_path, capsys, command):
    path = tmp_path / "deep.lite"
    path.write_bytes(to_bytes(_nested_ifs(500)))
    assert main([command[0], str(path), *command[1:]]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lite {command[0]}: error: ") and err.count("\n") == 1 and "500 deep" in err, err


def test_shared_bodies_that_would_expand_exponentially_are_refused_before_copying():
    bomb = to_bytes(_nested_ifs(20, shared=20))  # a few KB; 2**21 bodies once each branch is a copy
    assert len(bomb) < 8192
    with pytest.raises(ModelFormatError, match=rf"expand the main graph to 4,194,302 graphs and nodes.*"
                                               rf"limit is {MAX_COPIED_ELEMENTS:,} \(graph 20 \('level20'\) "
                                               r"would be copied 1,048,576 times\)"):
        load(bomb)


def test_wide_sharing_past_the_limit_is_refused():
    body = _body("body")
    body.tensors.append(ir.Tensor("y", DataType.FLOAT, (2,)))
    body.nodes.append(ir.Node("Identity", [1], [2]))
    body.outputs = [2]
    main = _nested_ifs(0).main
    same = {"then_branch": ir.Attribute(ir.AttributeType.GRAPH, 1),
            "else_branch": ir.Attribute(ir.AttributeType.GRAPH, 1)}
    for k in range(MAX_COPIED_ELEMENTS // 4 + 1):  # each If adds two copies of two elements
        main.tensors.append(ir.Tensor(f"out{k}", DataType.FLOAT, (2,)))
        main.nodes.append(ir.Node("If", [0], [len(main.tensors) - 1], same))
    with pytest.raises(ModelFormatError, match="would be copied 5,002 times"):
        load(to_bytes(ir.Model(graphs=[main, body], opset_imports={"": 21})))


@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_a_few_shared_bodies_still_load_and_run(device):
    model = lite.Model.load(to_bytes(_nested_ifs(6, shared=6)), device=device)
    np.testing.assert_array_equal(model.predict(FEED)["y0"], FEED["x"])
