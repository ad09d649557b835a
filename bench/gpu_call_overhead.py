#!/usr/bin/env python3
"""Where the time of one lite.Model(device="cuda") call goes, at batch 1 (ResNet-50 fp16).

Each step of the asynchronous call with a PyTorch tensor (lite/engines/ort/cuda.py), alone and
built up step by step, in microseconds: "host", the host time of one call while calls queue, and
"waited", one call followed by torch.cuda.synchronize() (median), in 3 interleaved rounds. A waiting
caller pays for the host work before the graph replay is queued and for the GPU work around it.

    python bench/gpu_call_overhead.py [--model r50.lite]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_issue_check import host_us, latency_ms  # noqa: E402


def model_path(given: str | None) -> Path:
    if given:
        return Path(given)
    from gpu_resnet50 import export  # the same network and exports as bench/gpu_resnet50.py

    from converter import convert_model
    from lite.format import save

    workdir = Path(tempfile.mkdtemp())
    _, fp32_path, _ = export(workdir)
    path = workdir / "r50.lite"
    save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a ResNet-50 fp16 .lite (default: export and convert one)")
    args = parser.parse_args()
    import onnxruntime

    if hasattr(onnxruntime, "preload_dlls"):
        onnxruntime.preload_dlls()
    import torch

    import lite

    model = lite.Model.load(model_path(args.model), device="cuda", cache_dir=None)
    x = torch.randn(1, 3, 224, 224, device="cuda").half()
    for _ in range(3):
        model.predict({"input": x})
    sync = torch.cuda.synchronize
    sync()
    bucket = model.engine.gpu.fast
    views = bucket.torch
    side, current = views.stream, torch.cuda.current_stream(views.device)
    event = torch.cuda.Event()
    view_in, view_out = views.inputs["input"], views.outputs["logits"]
    replay = bucket.replay_async

    def on_side(fn):
        torch.cuda.set_stream(side)
        try:
            fn()
        finally:
            torch.cuda.set_stream(current)

    steps = {
        "graph replay alone (asynchronous)": replay,
        "graph replay, ONNX Runtime waiting for it": lambda: bucket.session.session.run_with_iobinding(
            bucket.binding, bucket.options),
        "event + replay": lambda: (event.record(current), side.wait_event(event), replay()),
        "input copy + replay": lambda: (on_side(lambda: view_in.copy_(x)), replay()),
        "replay + output copy": lambda: (replay(), on_side(lambda: view_out.clone())),
        "output alloc + input copy + replay + output copy": lambda: on_side(
            lambda: (torch.empty_like(view_out), view_in.copy_(x), replay(), view_out.clone())),
        "run_async (the whole asynchronous step)": lambda: views.run_async({"input": x}, replay),
        "engine.run": lambda: model.engine.run({"input": x}),
        "predict": lambda: model.predict({"input": x}),
    }
    figures: dict[str, list[tuple[float, float]]] = {name: [] for name in steps}
    for _ in range(3):
        for name, fn in steps.items():
            figures[name].append((host_us(fn, sync, 100), latency_ms(fn, sync, 0.3, 300) * 1e3))
    print(f"{'step':<52} {'host us':>8} {'waited us':>10}")
    for name, pairs in figures.items():
        print(f"{name:<52} {np.median([p[0] for p in pairs]):>8.1f} {np.median([p[1] for p in pairs]):>10.1f}")


if __name__ == "__main__":
    main()
