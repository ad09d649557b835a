"""What the int8 choice at load sees against what calls see afterwards.

``python bench/int8_steady.py --cache DIR --models a,b,c [--rounds 10]`` loads each model's
``DIR/<name>-dynamo.lite`` (fp32) and ``.int8.lite`` with ``device="cpu"`` as users do (the int8
choice and the thread choice at load, no session cache, so each load measures), prints what each
choice kept and why, then times in alternating rounds: fp32 as loaded, int8 as loaded, and the
int8 file forced to each form (``int8_compute="int8"`` / ``"float"``) at 2 and 4 threads, and the int8 file loaded with its
choices made without a first untimed pass over the runners (``FIRST_WARMUP_S = 0``). Each
turn runs ``--calls`` calls after untimed ones; the table gives per runner the median over rounds
of each turn's fastest call and of its median call, and the int8 / fp32 ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

import lite
from lite.engines.ort import int8_choice
from lite.engines.ort.int8_choice import random_feeds
from lite.format import load


def turn(model, feeds, calls: int) -> tuple[float, float]:
    for _ in range(max(10, calls // 5)):
        model.predict(feeds)
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        model.predict(feeds)
        samples.append(time.perf_counter() - started)
    return min(samples) * 1e3, statistics.median(samples) * 1e3


def choices(model) -> dict:
    engine = model.engine
    decision = getattr(engine, "decision", None) or {}
    threads = getattr(engine, "threads_decision", None) or {}
    return {"int8": decision.get("chosen"), "int8 ms": decision.get("ms"), "threads": threads.get("chosen"),
            "threads why": threads.get("why")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", required=True)
    parser.add_argument("--models", required=True)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--json")
    args = parser.parse_args()
    flags = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    cpu = next((line.split(":", 1)[1].strip() for line in flags.splitlines() if line.startswith("Model name")), "?")
    print(f"cpu: {cpu}; vnni: {'avx512_vnni' in flags or 'avx_vnni' in flags}")
    rows = []
    for name in args.models.split(","):
        base = f"{args.cache}/{name}-dynamo"
        runners = {
            "fp32": lite.Model.load(base + ".lite", device="cpu", cache_dir=None),
            "int8": lite.Model.load(base + ".int8.lite", device="cpu", cache_dir=None),
        }
        first_warmup = int8_choice.FIRST_WARMUP_S
        int8_choice.FIRST_WARMUP_S = 0.0  # the choices as made before they warmed each runner up first
        try:
            runners["int8 (cold)"] = lite.Model.load(base + ".int8.lite", device="cpu", cache_dir=None)
        finally:
            int8_choice.FIRST_WARMUP_S = first_warmup
        made = {label: choices(model) for label, model in runners.items()}
        for threads in (2, 4):
            for form in ("int8", "float"):
                runners[f"{form}@{threads}"] = lite.Model.load(base + ".int8.lite", device="cpu", threads=threads,
                                                               int8_compute=form, cache_dir=None)
        feeds = random_feeds(load(base + ".lite"))
        times: dict[str, list[tuple[float, float]]] = {label: [] for label in runners}
        order = list(runners)
        for index in range(args.rounds):
            for label in order if index % 2 == 0 else order[::-1]:
                times[label].append(turn(runners[label], feeds, args.calls))
        row = {"model": name, "choices": made}
        for label, values in times.items():
            row[label] = {"min": statistics.median(v[0] for v in values), "median": statistics.median(v[1] for v in values)}
        row["int8/fp32 median"] = row["int8"]["median"] / row["fp32"]["median"]
        row["int8 (cold)/fp32 median"] = row["int8 (cold)"]["median"] / row["fp32"]["median"]
        row["int8/fp32 min"] = row["int8"]["min"] / row["fp32"]["min"]
        rows.append(row)
        print(f"\n{name}: fp32 kept threads {made['fp32']['threads']}")
        for label in ("int8", "int8 (cold)"):
            print(f"  {label} kept {made[label]['int8']} at threads {made[label]['threads']}; choice ms "
                  f"{json.dumps({k: round(v, 3) for k, v in (made[label]['int8 ms'] or {}).items()})}")
        for label in runners:
            print(f"  {label:14s} fastest {row[label]['min']:.3f}  median {row[label]['median']:.3f} ms")
        print(f"  int8/fp32: median {row['int8/fp32 median']:.3f}, fastest {row['int8/fp32 min']:.3f}; "
              f"with the choice made cold {row['int8 (cold)/fp32 median']:.3f}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"cpu": cpu, "rows": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
