"""The --device and --engine options that lite run and lite bench share."""

from __future__ import annotations

import argparse

from lite.engines import ENGINES
from lite.engines.base import DEVICES

ENGINE_CHOICES = ("auto", *ENGINES)


def add_engine_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", choices=DEVICES,
                        help="where to run: auto (the best available), numpy (the numpy engine), or an ONNX Runtime "
                             "device (cpu, cuda, tensorrt); default auto")
    parser.add_argument("--engine", choices=ENGINE_CHOICES, default=None,
                        help=f"run on this engine ({', '.join(ENGINES)}; auto: the fastest measured, as lite bench "
                             "--autotune records it); default: the engine --device names")
