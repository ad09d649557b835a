"""`lite run` and `lite bench` on a small convolutional model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from lite.cli import main
from lite.format import GraphBuilder, save


def _cnn(path, image_dims):
    rng = np.random.default_rng(0)
    b = GraphBuilder("cnn", opset=17)
    x = b.input("x", np.float32, ["N", 3, *image_dims])
    y = b.node("Conv", [x, b.constant("w", rng.standard_normal((4, 3, 3, 3)).astype(np.float32))], pads=[1, 1, 1, 1])
    y = b.node("GlobalAveragePool", [y])
    y = b.node("Flatten", [y], outputs=["logits"])
    b.output(y, np.float32, ["N", 4])
    save(b.build(), path)
    return path


@pytest.fixture
def cnn(tmp_path):
    return _cnn(tmp_path / "cnn.lite", [8, 8])


def test_run_writes_outputs(cnn, tmp_path, capsys):
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(cnn), "--input", f"x={tmp_path / 'x.npy'}", "-o", str(tmp_path / "out")]) == 0
    assert "logits: float32[2, 4]" in capsys.readouterr().out
    assert np.load(tmp_path / "out" / "logits.npy").shape == (2, 4)


def test_run_gives_outputs_whose_names_share_a_file_name_files_of_their_own(tmp_path, capsys):
    """Outputs 'a/b' and 'a_b' both map to a_b.npy: the second is written to a_b-2.npy, not over
    the first, and the line printed for each says where."""
    b = GraphBuilder("two", opset=17)
    x = b.input("x", np.float32, [3])
    b.output(b.node("Neg", [x], outputs=["a/b"]), np.float32, [3])
    b.output(b.node("Relu", [x], outputs=["a_b"]), np.float32, [3])
    save(b.build(), tmp_path / "two.lite")
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    assert main(["run", str(tmp_path / "two.lite"), "--input", str(tmp_path / "x.npy"), "-o", str(out),
                 "--device", "numpy"]) == 0
    printed = capsys.readouterr().out
    assert f"-> {out / 'a_b.npy'}" in printed and f"-> {out / 'a_b-2.npy'}" in printed
    np.testing.assert_array_equal(np.load(out / "a_b.npy"), -x)
    np.testing.assert_array_equal(np.load(out / "a_b-2.npy"), np.maximum(x, 0))


def test_run_bare_file_and_npz(cnn, tmp_path):
    x = np.zeros((1, 3, 8, 8), np.float32)
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "in.npz", x=x)
    assert main(["run", str(cnn), "--input", str(tmp_path / "x.npy")]) == 0
    assert main(["run", str(cnn), "--input", str(tmp_path / "in.npz")]) == 0


def test_run_reports_bad_inputs_in_one_line(cnn, tmp_path, capsys):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float64))
    assert main(["run", str(cnn), "--input", f"x={tmp_path / 'x.npy'}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lite run: error: ") and "dtype float64" in err


def test_bench_reports_latency_memory_profile_and_comparison(cnn, tmp_path, capsys):
    report = tmp_path / "bench.json"
    code = main(["bench", str(cnn), "--device", "numpy", "--batch", "3", "--loops", "5", "--warmup", "1",
                 "--memory", "--profile", "--compare", "numpy", "--json", str(report)])
    assert code == 0
    out = capsys.readouterr().out
    assert "latency ms: min" in out and "per op type" in out and "top-1 agreement 100.00%" in out
    result = json.loads(report.read_text())
    assert result["batch"] == 3 and result["inputs"] == {"x": [3, 3, 8, 8]}
    assert result["latency_ms"]["min"] <= result["latency_ms"]["median"] <= result["latency_ms"]["max"]
    # Peak while GlobalAveragePool runs: the caller's input (3*3*8*8, never freed), the Conv
    # output it reads (3*4*8*8) and its own output (3*4) floats.
    assert result["memory"]["peak_live_bytes"] == 4 * (3 * 3 * 64 + 3 * 4 * 64 + 3 * 4)
    assert {e["op_type"] for e in result["profile"]["op_types"]} == {"Conv", "GlobalAveragePool", "Flatten"}
    assert result["compare"]["outputs"]["logits"]["max_abs_error"] == 0.0


def test_bench_rejects_bad_arguments(cnn, capsys):
    assert main(["bench", str(cnn), "--loops", "0"]) == 1
    assert "--loops" in capsys.readouterr().err


@pytest.mark.parametrize("target", ["/", ".", "folder", "missing/bench.json"])
def test_bench_refuses_a_json_path_it_cannot_write_before_measuring(cnn, tmp_path, capsys, monkeypatch, target):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder").mkdir()
    measured = []
    monkeypatch.setattr("lite.commands.bench.time_runs", lambda *args: measured.append(args))
    assert main(["bench", str(cnn), "--device", "numpy", "--loops", "1", "--json", target]) == 1
    assert "lite bench: error:" in capsys.readouterr().err
    assert not measured and sorted(p.name for p in tmp_path.iterdir()) == ["cnn.lite", "folder"]


def test_bench_header_says_which_shapes_ran(tmp_path, capsys):
    model = _cnn(tmp_path / "open.lite", ["H", "W"])
    assert main(["bench", str(model), "--device", "numpy", "--loops", "1", "--warmup", "0"]) == 0
    out = capsys.readouterr().out
    # No sizes recorded: an image a Conv reads gets 224 pixels (lite.sample_inputs).
    assert "inputs: x float32[1, 3, 224, 224] (N=1, H=224, W=224)" in out and "--shape NAME:D1,D2,... sets them" in out
    assert main(["bench", str(model), "--device", "numpy", "--loops", "1", "--warmup", "0",
                 "--shape", "x:2,3,16,12"]) == 0
    out = capsys.readouterr().out
    assert "batch 2," in out and "inputs: x float32[2, 3, 16, 12] (N=2, H=16, W=12)" in out
    assert "sets them" not in out


@pytest.mark.parametrize("shape, message", [
    ("bogus:1,3,8,8", "no input 'bogus'; its inputs: x"),
    ("x:1,3,8", "rank 3, the model's input has rank 4 (x[N, 3, 8, 8])"),
    ("x:1,4,8,8", "dimension 1 is fixed at 3 by the model, 4 given"),
])
def test_bench_refuses_a_shape_the_model_cannot_take(cnn, capsys, shape, message):
    assert main(["bench", str(cnn), "--loops", "1", "--shape", shape]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize("given", [["--shape", "x:1,3,8,8"], ["--input", "INPUT"]])
def test_bench_refuses_a_batch_that_contradicts_the_given_shape(cnn, tmp_path, capsys, given):
    np.save(tmp_path / "x.npy", np.zeros((1, 3, 8, 8), np.float32))
    given = [str(tmp_path / "x.npy") if word == "INPUT" else word for word in given]
    assert main(["bench", str(cnn), "--loops", "1", "--batch", "4", *given]) == 1
    err = capsys.readouterr().err
    assert "--batch 4 and" in err and "disagree" in err
    assert main(["bench", str(cnn), "--device", "numpy", "--loops", "1", "--warmup", "0", "--batch", "1",
                 *given]) == 0


@pytest.mark.parametrize("option", [["--duration", "nan"], ["--duration", "-1"], ["--concurrency", "0"]])
def test_bench_refuses_a_duration_or_concurrency_that_cannot_be(cnn, capsys, option):
    assert main(["bench", str(cnn), *option]) == 1
    assert "--concurrency must be >= 1 and --duration a number of seconds > 0" in capsys.readouterr().err


def test_profile_names_the_fused_kernel_a_step_runs(tmp_path):
    """A residual block's convolutions run in the step of its final Add: the profile said "Add"
    for the whole block's time, and sent users after the wrong op."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import converter

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.2, name)
               for name, shape in (("dw", (24, 1, 3, 3)), ("dwb", (24,)), ("pw", (24, 24, 1, 1)), ("pwb", (24,)))]
    nodes = [helper.make_node("Conv", ["x", "dw", "dwb"], ["a"], group=24, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "pw", "pwb"], ["b"]), helper.make_node("Add", ["b", "x"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 24, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 24, 16, 16])], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, tmp_path / "block.onnx")
    converter.convert(str(tmp_path / "block.onnx"), tmp_path / "block.lite", verify=False)
    report = tmp_path / "bench.json"
    assert main(["bench", str(tmp_path / "block.lite"), "--device", "numpy", "--loops", "2", "--warmup", "1",
                 "--profile", "--json", str(report)]) == 0
    labels = {e["op_type"] for e in json.loads(report.read_text())["profile"]["op_types"]}
    assert "Add [ConvChain]" in labels and "Add" not in labels, labels
