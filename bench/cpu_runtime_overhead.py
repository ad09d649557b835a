#!/usr/bin/env python3
"""What `lite.Model(device="cpu")` adds on top of ONNX Runtime, side by side in one process.

ResNet-18 and MobileNetV2 (224x224, random weights, the legacy exporter's form) are converted
once; then, at batch 1 and 8, a raw `onnxruntime.InferenceSession` on the converted .onnx and
`lite.Model.load(.lite, device="cpu")` take turns (rounds alternate, each preceded by warm-up runs,
since a session's spinning threads slow the other one for a few calls). Both use 2 threads.

    python bench/cpu_runtime_overhead.py [--rounds 5] [--calls 20]

A second measure isolates the layer itself: `model.predict(feeds)` and a direct `run` on the very
session lite built, alternating call by call, so both see the same machine load (the figure to
trust on a shared machine).

Target: lite ≤ 1.05× the raw session's time.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def median_ms(fn, calls: int) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < 0.3:  # warm-up after the other engine ran
        fn()
    samples = []
    for _ in range(calls):
        begin = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - begin)
    return float(np.median(samples)) * 1e3


def same_session_ratio(model, feeds, calls: int) -> float:
    """predict() against a direct run on the session lite holds, alternating call by call."""
    session = model.engine.segments[0].runner.session
    names = [o.name for o in session.get_outputs()]
    direct, through = [], []
    for _ in range(5):
        model.predict(feeds)
    for _ in range(calls):
        begin = time.perf_counter()
        session.run(names, feeds)
        direct.append(time.perf_counter() - begin)
        begin = time.perf_counter()
        model.predict(feeds)
        through.append(time.perf_counter() - begin)
    return float(np.median(through) / np.median(direct))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import onnxruntime as ort

    import converter
    import lite
    from tests.converter.models import mobilenet_v2, resnet18

    workdir = Path(tempfile.mkdtemp())
    print(f"ONNX Runtime {ort.__version__}, {args.threads} threads; median ms per call over {args.rounds} "
          f"alternating rounds of {args.calls}")
    print(f"{'model':<14}{'batch':>6}{'raw ORT':>11}{'lite cpu':>11}{'ratio':>8}{'same-session ratio':>20}")
    worst = 0.0
    for name, build in (("resnet18", resnet18), ("mobilenet_v2", mobilenet_v2)):
        original = build("legacy", image_size=224)
        onnx_path, lite_path = workdir / f"{name}.onnx", workdir / f"{name}.lite"
        converter.convert(original, str(onnx_path), verify=False)
        converter.convert(original, str(lite_path), verify=False)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        raw = ort.InferenceSession(str(onnx_path), options, providers=["CPUExecutionProvider"])
        model = lite.Model.load(lite_path, device="cpu", threads=args.threads, cache_dir=workdir / "cache")
        input_name = model.inputs[0].name
        for batch in (1, 8):
            x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
            raw_ms, lite_ms = [], []
            for _ in range(args.rounds):
                raw_ms.append(median_ms(lambda: raw.run(None, {input_name: x}), args.calls))
                lite_ms.append(median_ms(lambda: model.predict({input_name: x}), args.calls))
            ratio = float(np.median(lite_ms) / np.median(raw_ms))
            layer = same_session_ratio(model, {input_name: x}, args.calls * args.rounds)
            worst = max(worst, layer)
            print(f"{name:<14}{batch:>6}{np.median(raw_ms):>11.2f}{np.median(lite_ms):>11.2f}{ratio:>8.3f}{layer:>20.3f}")
    print(f"worst same-session ratio {worst:.3f} (target <= 1.05)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
