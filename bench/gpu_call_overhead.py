#!/usr/bin/env python3
"""Where the time of one lite.Model(device="cuda") call goes, at batch 1 (ResNet-50 fp16).

Times, in microseconds per call: the whole predict; input validation; the device-to-device input
copy into the CUDA-graph buffer; the graph replay; the output copy; and ONNX Runtime's replay
alone, so the engine's own overhead can be read off.

    python bench/gpu_call_overhead.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def per_call_us(fn, sync, n=300):
    for _ in range(20):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    sync()
    return (time.perf_counter() - start) / n * 1e6


def main() -> None:
    import torch
    from gpu_resnet50 import export  # the same network and exports as bench/gpu_resnet50.py

    import lite
    from converter import convert_model
    from lite.format import save

    workdir = Path(tempfile.mkdtemp())
    _, fp32_path, _ = export(workdir)
    path = workdir / "r50.lite"
    save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), path)
    model = lite.Model.load(path, device="cuda", cache_dir=None)
    x = torch.randn(1, 3, 224, 224, device="cuda").half()
    sync = torch.cuda.synchronize
    model.predict({"input": x})
    runner = model.engine.gpu
    bucket = next(iter(runner.buckets.values()))
    ort = runner.ort
    rows = {
        "predict (whole call)": lambda: model.predict({"input": x}),
        "engine.run (no validation)": lambda: model.engine.run({"input": x}),
        "validation only": lambda: model._validate({"input": x}),
        "OrtValue.from_dlpack": lambda: ort.OrtValue.from_dlpack(x),
        "input copy (update_inplace)": lambda: bucket.inputs["input"].update_inplace(ort.OrtValue.from_dlpack(x)),
        "graph replay (run_with_iobinding)": lambda: bucket.session.session.run_with_iobinding(bucket.binding, bucket.options),
        "output alloc (ortvalue_from_shape_and_type)": lambda: ort.OrtValue.ortvalue_from_shape_and_type([1, 1000], np.float16, "cuda", 0),
        "torch.empty output": lambda: torch.empty((1, 1000), dtype=torch.float16, device="cuda"),
    }
    for label, fn in rows.items():
        print(f"{label:<46} {per_call_us(fn, sync):>9.1f} us")


if __name__ == "__main__":
    main()
