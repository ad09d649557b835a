"""The numpy engine of two source trees side by side on the zoo's converted files: new/old time per model.

    python bench/numpy_ab.py OLD_TREE NEW_TREE --cache DIR [--models bert,roberta,...] [--batches 40] [--calls 10]

Each tree (a checkout holding ``lite/``, e.g. a worktree of another commit) runs in its own worker
process: ``lite.Model.load(DIR/NAME-dynamo.lite, device="numpy").predict(feeds)`` with the zoo's
inputs for the architecture (tests/zoo/architectures.py, seed 0). The machine is small and shared,
so the workers take turns in short batches (``--calls`` calls each, the order alternating batch by
batch) and each model's ratio is the median over batches of new/old batch medians: both sides of a
ratio ran within milliseconds of each other, whatever else the machine was doing. Also printed:
the ratio of each side's 25th-percentile call time over all its batches.
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


def worker(cache: Path, models: list[str]) -> None:
    """Load each model, then answer "NAME CALLS" lines with the calls' times as a JSON list."""
    import lite
    from tests.zoo.architectures import BY_NAME

    loaded = {}
    for name in models:
        model = lite.Model.load(cache / f"{name}-dynamo.lite", device="numpy")
        feeds = BY_NAME[name].make_inputs(np.random.default_rng(0))
        for _ in range(20):
            model.predict(feeds)
        loaded[name] = (model, feeds)
    print("ready", lite.__file__, flush=True)
    for line in sys.stdin:
        name, calls = line.split()
        model, feeds = loaded[name]
        times = []
        for _ in range(int(calls)):
            started = time.perf_counter()
            model.predict(feeds)
            times.append(time.perf_counter() - started)
        print(json.dumps(times), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old", type=Path, help="the source tree measured first (holding lite/)")
    parser.add_argument("new", type=Path, help="the source tree compared with it")
    parser.add_argument("--cache", type=Path, required=True, help="folder of NAME-dynamo.lite files (bench/zoo.py's)")
    parser.add_argument("--models", default="bert,roberta,distilbert,levit,deit_distilled,beit,swiftformer,focalnet")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    models = args.models.split(",")
    if args.worker:
        worker(args.cache, models)
        return 0
    workers = {}
    for side, tree in (("old", args.old), ("new", args.new)):
        # The tree first on the path: its lite is the one imported (tests.zoo from it too).
        environment = dict(os.environ, PYTHONPATH=str(tree.resolve()))
        workers[side] = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), str(args.old), str(args.new), "--worker", "--cache",
             str(args.cache.resolve()), "--models", args.models],
            env=environment, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
        ready = workers[side].stdout.readline().split()
        if not ready or ready[0] != "ready":
            print(f"the {side} worker did not start", file=sys.stderr)
            return 1
        print(f"{side}: {ready[1]}")
    times = {side: {name: [] for name in models} for side in workers}
    ratios: dict[str, list[float]] = {name: [] for name in models}
    try:
        for batch in range(args.batches):
            for name in models:
                medians = {}
                for side in (("old", "new") if batch % 2 == 0 else ("new", "old")):
                    workers[side].stdin.write(f"{name} {args.calls}\n")
                    workers[side].stdin.flush()
                    values = json.loads(workers[side].stdout.readline())
                    times[side][name] += values
                    medians[side] = float(np.median(values))
                ratios[name].append(medians["new"] / medians["old"])
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait()
    print(f"{'model':<16}{'old ms':>9}{'new ms':>9}{'new/old':>9}   quartiles     p25 ratio")
    for name in models:
        old, new = (float(np.percentile(times[side][name], 25)) for side in ("old", "new"))
        low, middle, high = np.percentile(ratios[name], [25, 50, 75])
        print(f"{name:<16}{old * 1e3:9.3f}{new * 1e3:9.3f}{middle:9.3f}   {low:.3f}-{high:.3f}   {new / old:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
