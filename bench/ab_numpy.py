"""Two versions of the numpy engine on the same .lite files, in lockstep.

    python bench/ab_numpy.py --old /path/to/checkout-a --new /path/to/checkout-b \
        --cache /tmp/zoo --models mobilenet_v2,resnet50 [--rounds 40] [--calls 10]

Each side runs in its own process (``PYTHONPATH`` set to its checkout), loads every model once
and warms it up; then the two take turns, a few ``predict`` calls at a time, model by model, the
order within a pair alternating. On a small shared machine whose load drifts by the second,
two versions measured in separate runs minutes apart disagree by more than most changes are
worth; turns a few milliseconds apart see the same load. Files are ``<cache>/<model>-dynamo.lite``
(as bench/zoo.py caches them), inputs standard normal, symbolic dimensions 1.

Per model: each side's median time, their ratio, and the median and quartiles of the per-turn
ratios new/old (the number to quote).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _worker(cache: str, models: list[str]) -> None:
    import lite

    loaded = {}
    for name in models:
        model = lite.Model.load(str(Path(cache) / f"{name}-dynamo.lite"), device="numpy")
        rng = np.random.default_rng(0)
        feeds = {i.name: rng.standard_normal([d if isinstance(d, int) else 1 for d in i.shape]).astype(np.float32)
                 for i in model.inputs}
        for _ in range(20):
            model.predict(feeds)
        loaded[name] = (model, feeds)
    print("ready", flush=True)
    for line in sys.stdin:
        name, calls = line.split()
        model, feeds = loaded[name]
        times = []
        for _ in range(int(calls)):
            started = time.perf_counter()
            model.predict(feeds)
            times.append(time.perf_counter() - started)
        print(json.dumps(times), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True, help="checkout whose lite package is the baseline")
    parser.add_argument("--new", required=True, help="checkout whose lite package is compared")
    parser.add_argument("--cache", required=True, help="folder of <model>-dynamo.lite files")
    parser.add_argument("--models", required=True, help="comma-separated model names")
    parser.add_argument("--rounds", type=int, default=40, help="turns per side and model (default 40)")
    parser.add_argument("--calls", type=int, default=10, help="predict calls per turn; a turn's median counts")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    models = args.models.split(",")
    if args.worker:
        _worker(args.cache, models)
        return
    sides = {"old": args.old, "new": args.new}
    processes = {}
    for side, path in sides.items():
        processes[side] = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--old", "-", "--new", "-", "--cache", args.cache,
             "--models", args.models],
            env=dict(os.environ, PYTHONPATH=path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    for process in processes.values():
        if process.stdout.readline().strip() != "ready":
            raise SystemExit("a worker failed to load the models")
    turns = {(side, name): [] for side in sides for name in models}
    for index in range(args.rounds):
        for name in models:
            for side in ("old", "new") if index % 2 == 0 else ("new", "old"):
                process = processes[side]
                process.stdin.write(f"{name} {args.calls}\n")
                process.stdin.flush()
                turns[(side, name)].append(float(np.median(json.loads(process.stdout.readline()))))
    for process in processes.values():
        process.stdin.close()
        process.wait()
    for name in models:
        old, new = np.array(turns[("old", name)]), np.array(turns[("new", name)])
        ratios = new / old
        print(f"{name:16s} old {np.median(old) * 1e3:7.3f} ms  new {np.median(new) * 1e3:7.3f} ms  "
              f"new/old {np.median(new) / np.median(old):.3f}  per-turn new/old median {np.median(ratios):.3f} "
              f"(quartiles {np.percentile(ratios, 25):.3f}-{np.percentile(ratios, 75):.3f})")


if __name__ == "__main__":
    main()
