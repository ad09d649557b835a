"""The `lite` command: inspect, errors without tracebacks (damaged models, pipes), contributed subcommands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lite.cli import main
from lite.format import save
from lite.format.writer import ALIGNMENT
from tests.format.models import conv_qdq_model
from tests.lite.damaged_models import damaged_cases, damaged_model
from tests.lite.test_model import matmul_model


def run_lite(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lite.cli", *args], check=False, capture_output=True, text=True)


def test_inspect_table(tmp_path, capsys):
    path = matmul_model(tmp_path)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "format 2.0" in out
    assert "x                        FLOAT      [N, 4]" in out
    assert "MatMul" in out
    assert "parameters: 8 in 32 B" in out
    assert "labels" in out


def test_inspect_json(tmp_path, capsys):
    path = matmul_model(tmp_path)
    assert main(["inspect", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inputs"] == [{"name": "x", "dtype": "FLOAT", "shape": ["N", 4]}]
    assert summary["ops"] == {"MatMul": 1}
    assert summary["parameters"]["by_dtype"]["FLOAT"] == {"tensors": 1, "elements": 8, "bytes": 32}
    assert summary["file_size"] == path.stat().st_size


def test_inspect_counts_what_an_int8_file_stores(tmp_path, capsys):
    """A quantized weight is one stored tensor: the reader's explicit scale and zero-point
    constants are not parameters of the file, and the file's bytes add up to its size."""
    path = tmp_path / "conv.lite"
    save(conv_qdq_model(), path)
    assert main(["inspect", str(path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["parameters"]["by_dtype"] == {"INT8": {"tensors": 1, "elements": 54, "bytes": 54},
                                                 "INT32": {"tensors": 1, "elements": 3, "bytes": 12}}
    stored = summary["stored"]
    assert stored["weights"] == 54 + 12
    assert stored["structure"] + stored["weights"] + stored["alignment"] == path.stat().st_size
    assert 0 <= stored["alignment"] < 2 * ALIGNMENT


def test_inspect_graph_dot(tmp_path):
    path = matmul_model(tmp_path)
    dot = tmp_path / "g.dot"
    assert main(["inspect", str(path), "--graph", str(dot)]) == 0
    text = dot.read_text()
    assert text.startswith("digraph lite {") and '"MatMul"' in text


@pytest.mark.parametrize("name, message", [("g.txt", "use a .dot, .svg, .png or .pdf"),
                                           ("missing/g.dot", "does not exist")])
def test_inspect_checks_the_graph_name_before_printing(tmp_path, capsys, name, message):
    path = matmul_model(tmp_path)
    assert main(["inspect", str(path), "--graph", str(tmp_path / name)]) == 1
    printed = capsys.readouterr()
    assert printed.out == "" and message in printed.err and printed.err.count("\n") == 1


@pytest.mark.parametrize("content", [b"", b"garbage", b"\0" * 100])
def test_invalid_file_gives_one_line_error_and_nonzero_exit(tmp_path, content):
    bad = tmp_path / "bad.lite"
    bad.write_bytes(content)
    result = run_lite("inspect", str(bad))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("lite inspect: error: ")


def test_missing_file(tmp_path):
    result = run_lite("inspect", str(tmp_path / "nope.lite"))
    assert result.returncode == 1
    assert "model file not found" in result.stderr


def test_help_lists_commands():
    result = run_lite("--help")
    assert result.returncode == 0
    for command in ("inspect", "convert", "serve", "quickstart"):
        assert command in result.stdout


def _damaged_model(tmp_path, **options):
    path = tmp_path / "damaged.lite"
    path.write_bytes(damaged_model(**options))
    return path


@pytest.mark.parametrize("case", list(damaged_cases()))
@pytest.mark.parametrize("command", [["run"], ["inspect", "--graph", "GRAPH"], ["bench", "--loops", "1", "--warmup", "0"]])
def test_damaged_opsets_and_fused_activations_are_one_line_errors(tmp_path, capsys, case, command):
    options, expected = damaged_cases()[case]
    path = _damaged_model(tmp_path, **options)
    arguments = [str(tmp_path / "g.dot") if a == "GRAPH" else a for a in command[1:]]
    if command[0] == "run":
        np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
        arguments += ["-i", str(tmp_path / "x.npy")]
    assert main([command[0], str(path), *arguments]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"lite {command[0]}: error: ") and err.count("\n") == 1 and expected in err, err


def test_damaged_model_gives_no_traceback_from_the_command_line(tmp_path):
    path = _damaged_model(tmp_path, opset=1 << 40)
    result = run_lite("run", str(path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("lite run: error: ") and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", [["inspect"], ["run"], ["bench", "--loops", "1"], ["run", "INPUT"]])
def test_pipes_are_refused_without_blocking(tmp_path, capsys, command):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    if command[-1] == "INPUT":  # a model that loads, and an --input that is a pipe
        arguments = ["run", str(matmul_model(tmp_path)), "-i", f"x={fifo}"]
    else:
        arguments = [command[0], str(fifo), *command[1:]]
    assert main(arguments) == 1
    err = capsys.readouterr().err
    assert "not a regular file" in err and err.count("\n") == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", [["inspect"], ["bench", "--device", "numpy", "--profile", "--loops", "1"]])
def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path, command):
    """``lite inspect m.lite | head``: the pipe's reader closes it before the command writes."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # before the command starts: its first write meets a broken pipe
    try:
        result = subprocess.run([sys.executable, "-m", "lite.cli", command[0], str(matmul_model(tmp_path)),
                                 *command[1:]], stdout=write_end, stderr=subprocess.PIPE, text=True, check=False)
    finally:
        os.close(write_end)
    assert result.stderr == "" and result.returncode == 141


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["empty", "pipe", "directory"])
def test_convert_refuses_empty_files_pipes_and_folders(tmp_path, capsys, kind):
    source = tmp_path / "model.onnx"
    if kind == "empty":
        source.write_bytes(b"")
    elif kind == "pipe":
        os.mkfifo(source)
    else:
        source.mkdir()
    assert main(["convert", str(source), "-o", str(tmp_path / "out.lite")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("lite convert: error: ") and err.count("\n") == 1
    assert {"empty": "empty", "pipe": "not a regular file", "directory": "directory"}[kind] in err
    assert not (tmp_path / "out.lite").exists()


@pytest.mark.parametrize("op_type", ["Mat\rMul", "Relu\x00\x00\x0e", "Re\x1b[2Jlu"])
def test_names_with_control_characters_stay_on_one_escaped_line(tmp_path, op_type):
    """The lite-cli fuzzer (seed 0) mutated op types to hold a carriage return or NULs; the
    numpy engine's refusal then printed them raw, splitting or garbling the error line."""
    from lite.format import GraphBuilder, save

    b = GraphBuilder("g")
    x = b.input("x", np.float32, [2])
    y = b.node(op_type, [x], outputs=["y"])
    b.output(y, np.float32, [2])
    save(b.build(), tmp_path / "m.lite")
    np.savez(tmp_path / "in.npz", x=np.ones(2, np.float32))
    result = run_lite("run", str(tmp_path / "m.lite"), "--device", "numpy", "--input", str(tmp_path / "in.npz"))
    assert result.returncode == 1
    lines = result.stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].isprintable(), repr(result.stderr)
    assert "no kernel for this op type" in lines[0]
    assert ascii(op_type)[1:-1] in lines[0]


def test_running_out_of_memory_is_one_error_line(tmp_path, capsys, monkeypatch):
    """The lite-cli fuzzer (seed 0, index 39364): a Conv padded by 2**19 asked for a 1.5 M-wide
    output, and under the worker's memory cap an allocation outside the engine raised a bare
    MemoryError. The command now says so in one line, and `lite run` summarizes outputs without a
    float64 copy of each."""
    import lite

    path = matmul_model(tmp_path)
    np.savez(tmp_path / "in.npz", x=np.ones((1, 4), np.float32))

    def exhausted(self, inputs, *args, **kwargs):
        raise MemoryError("Unable to allocate 12.0 MiB for an array with shape (1, 1572876) and data type float64")

    monkeypatch.setattr(lite.Model, "predict", exhausted)
    assert main(["run", str(path), "--input", str(tmp_path / "in.npz")]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith("lite run: error: out of memory: Unable to allocate") and "\n" not in error


@pytest.mark.parametrize("redirect", ["stdout-closed", "stdin-closed", "ascii-stdout"])
def test_a_command_runs_whatever_standard_streams_its_caller_left(tmp_path, redirect):
    """A closed stdout left sys.stdout None (a traceback after the work was done); a closed stdin
    gave its descriptor to the next file opened (lite serve's event loop, aborting at exit); an
    ASCII-only stdout could not print the names or the arrows of a report."""
    path = matmul_model(tmp_path).rename(tmp_path / "m\u00e9t\u00e9o \u2192 1.lite")
    environment = {**os.environ, "PYTHONPATH": os.getcwd()}
    if redirect == "ascii-stdout":
        environment.update(PYTHONUTF8="0", PYTHONCOERCECLOCALE="0", LC_ALL="C", PYTHONIOENCODING="ascii")
    command = [sys.executable, "-c", "import sys; from lite.cli import main; sys.exit(main())", "inspect", str(path)]
    if redirect == "ascii-stdout":
        result = subprocess.run(command, env=environment, capture_output=True)
        assert result.returncode == 0, result.stderr.decode()
        assert b"o \\udce2\\udc86\\udc92 1.lite" in result.stdout and b"ops:" in result.stdout  # as escapes
        return
    closed = "1" if redirect == "stdout-closed" else "0"
    shell = " ".join(f"'{part}'" for part in command) + f" {closed}>&-"
    result = subprocess.run(["bash", "-c", shell], env=environment, capture_output=True)
    assert result.returncode == 0, result.stderr.decode()
    assert b"Traceback" not in result.stderr
