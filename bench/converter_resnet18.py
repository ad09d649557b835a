"""ONNX Runtime CPU (2 threads, batch 1) on ResNet-18 in three forms, side by side:

- original: the dynamo exporter with ``optimize=False`` (BatchNormalization kept, Conv biases as
  Shape → Expand chains);
- optimized: the dynamo exporter's own optimization (BatchNormalization folded), the best form;
- converted: ``lite convert original.onnx -o converted.onnx``.

Targets: converted ≥ 1.35× faster than original, and ≤ 1.03× the optimized form's time.
Real exports are used when torch and onnxscript are installed (``--source torch``), otherwise the
same graphs built with onnx.helper (tests/converter/models.py).

    python bench/converter_resnet18.py [--source auto|torch|helper] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import converter

ROOT = Path(__file__).resolve().parents[1]


def _helper_models(directory: Path) -> tuple[Path, Path]:
    sys.path.insert(0, str(ROOT / "tests" / "converter"))
    from models import resnet18

    original, optimized = directory / "original.onnx", directory / "optimized.onnx"
    onnx.save(resnet18("dynamo_raw", image_size=224), original)
    onnx.save(resnet18("dynamo", image_size=224), optimized)
    return original, optimized


def _torch_models(directory: Path) -> tuple[Path, Path]:
    import torch

    sys.path.insert(0, str(ROOT / "tests" / "converter"))
    from test_torch_exports import ResNet18, _randomized

    model = _randomized(ResNet18())
    example = (torch.randn(1, 3, 224, 224),)
    original, optimized = directory / "original.onnx", directory / "optimized.onnx"
    torch.onnx.export(model, example, dynamo=True, optimize=False).save(str(original))
    torch.onnx.export(model, example, dynamo=True, optimize=True).save(str(optimized))
    return original, optimized


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _time(session: ort.InferenceSession, feeds: dict, runs: int) -> float:
    # Warm up ~0.3 s after switching sessions: the other session's spinning threads slow this one.
    deadline = time.perf_counter() + 0.3
    while time.perf_counter() < deadline:
        session.run(None, feeds)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feeds)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=["auto", "torch", "helper"], default="auto")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    source = args.source
    if source == "auto":
        try:
            import onnxscript  # noqa: F401
            import torch  # noqa: F401

            source = "torch"
        except ImportError:
            source = "helper"
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        original, optimized = (_torch_models if source == "torch" else _helper_models)(directory)
        converted = directory / "converted.onnx"
        report = converter.convert(original, converted)
        print(f"source: {source}; conversion {report.seconds:.2f} s, verify max rel "
              f"{max(o.max_rel for o in report.verification.outputs):.2e}")
        sessions = {name: _session(path) for name, path in
                    (("original", original), ("optimized", optimized), ("converted", converted))}
        feeds = {sessions["original"].get_inputs()[0].name: np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(args.rounds):
            for name, session in sessions.items():
                times[name].append(_time(session, {session.get_inputs()[0].name: next(iter(feeds.values()))}, args.runs))
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(f"ORT {ort.__version__} CPU, 2 threads, batch 1, ResNet-18 224x224 (median of {args.rounds} rounds x {args.runs} runs)")
    for name, value in medians.items():
        print(f"  {name:<10} {value:7.2f} ms")
    speedup = medians["original"] / medians["converted"]
    versus_best = medians["converted"] / medians["optimized"]
    print(f"  converted vs original : {speedup:.2f}x faster   (target >= 1.35x) {'PASS' if speedup >= 1.35 else 'MISS'}")
    print(f"  converted vs optimized: {versus_best:.3f}x the time (target <= 1.03x) {'PASS' if versus_best <= 1.03 else 'MISS'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
