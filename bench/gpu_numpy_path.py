#!/usr/bin/env python3
"""Where a numpy batch's time goes in the torch engine's ``predict`` on CUDA, step by step.

ResNet-50 fp16 as ``bench/gpu_issue_check.py`` makes it, loaded with ``startup="fast"`` (the
lowered module replayed from a CUDA graph, nothing compiled: the input and output path is the same
as the compiled artifact's). At ``--batch`` (256), ms per call, each call waited for, steps
interleaved over ``--rounds``:

- ``predict, torch in`` / ``predict, numpy in / out``: what users call;
- ``upload() alone`` (a new device tensor per call) and ``upload_into() a kept tensor``;
- ``upload + replay``: the upload, then the segment's graph runner on the device tensor;
- ``output to numpy``: the logits' copy to the host;
- an upload after 18 ms of idling (the replay's time), and the idling alone; a replay followed by
  an upload (does an upload cost more after the GPU has worked?);
- ``engine.run, numpy in``.

    python bench/gpu_numpy_path.py --workdir /tmp/w [--batch 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_issue_check import latency_ms, make_model, say  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    import torch

    import lite

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    path = make_model(workdir)
    model = lite.Model.load(path, engine="torch", device="cuda", precision="fp16", startup="fast", cache_dir=None)
    engine = model.engine
    segment = next(s for s in engine.segments if s.on_torch)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda").half()
    x_numpy = x.cpu().numpy()
    logits = model.predict({"input": x})["logits"]
    uploader = engine._host_uploader()
    kept = torch.empty_like(x)
    sync = torch.cuda.synchronize
    steps = {
        "predict, torch in": lambda: model.predict({"input": x}),
        "predict, numpy in / out": lambda: model.predict({"input": x_numpy}),
        "engine.run, numpy in": lambda: engine.run({"input": x_numpy}),
        "upload() alone": lambda: uploader.upload(x_numpy),
        "upload_into() a kept tensor": lambda: uploader.upload_into(x_numpy, kept),
        "upload + replay": lambda: segment.runner(uploader.upload(x_numpy)),
        "replay alone": lambda: segment.runner(x),
        "output to numpy": lambda: logits.cpu().numpy(),
        "idle 18 ms, then upload()": lambda: (time.sleep(0.018), uploader.upload(x_numpy)),
        "idle 18 ms alone": lambda: time.sleep(0.018),
        "replay, then upload_into()": lambda: (segment.runner(x), uploader.upload_into(x_numpy, kept)),
    }
    for step in steps.values():
        for _ in range(3):
            step()
    sync()
    times: dict[str, list[float]] = {name: [] for name in steps}
    for round_ in range(args.rounds):
        order = list(steps.items()) if round_ % 2 == 0 else list(steps.items())[::-1]
        for name, step in order:
            times[name].append(latency_ms(step, sync, seconds=0.5))
    table = {name: round(statistics.median(values), 3) for name, values in times.items()}
    say(json.dumps({"gpu": torch.cuda.get_device_name(0), "batch": args.batch, "torch_threads": torch.get_num_threads(),
                    "ms_waited": table}, indent=1))
    for name, value in table.items():
        print(f"{name:<32}{value:>9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
