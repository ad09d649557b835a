#!/usr/bin/env python3
"""Start-up of the `lite` command against `python -c "import lite"`, in interleaved rounds.

Each round runs every command once in a fresh process; the median over rounds is printed with
its difference from `import lite` (the floor: every command imports the runtime).

    python bench/cli_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _model(folder: Path) -> Path:
    sys.path.insert(0, str(ROOT))
    from lite.format import GraphBuilder, save

    builder = GraphBuilder("identity")
    x = builder.input("x", np.float32, ["N", 4])
    builder.output(builder.node("Relu", [x], outputs=["y"]), np.float32, ["N", 4])
    path = folder / "model.lite"
    save(builder.build(), str(path))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds; each runs every command once (default 7)")
    args = parser.parse_args()
    lite = shutil.which("lite")
    if lite is None:
        print("the lite command is not on PATH: pip install -e .", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        model = _model(Path(folder))
        commands = {
            'python -c "import lite"': [sys.executable, "-c", "import lite"],
            "lite --version": [lite, "--version"],
            "lite --help": [lite, "--help"],
            "lite inspect MODEL": [lite, "inspect", str(model)],
            "lite convert --help": [lite, "convert", "--help"],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.rounds):
            for name, command in commands.items():
                started = time.perf_counter()
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=os.environ)
                times[name].append(time.perf_counter() - started)
    floor = statistics.median(times['python -c "import lite"'])
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<28} {median:6.3f} s   (+{median - floor:5.3f} s over import lite)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
