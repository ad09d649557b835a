"""Every flag of every `lite` subcommand says what it does, and run/bench take --engine."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from lite import cli
from lite.format import GraphBuilder, save

COMMANDS = ["inspect", "run", "bench", "convert", "serve", "quickstart"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_has_help_text(command):
    parser = cli.build_parser(command)
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    sub = subparsers.choices[command]
    if command in parser.unavailable:
        pytest.skip(f"{command}: its extra is not installed here")
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        text = action.help or ""
        assert text and not text.startswith("env "), f"lite {command} {action.option_strings or action.dest}"


def test_run_and_bench_take_an_engine(tmp_path, capsys):
    builder = GraphBuilder("relu")
    x = builder.input("x", np.float32, ["N", 4])
    builder.output(builder.node("Relu", [x], outputs=["y"]), np.float32, ["N", 4])
    model = tmp_path / "m.lite"
    save(builder.build(), str(model))
    np.save(tmp_path / "x.npy", np.array([[-1, 2, -3, 4]], np.float32))
    assert cli.main(["run", str(model), "-i", f"x={tmp_path / 'x.npy'}", "--engine", "numpy",
                     "-o", str(tmp_path / "out")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), [[0, 2, 0, 4]])
    assert cli.main(["bench", str(model), "--engine", "numpy", "--loops", "2", "--warmup", "0"]) == 0
    assert "on numpy" in capsys.readouterr().out


def test_compile_without_torch_names_the_extra_instead_of_a_traceback(monkeypatch, capsys):
    # The edge install (numpy and flatbuffers) listed compile and failed with ModuleNotFoundError.
    real = cli._installed
    monkeypatch.setattr(cli, "_installed", lambda module: module != "torch" and real(module))
    assert cli.main(["compile", "model.lite", "--batch-sizes", "1"]) == 2
    assert "pip install 'lite-toolchain[torch]'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "compile" in capsys.readouterr().out
