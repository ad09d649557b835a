"""``lite quickstart [--workdir DIR]``: the toolchain end to end on scikit-learn's digits.

Trains LeNet5 (with BatchNorm) with the train core, saves a .ckpt, exports ONNX, converts it to
.lite with BatchNorm folded and to an int8 .lite (static quantization calibrated on training
digits), runs both on the numpy engine and on ONNX Runtime, serves the fp32 model over the
KServe v2 gRPC protocol and queries it with tritonclient (one image as raw PNG bytes through the
model's preprocessing), then prints accuracy, file sizes and latencies for each path.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def register(subparsers) -> None:
    parser = subparsers.add_parser("quickstart", help="train, convert, run and serve a digits model end to end")
    parser.add_argument("--workdir", default="lite-quickstart", help="directory for the artifacts (default: %(default)s)")
    parser.add_argument("--epochs", type=int, default=10, help="training epochs (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and the data order (default: %(default)s)")
    parser.add_argument("--no-serve", action="store_true", help="skip the gRPC server step")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from quickstart import steps

    if args.epochs < 1:
        raise ValueError("--epochs must be at least 1")
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    total = 5 if args.no_serve else 6
    stage = iter(range(1, total + 1))

    def say(text: str) -> None:
        print(f"[{next(stage)}/{total}] {text}", flush=True)

    images, labels = steps.test_arrays()
    say(f"train LeNet5+BatchNorm on scikit-learn digits ({args.epochs} epochs)")
    net, trained_accuracy, checkpoint = steps.train_lenet(workdir, args.epochs, args.seed)
    rows = [steps.Measured("trained network (train core)", trained_accuracy, checkpoint.stat().st_size)]
    say(f"checkpoint {checkpoint.name}; export ONNX and convert to .lite")
    onnx_path, lite_path, folded = steps.export_and_convert(net, workdir)
    print(f"      BatchNormalization nodes: {folded['BatchNormalization before']} -> "
          f"{folded['BatchNormalization after']}; nodes: {folded['nodes before']} -> {folded['nodes after']}")
    rows.append(steps.Measured("ONNX export", float("nan"), onnx_path.stat().st_size))
    say("quantize to int8 (static, calibrated on 256 training digits)")
    int8_path = steps.quantize_int8(onnx_path, workdir)
    say("run the fp32 and int8 .lite files on the numpy engine and on ONNX Runtime (CPU)")
    for path, label in ((lite_path, "fp32"), (int8_path, "int8")):
        rows.append(steps.run_engine(path, "numpy", images, labels, label))
        try:
            rows.append(steps.run_engine(path, "cpu", images, labels, label))
        except Exception as err:  # ONNX Runtime is optional: say so and go on
            print(f"      {label} on ONNX Runtime skipped: {err}")
    png = None
    if not args.no_serve:
        say("serve over KServe v2 gRPC; send the test set with tritonclient")

        def progress(done: int, count: int) -> None:
            bar = "#" * (30 * done // count)
            print(f"\r      {bar:<30} {done}/{count}", end="" if done < count else "\n", flush=True)

        served, png = steps.serve_and_query(lite_path, workdir, images, labels, progress)
        rows.append(served)
    say("summary")
    print_table(rows, len(images))
    if png is not None:
        print(f"PNG request ({png['png_bytes']} bytes of image/png): predicted {png['predicted']}, "
              f"label {png['label']}; server stopped with exit code {png['server_exit_code']}")
    print(f"finished in {time.perf_counter() - started:.1f} s; artifacts in {workdir}")
    return 0


def print_table(rows, samples: int) -> None:
    print(f"\n{'path':<32} {'accuracy':>9} {'file':>10} {'latency':>16}")
    for row in rows:
        accuracy = "-" if row.accuracy != row.accuracy else f"{row.accuracy:.2%}"
        size = "-" if row.file_bytes is None else f"{row.file_bytes / 1024:.1f} KiB"
        latency = "-" if row.ms_per_sample is None else f"{row.ms_per_sample:.3f} ms/sample"
        print(f"{row.path:<32} {accuracy:>9} {size:>10} {latency:>16}")
    print(f"(accuracy on the {samples} held-out digits)")
    sys.stdout.flush()
