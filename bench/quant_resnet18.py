"""Int8 on the CPU: ResNet-18 at batch 1, 2 threads, ONNX Runtime, each engine in its own process.

Three models from the same float ResNet-18 (tests/converter/models.py, 224x224, BatchNorm folded
as the dynamo exporter writes it) and the same calibration data:

- fp32:  ``lite convert resnet18.onnx -o fp32.lite``, run by lite's ONNX Runtime engine;
- int8:  ``lite convert ... --quant int8 --calib ...`` (QDQ, uint8 activations, per-channel int8
         weights), run by lite's ONNX Runtime engine;
- int8-onnx: the same quantized model written as .onnx (``-o int8.onnx``), run by a plain
         InferenceSession like ``ort`` (separates the graph from lite's engine overhead);
- ort:   ``onnxruntime.quantization.quantize_static`` (QDQ, QUInt8/QInt8, per channel, MinMax),
         run by a plain InferenceSession.

Targets: int8 ≥ 2.5× faster than fp32; int8 within 5% of ort. Each measurement runs in a
fresh process (ONNX Runtime's worker threads keep spinning ~0.3 s after a run, and another
session's would slow it); the median over ``--calls`` calls after a warm-up is
reported, and the processes alternate for ``--rounds`` rounds.

    python bench/quant_resnet18.py [--rounds 3] [--calls 60] [--calib-size 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

ROOT = Path(__file__).resolve().parents[1]


def build(directory: Path, calib_size: int) -> dict[str, Path]:
    sys.path.insert(0, str(ROOT / "tests" / "converter"))
    sys.path.insert(0, str(ROOT))
    from models import resnet18
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    import converter

    source = directory / "resnet18.onnx"
    onnx.save(resnet18("dynamo", image_size=224), source)
    rng = np.random.default_rng(0)
    calibration = rng.standard_normal((calib_size, 3, 224, 224)).astype(np.float32)
    calib_dir = directory / "calib"
    calib_dir.mkdir()
    for index in range(calib_size):
        np.save(calib_dir / f"{index:04d}.npy", calibration[index])
    paths = {"fp32": directory / "fp32.lite", "int8": directory / "int8.lite", "int8-onnx": directory / "int8.onnx",
             "ort": directory / "ort_int8.onnx"}
    converter.convert(source, paths["fp32"], verify=False)
    started = time.perf_counter()
    converter.convert(source, paths["int8"], quant="int8", calibration_data=str(calib_dir), calibration_size=calib_size)
    ours_seconds = time.perf_counter() - started
    converter.convert(source, paths["int8-onnx"], quant="int8", calibration_data=str(calib_dir), calibration_size=calib_size)

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.items = iter([{"input": calibration[i:i + 1]} for i in range(calib_size)])

        def get_next(self):
            return next(self.items, None)

    started = time.perf_counter()
    quantize_static(str(source), str(paths["ort"]), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    theirs_seconds = time.perf_counter() - started
    sizes = {name: os.path.getsize(path) for name, path in paths.items()}
    print(f"quantization time: lite {ours_seconds:.1f} s, onnxruntime.quantization {theirs_seconds:.1f} s "
          f"({calib_size} calibration samples)")
    print("file sizes (MB): " + ", ".join(f"{k} {v / 1e6:.2f}" for k, v in sizes.items())
          + f"; fp32/int8 = {sizes['fp32'] / sizes['int8']:.2f}x")
    return paths


def measure(kind: str, path: str, calls: int) -> float:
    """Median milliseconds per call at batch 1 (run in a child process)."""
    x = np.random.default_rng(1).standard_normal((1, 3, 224, 224)).astype(np.float32)
    if kind in ("ort", "int8-onnx"):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])

        def call():
            session.run(None, {"input": x})
    else:
        sys.path.insert(0, str(ROOT))
        import lite

        model = lite.Model.load(path, device="cpu", threads=2, cache_dir=None)

        def call():
            model.predict({"input": x})

    deadline = time.perf_counter() + 1.0
    while time.perf_counter() < deadline:  # warm-up: one second of calls
        call()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000.0 * statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--calib-size", type=int, default=16)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child[0], args.child[1], args.calls)))
        return
    with tempfile.TemporaryDirectory() as folder:
        paths = build(Path(folder), args.calib_size)
        results: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.rounds):
            for name, path in paths.items():
                output = subprocess.run([sys.executable, __file__, "--calls", str(args.calls), "--child", name, str(path)],
                                        check=True, capture_output=True, text=True).stdout
                results[name].append(json.loads(output.strip().splitlines()[-1]))
    best = {name: min(values) for name, values in results.items()}
    for name, values in results.items():
        print(f"{name:>9}: median per round {', '.join(f'{v:.2f}' for v in values)} ms; best {best[name]:.2f} ms")
    print(f"int8 vs fp32: {best['fp32'] / best['int8']:.2f}x faster (target >= 2.5x)")
    print(f"int8 vs onnxruntime.quantization: {best['int8'] / best['ort']:.3f}x its time (target <= 1.05x); "
          f"as .onnx in the same kind of session: {best['int8-onnx'] / best['ort']:.3f}x")


if __name__ == "__main__":
    main()
