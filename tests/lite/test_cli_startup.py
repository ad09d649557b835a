"""The `lite` command starts at the cost of `import lite`: only the command being run is loaded,
and a command whose extra is missing says which one in a line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lite import cli

_PROBE = """
import sys
from lite.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
heavy = sorted(m for m in ("onnx", "onnx_ir", "sympy", "onnxruntime", "grpc", "converter.api", "serving.grpc")
               if m in sys.modules)
print("HEAVY", heavy)
"""


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["inspect", "--help"], ["convert", "--help"]])
def test_help_and_version_import_nothing_heavy(argv):
    out = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv)], capture_output=True, text=True,
                         check=True).stdout
    assert "HEAVY []" in out, out[-500:]


def test_help_lists_every_contributed_command(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    listing = capsys.readouterr().out
    for name, contributed in cli.CONTRIBUTED.items():
        assert name in listing and (contributed.help[:30] in " ".join(listing.split()) or "not installed" in listing)


def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_installed", lambda module: module != "grpc")
    assert cli.main(["serve", "--repository", "models"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'lite-toolchain[serve]'" in err and "grpc" in err


def test_the_command_is_the_first_word_that_is_not_an_option():
    assert cli._command_of(["--version"]) is None
    assert cli._command_of(["convert", "m.onnx", "-o", "m.lite"]) == "convert"
    assert cli._command_of([]) is None


def test_python_dash_m_lite_is_the_lite_command():
    # Where the scripts folder is not on PATH (an edge device's user install).
    done = subprocess.run([sys.executable, "-m", "lite", "--version"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("lite ")
