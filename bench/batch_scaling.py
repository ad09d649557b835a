#!/usr/bin/env python3
"""What dynamic batching can gain on this machine: an engine's time per image against batch size.

    python bench/batch_scaling.py [--batches 1 2 4 8 16 32] [--runs 5] [--threads 2]
                                  [--engines numpy onnxruntime] [--image-size 224]

Dynamic batching turns N single-image executions into one execution of N images. Its throughput
gain over one execution per request is at most ``t(1) / (t(b) / b)`` for the best batch ``b``:
the engine's time for one image over its time per image in a batch (the server's own per-request
work, the same either way, only lowers the ratio). The target is 2x for ResNet-18 on the CPU with 32
single-image clients; this script measures that bound for each engine on the model
bench/serving_batching.py serves (ResNet-18 from tests/converter/models.py, random weights,
converted with a dynamic batch dimension).

Each engine runs in a fresh process of its own with ``--threads`` threads (BLAS threads for the
numpy engine, intra-op threads for ONNX Runtime), batches from small to large, ``--runs`` timed
runs after one warm-up, median per batch. Prints ms per execution, ms per image and the bound.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def worker(engine: str, path: str, batches: list[int], runs: int, threads: int, image_size: int) -> None:
    """Time one engine in this process; print {batch: median ms} as JSON."""
    import numpy as np

    import lite

    device = "numpy" if engine == "numpy" else "cpu"
    model = lite.Model.load(path, device=device, threads=threads)
    name = model.inputs[0].name
    rng = np.random.default_rng(0)
    result = {}
    for batch in batches:
        x = rng.standard_normal((batch, 3, image_size, image_size), dtype=np.float32)
        model.predict({name: x})  # warm-up: arena plan, ORT's shape-specific setup
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            model.predict({name: x})
            times.append(time.perf_counter() - start)
        result[batch] = statistics.median(times) * 1e3
    print(json.dumps(result))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--engines", nargs="+", default=["numpy", "onnxruntime"], choices=["numpy", "onnxruntime"])
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.runs < 1 or args.threads < 1 or any(b < 1 for b in args.batches):
        parser.error("--runs, --threads and every batch must be >= 1")
    if args.worker:
        worker(args.worker[0], args.worker[1], args.batches, args.runs, args.threads, args.image_size)
        return 0

    sys.path.insert(0, str(ROOT))
    sys.path.insert(1, str(ROOT / "bench"))  # after the checkout: `serving` stays the package
    sys.path.insert(0, str(ROOT / "tests" / "converter"))
    from models import resnet18  # tests/converter/models.py
    from numpy_engine import thread_environment  # bench/numpy_engine.py

    import converter
    from lite.format import save

    environment = thread_environment(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "resnet18.lite"
        save(converter.convert_model(resnet18("legacy", image_size=args.image_size), dynamic_batch=True), str(path))
        print(f"ResNet-18, {args.image_size}x{args.image_size}, {args.threads} threads, median of {args.runs} runs")
        print(f"{'engine':12s} {'batch':>5s} {'ms/execution':>13s} {'ms/image':>9s}")
        for engine in args.engines:
            command = [sys.executable, __file__, "--worker", engine, str(path), "--runs", str(args.runs),
                       "--threads", str(args.threads), "--image-size", str(args.image_size),
                       "--batches", *map(str, args.batches)]
            finished = subprocess.run(command, env=environment, capture_output=True, text=True,
                                      timeout=1800, check=False)
            if finished.returncode:
                print(f"{engine}: the worker failed:\n{finished.stderr[-2000:]}", file=sys.stderr)
                return 1
            times = {int(batch): ms for batch, ms in json.loads(finished.stdout.strip().splitlines()[-1]).items()}
            for batch, ms in times.items():
                print(f"{engine:12s} {batch:5d} {ms:13.2f} {ms / batch:9.2f}")
            best = min(times, key=lambda batch: times[batch] / batch)
            single = times.get(1)
            if single is not None:
                print(f"{engine:12s} most dynamic batching can gain: {single / (times[best] / best):.2f}x "
                      f"(batch {best}; the target is 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
