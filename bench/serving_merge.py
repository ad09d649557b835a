#!/usr/bin/env python3
"""Merging a batch next to a busy event loop: numpy's copies against serving's ``merge``.

The dynamic batcher stacks the requests' arrays into one batch on an execution thread while the
event loop thread runs Python (decoding the next requests). numpy releases the GIL around every
large copy, and taking it back from a thread that is running Python waits up to a switch
interval (5 ms). This measures, for ``--pieces`` images of 3x224x224 float16 merged into a
batch of ``--batch`` rows, the time per merge alone and next to a thread spinning in Python:
``np.concatenate`` (then padding by broadcast) against ``serving.batch_merge.merge`` (memoryview
copies, which hold the GIL).

    python bench/serving_merge.py [--pieces 65] [--batch 128] [--repeats 20]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from serving.batch_merge import merge as serving_merge


def per_merge_ms(merge, repeats: int, busy: bool) -> float:
    stop = threading.Event()

    def spin() -> None:
        total = 0
        while not stop.is_set():
            for i in range(1000):
                total += i

    thread = threading.Thread(target=spin)
    if busy:
        thread.start()
        time.sleep(0.05)
    try:
        merge()
        started = time.perf_counter()
        for _ in range(repeats):
            merge()
        return (time.perf_counter() - started) / repeats * 1e3
    finally:
        stop.set()
        if busy:
            thread.join()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pieces", type=int, default=65)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    pieces = [rng.standard_normal((1, 3, 224, 224)).astype(np.float16) for _ in range(args.pieces)]
    out = np.empty((args.batch, 3, 224, 224), np.float16)

    def with_numpy() -> None:
        np.concatenate(pieces, out=out[:len(pieces)])
        out[len(pieces):] = out[len(pieces) - 1]

    def with_merge() -> None:
        serving_merge(pieces, len(pieces), out)

    print(f"{args.pieces} images of 3x224x224 float16 into a batch of {args.batch}, ms per merge")
    for label, merge in (("np.concatenate + broadcast", with_numpy), ("serving merge (memoryview)", with_merge)):
        alone = per_merge_ms(merge, args.repeats, busy=False)
        busy = per_merge_ms(merge, args.repeats, busy=True)
        print(f"  {label:<30} alone {alone:7.2f}   next to a busy Python thread {busy:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
