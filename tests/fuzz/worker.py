"""One fuzz worker process: runs inputs ``start..stop`` of one target and reports each outcome.

Started by :mod:`tests.fuzz.run`, never by hand. After the imports and a warm-up on the seeds,
the address space is capped (``RLIMIT_AS`` = what the warm process maps + ``--memory-mb``), so an
allocation sized by an unchecked field fails with ``MemoryError`` instead of taking the machine.
Each input's outcome is one line on stdout, written as soon as the input finishes; the parent
reads them with a deadline, so a hang or a hard crash is attributed to the next index.

Protocol (stdout, one line each): ``ready <VmSize kB>``; ``<index> <ms> ok``,
``<index> <ms> E <ErrorClass>`` (a documented error), ``<index> <ms> O <label>`` (a target that
names its outcomes, e.g. one per engine), ``<index> <ms> X <json>`` (anything else,
with the traceback); ``done <maxrss kB>``.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import resource
import sys
import time
import traceback


def _vm_size_kb() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.worker")
    parser.add_argument("--format", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--start", type=int, required=True)
    parser.add_argument("--stop", type=int, required=True)
    parser.add_argument("--memory-mb", type=int, required=True)
    parser.add_argument("--input-peak-mb", type=int, default=64)
    args = parser.parse_args(argv)

    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w", buffering=1)
    sys.stdout = sys.stderr  # a loader printing must not corrupt the protocol
    faulthandler.enable()

    from tests.fuzz.targets import TARGETS

    target = TARGETS[args.format]()
    for seed in target.seeds:  # warm-up, and a check that every seed is valid to begin with
        try:
            target.run(seed.data, seed.options)
        except BaseException as err:  # noqa: BLE001 - reported to the parent, which stops the run
            protocol.write("seed-invalid " + json.dumps(f"{seed.name}: {type(err).__name__}: {err}") + "\n")
            return 2
    baseline = _vm_size_kb()
    cap = (baseline + args.memory_mb * 1024) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    protocol.write(f"ready {baseline}\n")

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for index in range(args.start, args.stop):
        seed, data = target.generate(args.seed, index)
        started = time.perf_counter()
        try:
            label = target.run(data, seed.options)
            outcome = "ok" if label is None else f"O {label}"
        except target.expected as err:
            outcome = f"E {type(err).__name__}"
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # noqa: BLE001 - every other exception is a finding
            detail = {"seed": seed.name, "error": f"{type(err).__name__}: {err}"[:2000],
                      "traceback": traceback.format_exc()[-6000:]}
            outcome = "X " + json.dumps(detail)
        elapsed = (time.perf_counter() - started) * 1000
        now = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        if target.peak_check and now - peak > args.input_peak_mb * 1024 and outcome[0] != "X":
            # The cap stops huge allocations; this catches the ones under it: no input of a few
            # hundred kB needs tens of MB unless a field sized the allocation.
            detail = {"seed": seed.name, "error": f"MemoryError: peak RSS grew by {(now - peak) // 1024} MiB "
                      f"on one input of {len(data)} bytes (limit {args.input_peak_mb} MiB)", "traceback": ""}
            outcome = "X " + json.dumps(detail)
        peak = max(peak, now)
        protocol.write(f"{index} {elapsed:.2f} {outcome}\n")
    protocol.write(f"done {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
