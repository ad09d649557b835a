#!/usr/bin/env python3
"""A warm start of the torch engine with artifacts compiled ahead of time.

ResNet-50 fp16 (torchvision definition, random weights; converted with ``--fp16 --fp16-io``)
runs on ``lite.Model.load(..., engine="torch", device="cuda", precision="fp16")`` (compiled
ahead of time, the engine's default on CUDA), ``--mode`` (max-autotune by default), batch ``--batch``. Fresh processes share one cache folder: the first
compiles (the artifact is written under ``<cache>/torch/compiled``), the next ones load it. Each
reports the seconds from its start (before ``import torch``) to the end of its first call and to
full speed (the end of the first timed window whose rate is within 5 % of the steady rate), and
its steady images/s; its progress goes to stderr as it happens.

    python bench/gpu_warm_start.py [--batch 256] [--seconds 2]     # on the GPU machine
    python bench/gpu_warm_start.py --workdir /tmp/ws --phases cold   # a compile longer than one call,
    python bench/gpu_warm_start.py --workdir /tmp/ws --phases warm   # then the warm start
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

CHILD = r"""
import faulthandler, json, logging, sys, time
faulthandler.enable()
started = float(sys.argv[4])
logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
logging.getLogger("lite").setLevel(logging.INFO)  # the engine says when it compiles, and for how long
import torch
import lite
path, cache, batch, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[5])
def say(what):  # progress on stderr, live: a run cut short still shows how far it got
    print(f"[{time.perf_counter() - started:7.1f} s] {what}", file=sys.stderr, flush=True)
say("torch and lite imported")
model = lite.Model.load(path, engine="torch", device="cuda", precision="fp16", mode=sys.argv[6], cache_dir=cache,
                        inductor_options=json.loads(sys.argv[7]))
loaded = time.perf_counter() - started
say("model loaded; first call (compiles or loads the artifact)")
x = torch.randn(batch, 3, 224, 224, device="cuda").half()
model.predict({"input": x}); torch.cuda.synchronize()
first = time.perf_counter() - started
say("first call done")
windows = []
while sum(w[1] for w in windows) < seconds:
    t, n = time.perf_counter(), 0
    while time.perf_counter() - t < 0.25:
        model.predict({"input": x}); n += 1
    torch.cuda.synchronize()
    windows.append((n * batch, time.perf_counter() - t, time.perf_counter() - started))
steady = sum(w[0] for w in windows[-4:]) / sum(w[1] for w in windows[-4:])
full = next(end for images, span, end in windows if images / span >= 0.95 * steady)
runner = next(s.runner for s in model.engine.segments if s.on_torch)
print(json.dumps({"load_s": round(loaded, 2), "first_call_s": round(first, 2), "full_speed_s": round(full, 2),
                  "images_per_s": round(steady, 1), "precision": model.engine.compute_precision,
                  "cuda_graph_declined": runner.graph_declined,
                  "aot_declined": runner.aot_declined, "compiled_again": runner.reloaded}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=2.0, help="timed span after the first call")
    parser.add_argument("--mode", default="max-autotune", help="torch.compile mode of the engine")
    parser.add_argument("--workdir", default=None,
                        help="keep the model and the cache here (default: a new temporary folder); with "
                             "--phases, a cold process in one call and a warm one in the next share it")
    parser.add_argument("--bytecode", action=argparse.BooleanOptionalAction, default=True,
                        help="let the processes cache Python bytecode (under the workdir), as an installed "
                             "package does, even where PYTHONDONTWRITEBYTECODE is set (the GPU machine sets it)")
    parser.add_argument("--timeout", type=float, default=480.0, help="seconds allowed to each process")
    parser.add_argument("--inductor-option", action="append", default=[], metavar="NAME=JSON",
                        help="an Inductor setting for the engine (inductor_options), e.g. "
                             "coordinate_descent_tuning=false; repeatable")
    parser.add_argument("--phases", nargs="+", choices=("cold", "warm"), default=["cold", "warm"],
                        help="processes to run in turn (warm twice: a second warm start)")
    args = parser.parse_args()

    from gpu_resnet50 import export

    from converter import convert_model
    from lite.format import save

    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp())
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "r50.lite"
    if not path.exists():
        _, fp32_path, _ = export(workdir)
        save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), path)
    cache = workdir / "cache"
    environment = dict(os.environ)
    if args.bytecode:  # a deployed install keeps compiled bytecode (pip writes it); so do these processes
        environment.pop("PYTHONDONTWRITEBYTECODE", None)
        environment["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    inductor_options = {}
    for option in args.inductor_option:
        name, _, value = option.partition("=")
        try:
            inductor_options[name] = json.loads(value)
        except ValueError:
            parser.error(f"--inductor-option {option!r}: expected NAME=JSON, e.g. coordinate_descent_tuning=false")
    results = {}
    for label in args.phases:
        print(f"--- {label} process", file=sys.stderr, flush=True)
        try:  # the child's stderr (its progress, torch's warnings) passes through live
            out = subprocess.run([sys.executable, "-c", CHILD, str(path), str(cache), str(args.batch),
                                  repr(time.perf_counter()), str(args.seconds), args.mode,
                                  json.dumps(inductor_options)], stdout=subprocess.PIPE,
                                 text=True, check=False, cwd=ROOT, timeout=args.timeout, env=environment)
        except subprocess.TimeoutExpired:
            print(f"the {label} process ran over --timeout {args.timeout:.0f} s (its progress is above)")
            return 1
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode != 0 or not lines:
            print(f"the {label} process exited with {out.returncode}; its output ends:")
            print(out.stdout[-1500:])
            return 1
        results.setdefault(label, []).append(json.loads(lines[-1]))
        print(label, results[label][-1], flush=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
