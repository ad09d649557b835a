"""fold_constants on hostile models: output sizes are known before evaluating, within a budget.

``Range(0, 1e10)`` or ``ConstantOfShape([2**20, 2**20])`` with constant inputs would make the
reference implementation allocate gigabytes to terabytes. Such nodes must be declined (left in
the graph, the report saying why) without ever being evaluated.
"""

from __future__ import annotations

import importlib

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from passtools import apply, assert_same_outputs, make_model, ops

import converter
from converter import cli
from converter.errors import ModelImportError
from converter.passes import fold_constants, infer_shapes, run_passes
from converter.passes.output_size import predicted_elements

HEADER = '<ir_version: 8, opset_import: ["" : 17]>'
BIG = 1 << 20
fold_module = importlib.import_module("converter.passes.fold_constants")  # the package exports a function of that name


@pytest.fixture
def evaluated(monkeypatch):
    """The op types fold_constants hands to the reference implementation."""
    calls: list[str] = []
    run = fold_module._run_reference

    def recording(proto, *args):
        calls.append(proto.op_type)
        return run(proto, *args)

    monkeypatch.setattr(fold_module, "_run_reference", recording)
    return calls


BOMBS = {
    "Range": ("int64[?] y", "y = Range (start, limit, delta)",
              {"start": np.array(0, np.int64), "limit": np.array(10**10, np.int64), "delta": np.array(1, np.int64)}),
    "Range float": ("float[?] y", "y = Range (start, limit, delta)",
                    {"start": np.array(0, np.float32), "limit": np.array(1e30, np.float32),
                     "delta": np.array(1e-30, np.float32)}),
    "ConstantOfShape": ("float[?, ?] y", "y = ConstantOfShape (shape)", {"shape": np.array([BIG, BIG], np.int64)}),
    "Expand": ("float[?, ?] y", "y = Expand (x, shape)",
               {"x": np.ones(1, np.float32), "shape": np.array([BIG, BIG], np.int64)}),
    "Tile": ("float[?, ?] y", "y = Tile (x, repeats)",
             {"x": np.ones((2, 2), np.float32), "repeats": np.array([BIG, BIG], np.int64)}),
    "Pad": ("float[?, ?] y", "y = Pad (x, pads)", {"x": np.ones((2, 2), np.float32), "pads": np.array([0, 0, 1 << 40, 0], np.int64)}),
    "OneHot": ("float[?, ?] y", "y = OneHot (indices, depth, values)",
               {"indices": np.array([0, 1], np.int64), "depth": np.array(1 << 40, np.int64),
                "values": np.array([0, 1], np.float32)}),
    "Resize": ("float[?, ?, ?, ?] y", 'y = Resize <mode: string = "nearest"> (x, roi, scales)',
               {"x": np.ones((1, 1, 2, 2), np.float32), "roi": np.array([], np.float32),
                "scales": np.array([1, 1, 1e5, 1e5], np.float32)}),
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(BOMBS))
def test_huge_results_are_declined_without_being_evaluated(name, evaluated):
    output, body, weights = BOMBS[name]
    model = make_model(f"{HEADER}\ng () => ({output}) {{ {body} }}", **weights)
    rewritten, [result] = apply(model, fold_constants)
    assert result.changed == 0 and evaluated == []
    assert ops(rewritten) == [body.split("=")[1].split()[0]]
    [reason] = result.declined
    assert "elements, more than constant folding evaluates" in reason or "cannot be known" in reason, reason


def test_a_declared_output_shape_is_not_trusted(evaluated):
    # onnx.checker would refuse this model (the declared [3] contradicts Range's inputs); the
    # converter does not run the checker, so the declared shape must not stand in for the size.
    model = onnx.parser.parse_model(f"{HEADER}\ng () => (int64[3] y) {{ y = Range (start, limit, delta) }}")
    for name, array in BOMBS["Range"][2].items():
        model.graph.initializer.append(onnx.numpy_helper.from_array(array, name))
    _, result = run_passes(ir.serde.deserialize_model(model), (infer_shapes, fold_constants))
    assert result.changed == 0 and evaluated == []


def test_results_within_the_budget_still_fold():
    model = make_model(f"""{HEADER}
        g (float[4, 6] x) => (float[4, 6] y) {{
            r = Range (start, limit, delta)
            e = Expand (one, shape)
            t = Tile (e, repeats)
            c = ConstantOfShape (row)
            f = Cast <to: int = 1> (r)
            a = Add (t, f)
            b = Add (a, c)
            y = Add (x, b)
        }}""",
        start=np.array(0, np.int64), limit=np.array(6, np.int64), delta=np.array(1, np.int64),
        one=np.ones(1, np.float32), shape=np.array([2, 6], np.int64), repeats=np.array([2, 1], np.int64),
        row=np.array([1, 6], np.int64),
    )
    rewritten, [result] = apply(model, fold_constants)
    assert {"Range", "Expand", "Tile", "ConstantOfShape", "Cast"} <= set(result.counts)
    assert ops(rewritten) == ["Add"]
    assert_same_outputs(model, rewritten)


@pytest.mark.parametrize(
    ("op", "inputs", "expected"),
    [
        ("Range", [np.array(10, np.int64), np.array(-3, np.int64), np.array(-4, np.int64)], [4]),
        ("Range", [np.array(0.0, np.float32), np.array(1.0, np.float32), np.array(0.3, np.float32)], [4]),
        ("Range", [np.array(5, np.int64), np.array(0, np.int64), np.array(1, np.int64)], [0]),
        ("Range", [np.array(0, np.int64), np.array(5, np.int64), np.array(0, np.int64)], None),
        ("Expand", [np.ones((3, 1), np.float32), np.array([2, 1, 4], np.int64)], [24]),
        ("Expand", [np.ones((3, 2), np.float32), np.array([4], np.int64)], None),
        ("Tile", [np.ones((2, 3), np.float32), np.array([1 << 40, 2], np.int64)], [12 << 40]),
        ("ConstantOfShape", [np.array([3, -1], np.int64)], None),
        ("Add", [np.ones((3, 1), np.float32), np.ones((1, 1 << 20), np.float32)], [3 << 20]),  # inferred by ONNX
    ],
)
def test_predicted_sizes(op, inputs, expected):
    names = [f"i{k}" for k in range(len(inputs))]
    proto = helper.make_node(op, names, ["o0"])
    sizes, reason = predicted_elements(proto, dict(zip(names, inputs)), 17)
    assert sizes == expected and (reason is None) == (expected is not None)


def _range_bomb() -> onnx.ModelProto:
    return make_model(f"{HEADER}\ng () => (int64[?] y) {{ y = Range (start, limit, delta) }}", **BOMBS["Range"][2])


@pytest.mark.timeout(60)
def test_convert_keeps_the_node_and_skips_the_verification_it_cannot_run(tmp_path):
    lite_model = converter.convert_model(_range_bomb())
    assert [node.op_type for node in lite_model.main.nodes] == ["Range"]
    report = converter.convert(_range_bomb(), tmp_path / "m.lite")
    # Skipped from the sizes alone, on every machine: ONNX Runtime would allocate the 80 GB (a large
    # machine fills its memory for minutes; a small one fails at once).
    assert report.verification.skipped
    assert "builds a tensor of 10,000,000,000 elements from its constants" in report.verification.reason
    assert [p.name for p in tmp_path.iterdir()] == ["m.lite"]


@pytest.mark.timeout(60)
def test_cli_reports_the_bomb_in_one_line(tmp_path, capsys):
    source = tmp_path / "bomb.onnx"
    onnx.save(_range_bomb(), source)
    assert cli.main(["convert", str(source), "-o", str(tmp_path / "m.lite")]) == 0
    captured = capsys.readouterr()
    assert "verification skipped: the original model builds a tensor of" in captured.out and not captured.err
    assert cli.main(["convert", str(source), "-o", str(tmp_path / "m.lite"), "--no-verify", "-q"]) == 0


@pytest.mark.timeout(60)
def test_an_initializer_declaring_more_elements_than_its_data_is_named():
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 40])  # 4 TiB, no data
    graph = helper.make_graph(
        [helper.make_node("Relu", ["w"], ["y"])], "g", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match=r"tensor 'w' .*declares 1,099,511,627,776 elements but holds no data"):
        converter.convert_model(model)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("name", list(BOMBS))
def test_the_check_declines_a_model_whose_constants_make_a_huge_tensor(name, tmp_path):
    output, body, weights = BOMBS[name]
    model = make_model(f"{HEADER}\ng () => ({output}) {{ {body} }}", **weights)
    report = converter.convert(model, tmp_path / "m.lite")
    assert report.verification.skipped
    assert "elements from its constants" in report.verification.reason and "too large" in report.verification.reason


def test_a_quantized_weight_stays_quantized(tmp_path):
    # A QDQ model as ONNX Runtime's quantizer writes it: DequantizeLinear of an int8 weight. As a
    # float initializer the weight took 4x the file and ONNX Runtime ran the layer in float.
    from onnx import numpy_helper

    import lite

    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.integers(-127, 128, (64, 64)).astype(np.int8), "w_q"),
             numpy_helper.from_array(np.array(0.01, np.float32), "w_s"), numpy_helper.from_array(np.array(0, np.int8), "w_z")]
    nodes = [helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_z"], ["w"]), helper.make_node("MatMul", ["x", "w"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])], inits)
    report = converter.convert(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), tmp_path / "m.lite")
    assert report.verification.status == "passed"
    model = lite.Model.load(tmp_path / "m.lite", device="numpy")
    assert "DequantizeLinear" in {node.op_type for node in model.ir.main.nodes}
    weights = [tensor.data for tensor in model.ir.main.tensors if tensor.data is not None and tensor.data.size == 64 * 64]
    assert [w.dtype for w in weights] == [np.int8]
