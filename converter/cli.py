"""``lite convert``: the converter's subcommand of the one ``lite`` command.

Contributed through the ``lite.commands`` entry point (pyproject.toml): ``register(subparsers)``
adds the subparser; its handler returns the exit code. Errors print as one line (no traceback):
exit 2 for bad options, 3 for unsupported ops, 4 for failed verification, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from converter.api import convert
from converter.errors import ConverterError, InvalidOptionError, UnsupportedOpsError, VerificationError
from converter.importer import parse_input_shape


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "convert",
        help="convert an ONNX model to .lite (or an optimized .onnx)",
        description="Import an ONNX model, optimize it (BatchNormalization folding, constant folding, "
        "activation fusion...) and write .lite or, for ONNX Runtime, .onnx.",
    )
    parser.add_argument("model", help="source model (.onnx)")
    parser.add_argument("-o", "--output", required=True, help="output path; the extension (.lite or .onnx) picks the format")
    parser.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME:D0,D1,...",
        help="fix an input's shape, e.g. input:1,3,224,224 (repeatable)",
    )
    parser.add_argument("--dynamic-batch", action="store_true", help="make the leading dimension of inputs symbolic")
    parser.add_argument("--fp16", action="store_true", help="store float weights as float16")
    parser.add_argument("--fp16-io", action="store_true", help="also make float graph inputs/outputs float16 (implies --fp16)")
    verify = parser.add_mutually_exclusive_group()
    verify.add_argument("--verify", dest="verify", action="store_true", default=None, help="compare with ONNX Runtime (default when installed)")
    verify.add_argument("--no-verify", dest="verify", action="store_false", help="skip the numerical comparison")
    parser.add_argument("--rtol", type=float, default=None, help="verification tolerance (default 1e-4; 1e-2 with --fp16)")
    parser.add_argument("--allow-custom", action="store_true", help="keep unsupported ops as custom nodes instead of failing")
    parser.add_argument("--no-optimize", dest="optimize", action="store_false", help="translate only; run no passes")
    parser.add_argument("--report", metavar="REPORT.json", help="write the full conversion report as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success")
    parser.set_defaults(handler=run)
    return parser


def run(args: argparse.Namespace) -> int:
    try:
        shapes = dict(parse_input_shape(text) for text in args.input_shape)
        report = convert(
            args.model,
            args.output,
            input_shapes=shapes,
            dynamic_batch=args.dynamic_batch,
            fp16=args.fp16,
            fp16_io=args.fp16_io,
            verify=args.verify,
            allow_custom=args.allow_custom,
            optimize=args.optimize,
            report_path=args.report,
            rtol=args.rtol,
        )
    except InvalidOptionError as err:
        _error(err)
        return 2
    except UnsupportedOpsError as err:
        _error(err)
        return 3
    except VerificationError as err:
        _error(err)
        return 4
    except ConverterError as err:
        _error(err)
        return 1
    if not args.quiet:
        print(report.table())
    return 0


def _error(err: Exception) -> None:
    lines = str(err).splitlines() or [type(err).__name__]
    # The first line is the message; an unsupported-op listing follows it, one node per line.
    print(f"lite convert: error: {lines[0]}", file=sys.stderr)
    for line in lines[1:]:
        print(line, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run ``lite convert`` on its own (for environments without the ``lite`` command)."""
    parser = argparse.ArgumentParser(prog="lite")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
