"""The --device, --engine and --custom-op-library options that lite run and lite bench share."""

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
    parser.add_argument("--custom-op-library", action="append", default=[], metavar="PATH",
                        help="a shared library of custom ops for ONNX Runtime (onnxruntime-extensions' "
                             "get_library_path()), registered with every session; repeatable")


def library_options(args: argparse.Namespace) -> dict:
    """Model.load's keyword for the custom op libraries given, if any."""
    if not args.custom_op_library:
        return {}
    if args.device == "numpy":
        raise ValueError("--custom-op-library registers libraries with ONNX Runtime; the numpy engine runs custom "
                         "ops from lite.CustomOps kernels: use --device cpu, cuda or auto")
    return {"custom_op_libraries": list(args.custom_op_library)}
