"""``lite convert``: the converter's subcommand of the one ``lite`` command.

Contributed through the ``lite.commands`` entry point (pyproject.toml): ``register(subparsers)``
adds the subparser; its handler returns the exit code. Errors print as one line (no traceback):
exit 2 for bad options, 3 for unsupported ops, 4 for failed verification, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from converter.errors import ConverterError, InvalidOptionError, UnsupportedOpsError, VerificationError

# The converter itself (onnx, onnx_ir) is imported by the handler: `lite --help` and `lite convert
# --help` do not pay for it.


def register(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "convert",
        help="convert an ONNX or MindSpore model to .lite (or an optimized .onnx)",
        description="Import an ONNX model, optimize it (BatchNormalization folding, constant folding, "
        "activation fusion...) and write .lite or, for ONNX Runtime, .onnx.",
        epilog="exit status: 0 written (also when verification could not run: the report says why); "
        "1 the model or a file could not be read or written; 2 an option or argument is wrong; "
        "3 the model has ops lite cannot run (--allow-custom keeps them as custom ops); "
        "4 verification found an output that differs from the original's, or ONNX Runtime refuses the "
        "int8 model where it runs the float one. "
        "The output file exists only after status 0.",
    )
    parser.add_argument("model", nargs="?", help="source model: .onnx or MindSpore .mindir")
    mindspore = parser.add_argument_group("MindSpore inputs (docs/mindspore.md)")
    mindspore.add_argument("--ckpt", metavar="NET.ckpt", help="a checkpoint to convert with --network (instead of MODEL)")
    mindspore.add_argument(
        "--network",
        metavar="MODULE:CALLABLE",
        help="builds the checkpoint's network with the train core, e.g. train.models:LeNet5; "
        "--input-shape D0,D1,... gives the sample input's shape",
    )
    mindspore.add_argument("--dec-key", metavar="HEX", help="key of an encrypted .mindir/.ckpt, as hex")
    mindspore.add_argument("--dec-mode", choices=["AES-GCM", "AES-CBC", "SM4-CBC"], help="its encryption mode")
    parser.add_argument("-o", "--output", required=True, help="output path; the extension (.lite or .onnx) picks the format")
    parser.add_argument(
        "--input-shape",
        action="append",
        default=[],
        metavar="NAME:D0,D1,...",
        help="fix an input's shape, e.g. input:1,3,224,224 (repeatable): sets its symbolic dimensions; "
        "a size the model fixes must be given as is",
    )
    parser.add_argument("--dynamic-batch", action="store_true", help="make the leading dimension of inputs symbolic")
    parser.add_argument("--fp16", action="store_true", help="store float weights as float16")
    parser.add_argument("--fp16-io", action="store_true", help="also make float graph inputs/outputs float16 (implies --fp16)")
    verify = parser.add_mutually_exclusive_group()
    verify.add_argument("--verify", dest="verify", action="store_true", default=None, help="compare with ONNX Runtime (default when installed)")
    verify.add_argument("--no-verify", dest="verify", action="store_false", help="skip the numerical comparison")
    parser.add_argument("--rtol", type=float, default=None,
                        help="verification tolerance, relative to each output's peak (default 1e-4; 1e-2 with --fp16)")
    parser.add_argument("--atol", type=float, default=None,
                        help="verification's absolute floor, for outputs near zero (default 1e-6; 1e-3 with --fp16)")
    parser.add_argument("--verify-data", metavar="FILE.npz|DIR", default=None,
                        help="verify on these inputs (a .npz of input arrays, or a folder as for --calib) "
                             "instead of inputs synthesized from the graph")
    parser.add_argument("--allow-custom", action="store_true", help="keep unsupported ops as custom nodes instead of failing")
    parser.add_argument("--custom-op-library", metavar="LIBRARY.so", action="append", default=[],
                        help="a shared library of custom ops for ONNX Runtime (e.g. onnxruntime-extensions'); "
                             "verification runs the original and the converted model with it (repeatable)")
    parser.add_argument("--no-optimize", dest="optimize", action="store_false", help="translate only; run no passes")
    parser.add_argument("--report", metavar="REPORT.json", help="write the full conversion report as JSON")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing on success, but a warning when --quant quantized no node")
    _add_quantization_options(parser)
    parser.set_defaults(handler=run)
    return parser


def _add_quantization_options(parser: argparse.ArgumentParser) -> None:
    """``--quant`` and friends (docs/quantization.md)."""
    from converter.quantize.config import CALIBRATION_METHODS, MODES

    group = parser.add_argument_group("quantization (docs/quantization.md)")
    group.add_argument("--quant", choices=MODES, help="int8 (static, needs --calib), int8-dynamic, int8-weight or fp16")
    group.add_argument("--calib", metavar="DATA",
                       help="calibration data for --quant int8: a folder of .npy/.npz files or of images")
    # The tuning options default to None (the defaults below, in QuantizeOptions and QuantConfig):
    # given without the mode they tune, they are an error rather than ignored.
    group.add_argument("--calib-method", choices=CALIBRATION_METHODS, help="how --quant int8 chooses activation ranges "
                       "(default minmax)")
    group.add_argument("--calib-size", type=int, metavar="N", help="calibration samples to read at most (default 256)")
    group.add_argument("--calib-whole", action="store_true", default=None,
                       help="each --calib/--eval array is one sample, fed as given: for inputs without a batch axis "
                            "(a [time, features] sequence), whose rows are not samples")
    channel = group.add_mutually_exclusive_group()
    channel.add_argument("--per-channel", dest="per_channel", action="store_true", default=None,
                         help="one weight scale per output channel (default)")
    channel.add_argument("--per-tensor", dest="per_channel", action="store_false", help="one weight scale per tensor")
    group.add_argument("--eval", metavar="DATA",
                       help="evaluation data for an int8 --quant (labels in .npz 'label' or class sub-folders): "
                            "accuracy report")
    group.add_argument("--max-accuracy-drop", type=float, metavar="PP",
                       help="keep the most sensitive layers in float until the drop is <= PP percentage points (needs --eval)")
    group.add_argument("--preprocess", metavar="SPEC",
                       help="image preprocessing spec (JSON text or file); stored in the model, with or without --quant")
    group.add_argument("--activation-type", choices=("uint8", "int8"),
                       help="activation integer type of --quant int8 (default uint8)")
    group.add_argument("--exclude", action="append", default=[], metavar="NODE", help="keep this node in float (repeatable)")


# Options that tune one kind of quantization, and the --quant modes they apply to.
STATIC_ONLY = ("int8",)
INT8_MODES = ("int8", "int8-dynamic", "int8-weight")
TUNING_OPTIONS = (
    ("--calib-method", "calib_method", STATIC_ONLY),
    ("--calib-size", "calib_size", STATIC_ONLY),
    ("--calib-whole", "calib_whole", STATIC_ONLY),
    ("--activation-type", "activation_type", STATIC_ONLY),
    ("--per-channel/--per-tensor", "per_channel", INT8_MODES),
    ("--exclude", "exclude", INT8_MODES),
)


def _quantization_arguments(args: argparse.Namespace) -> dict:
    """convert()'s quantization keywords: all of them, --quant or not (it stores --preprocess in
    any model and refuses --calib, --eval and --max-accuracy-drop where they would be ignored);
    the tuning options only where given, after checking that they apply to the mode."""
    for option, name, modes in TUNING_OPTIONS:
        if getattr(args, name) not in (None, []) and args.quant not in modes:
            mode = "no --quant" if args.quant is None else f"--quant {args.quant}"
            raise InvalidOptionError(f"{option} applies to --quant {' / '.join(modes)}, not to {mode}")
    given = {key: value for key, value in (("calibration_method", args.calib_method),
                                           ("calibration_size", args.calib_size),
                                           ("per_channel", args.per_channel)) if value is not None}
    quant_options = {"exclude": tuple(args.exclude)}
    if args.activation_type is not None:
        quant_options["activation_type"] = args.activation_type
    if args.calib_whole:
        quant_options["whole_samples"] = True
    return {
        "quant": args.quant,
        "calibration_data": args.calib,
        **given,
        "eval_data": args.eval,
        "max_accuracy_drop": args.max_accuracy_drop,
        "preprocessing": args.preprocess,
        "quant_options": quant_options,
        "progress": not args.quiet,
    }


def run(args: argparse.Namespace) -> int:
    from converter.api import convert
    from converter.input_shapes import parse_input_shape

    try:
        model, network_shape, texts = _source(args)
        shapes = dict(parse_input_shape(text) for text in texts)
        report = convert(
            model,
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
            atol=args.atol,
            verify_data=args.verify_data,
            custom_op_libraries=tuple(args.custom_op_library),
            **_quantization_arguments(args),
            network=args.network,
            network_input_shape=network_shape,
            dec_key=_hex_key(args.dec_key),
            dec_mode=args.dec_mode,
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
    else:
        _quiet_warnings(report)
    return 0


def _quiet_warnings(report) -> None:
    """The warning --quiet still prints: a quantization that quantized nothing leaves a float
    model under a name that says int8, and nothing else would tell."""
    from converter.quantize.pipeline import NOTHING_QUANTIZED

    quantization = getattr(report, "quantization", None)
    for warning in quantization.warnings if quantization is not None else ():
        if NOTHING_QUANTIZED in warning:
            print(f"lite convert: warning: {warning}", file=sys.stderr)


def _source(args: argparse.Namespace) -> tuple[str, list[int] | None, list[str]]:
    """(model path, the network's sample input shape, the named --input-shape options)."""
    if (args.model is None) == (args.ckpt is None):
        raise InvalidOptionError("give exactly one source: MODEL (.onnx, .mindir) or --ckpt NET.ckpt with --network")
    if args.network is not None and args.ckpt is None:
        raise InvalidOptionError("--network goes with --ckpt NET.ckpt")
    if args.ckpt is None:
        return args.model, None, args.input_shape
    if args.network is None:
        raise InvalidOptionError("--ckpt needs --network MODULE:CALLABLE (the network the weights belong to)")
    bare = [text for text in args.input_shape if ":" not in text]
    if len(bare) != 1:
        raise InvalidOptionError("--ckpt needs one --input-shape D0,D1,... for the network's sample input, e.g. 1,1,32,32")
    try:
        shape = [int(dim) for dim in bare[0].split(",")]
    except ValueError as err:
        raise InvalidOptionError(f"--input-shape {bare[0]!r}: expected sizes such as 1,1,32,32") from err
    return args.ckpt, shape, [text for text in args.input_shape if ":" in text]


def _hex_key(text: str | None) -> bytes | None:
    if text is None:
        return None
    try:
        return bytes.fromhex(text)
    except ValueError as err:
        raise InvalidOptionError(f"--dec-key must be hexadecimal (e.g. 000102...0f), got {text!r}") from err


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
