#!/usr/bin/env python3
"""Load time and resident-memory growth of lite.Model.load for 1 MB, 100 MB and 1 GB models.

Each model is one MatMul whose weight has the given size. Every load runs in a fresh process
(cold interpreter, warm page cache), so the figures are what an application sees at start-up.
Zero-copy loading means both columns stay flat as the weights grow 1000x.

    python bench/load_zero_copy.py [--sizes-mb 1 100 1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, os, sys, time
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
import numpy as np
import lite
before = rss()
start = time.perf_counter()
model = lite.Model.load(sys.argv[1], device="numpy")
elapsed = time.perf_counter() - start
after = rss()
x = np.ones((1, model.inputs[0].shape[1]), np.float32)
model.predict({"x": x})  # touches the weights: now they are resident, shared with the page cache
print(json.dumps({"load_ms": elapsed * 1e3, "rss_growth_mb": (after - before) / 2**20}))
"""


def make_model(path: Path, megabytes: int) -> None:
    from lite.format import GraphBuilder, save

    columns = 256
    rows = max(1, megabytes * 2**20 // (4 * columns))
    b = GraphBuilder(f"matmul_{megabytes}mb")
    x = b.input("x", np.float32, [1, rows])
    w = b.constant("w", np.full((rows, columns), 0.001, np.float32))
    y = b.node("MatMul", [x, w], outputs=["y"])
    b.output(y, np.float32, [1, columns])
    save(b.build(), path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[1, 100, 1000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'weights':>10} {'file':>10} {'load ms (median)':>18} {'RSS growth MB (median)':>24}")
    with tempfile.TemporaryDirectory() as tmp:
        for megabytes in args.sizes_mb:
            path = Path(tmp) / f"m{megabytes}.lite"
            make_model(path, megabytes)
            runs = []
            for _ in range(args.repeat):
                out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                                     check=True, cwd=ROOT)
                runs.append(json.loads(out.stdout))
            load_ms = float(np.median([r["load_ms"] for r in runs]))
            growth = float(np.median([r["rss_growth_mb"] for r in runs]))
            size_mb = path.stat().st_size / 2**20
            print(f"{megabytes:>8}MB {size_mb:>8.1f}MB {load_ms:>18.2f} {growth:>24.2f}")
            path.unlink()


if __name__ == "__main__":
    main()
