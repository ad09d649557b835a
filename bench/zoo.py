"""The zoo (tests/zoo/architectures.py) as users run it: lite against ONNX Runtime, quiet and under load, int8 against float.

    python bench/zoo.py [--models NAME,...] [--exporter dynamo|torchscript] [--cache DIR] [--threads 2]
                        [--rounds 5] [--seconds 0.2] [--discard 0.25] [--load] [--no-int8] [--reconvert]
                        [--json FILE]

Each architecture is exported once (``torch.export``-based exporter by default; files cached in
``--cache`` as ``NAME-EXPORTER.onnx``, in a spawned process so torch never shares this one) and
converted with default options (``converter.convert(src, dst)``, what ``lite convert src -o dst``
runs; also cached, ``--reconvert`` redoes it). int8 follows the architecture's ``quant`` field,
as the zoo's tests do: static with 16 random calibration inputs for CNNs, dynamic for
transformers and audio models.

Runners, what users call, all loaded in this process:

- ``ort``: ``onnxruntime.InferenceSession`` on the original ONNX file, default options,
  ``--threads`` intra-op threads (2);
- ``numpy``: ``lite.Model.load(path, device="numpy").predict(feeds)``;
- ``auto``: ``lite.Model.load(path, device="auto").predict(feeds)`` (lite's CPU default);
- ``auto_int8``: the same on the int8 file.

Method. The machine is small and shared, so runners take turns: each round runs every runner once
in a rotating order, and a runner's turn is untimed calls for ``--discard`` seconds (ONNX
Runtime's worker threads spin for a while after a run and would slow whoever runs next) and then
calls for ``--seconds`` (at least 3), whose median is the round's time. Ratios are taken within a round (both sides
measured seconds apart) and the table gives their median over ``--rounds`` rounds. With
``--load``, every round is run twice, quiet and with one competing busy process (a spawned
process multiplying 256x256 float32 matrices on one BLAS thread, paused with SIGSTOP while
quiet), so both conditions see the same outside drift.

Columns: ORT's median ms; numpy/ORT and auto/ORT (quiet); with ``--load``, numpy/ORT under load
and each engine's loaded/quiet time; int8: fp32 file size / int8 file size, and int8 time /
fp32 time on ``auto``. Goals: numpy/ORT <= 3 on transformers and <= 2.5 on CNNs, numpy
loaded/quiet <= 2, auto/ORT <= 1.05, int8 >= 3.5x smaller and not slower than fp32.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.zoo.architectures import (  # noqa: E402
    ARCHITECTURES,
    BY_NAME,
    EXPORTERS,
    Architecture,
    export_by_name,
    group,
)

CALIBRATION_SAMPLES = 16
# The goals hold transformers to 3x ONNX Runtime, CNNs to 2.5x.
GOALS = {"cnn": 2.5, "vision-transformer": 3.0, "text": 3.0, "audio": 3.0}
SPINNER = """
import numpy as np
a = np.random.default_rng(0).standard_normal((256, 256)).astype(np.float32)
while True:
    b = a @ a
"""


# -- files ---------------------------------------------------------------------------------------
def export_all(architectures: list[Architecture], exporter: str, cache: Path) -> dict[str, Path]:
    """The ONNX file of each architecture, exported where the cache lacks it."""
    paths = {a.name: cache / f"{a.name}-{exporter}.onnx" for a in architectures}
    missing = [name for name, path in paths.items() if not path.exists()]
    if missing:
        print(f"exporting {len(missing)} architecture(s) with the {exporter} exporter ...", flush=True)
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
            jobs = {name: pool.submit(export_by_name, name, exporter, paths[name].with_suffix(".partial.onnx"))
                    for name in missing}
            for name, job in jobs.items():
                try:
                    job.result().rename(paths[name])
                except Exception as err:  # noqa: BLE001 - one failed export is reported, the rest run
                    print(f"  {name}: export failed: {type(err).__name__}: {err}", flush=True)
    return {name: path for name, path in paths.items() if path.exists()}


def convert_all(architecture: Architecture, source: Path, int8: bool, reconvert: bool) -> dict[str, Path]:
    """``fp32`` (default options) and, with ``int8``, ``int8`` .lite files beside ``source``."""
    import converter

    files = {"fp32": source.with_suffix(".lite")}
    if int8:
        files["int8"] = source.with_suffix(".int8.lite")
    for kind, path in files.items():
        if path.exists() and not reconvert and path.stat().st_mtime >= source.stat().st_mtime:
            continue
        if kind == "fp32":
            converter.convert(source, path)
        elif architecture.quant == "static":
            calibration = [architecture.make_inputs(np.random.default_rng(100 + i)) for i in range(CALIBRATION_SAMPLES)]
            converter.convert(source, path, quant="int8", calibration_data=calibration)
        else:
            converter.convert(source, path, quant="int8-dynamic")
    return files


# -- measuring -----------------------------------------------------------------------------------
def runners(source: Path, files: dict[str, Path], feeds: dict[str, np.ndarray], threads: int,
            notes: list[str]) -> dict[str, Callable[[], object]]:
    import onnxruntime as ort

    import lite

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.log_severity_level = 3
    session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    calls: dict[str, Callable[[], object]] = {"ort": lambda: session.run(None, feeds)}
    wanted = [("numpy", "fp32", "numpy"), ("auto", "fp32", "auto"), ("auto_int8", "int8", "auto")]
    for name, kind, device in wanted:
        if kind not in files:
            continue
        try:
            model = lite.Model.load(files[kind], device=device)
            model.predict(feeds)
        except lite.LiteError as err:
            notes.append(f"{name}: {type(err).__name__}: {str(err).splitlines()[0]}")
            continue
        calls[name] = lambda model=model: model.predict(feeds)
    return calls


def burst(call: Callable[[], object], seconds: float, discard: float) -> float:
    """Median seconds of the calls made in ``seconds`` (at least 3), after ``discard`` seconds of
    untimed calls (at least one)."""
    deadline = time.perf_counter() + discard
    call()
    while time.perf_counter() < deadline:
        call()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < 3 or time.perf_counter() - started < seconds:
        begin = time.perf_counter()
        call()
        times.append(time.perf_counter() - begin)
    return statistics.median(times)


class BusyProcess:
    """One process spinning BLAS matmuls on one thread; paused (SIGSTOP) unless ``on``."""

    def __init__(self) -> None:
        environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-c", SPINNER], env=environment)
        self.running = True
        self.set(False)

    def set(self, on: bool) -> None:
        if on != self.running:
            self.process.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
            self.running = on
            time.sleep(0.05)

    def close(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.process.kill()
        self.process.wait()


def measure(calls: dict[str, Callable[[], object]], rounds: int, seconds: float, discard: float,
            busy: BusyProcess | None) -> dict[str, dict[str, list[float]]]:
    """condition ("quiet", "loaded") -> runner -> seconds per round."""
    conditions = ["quiet", "loaded"] if busy is not None else ["quiet"]
    times: dict[str, dict[str, list[float]]] = {c: {name: [] for name in calls} for c in conditions}
    order = list(calls)
    for index in range(rounds):
        for condition in conditions if index % 2 == 0 else conditions[::-1]:
            if busy is not None:
                busy.set(condition == "loaded")
            shift = index % len(order)
            for name in order[shift:] + order[:shift]:
                times[condition][name].append(burst(calls[name], seconds, discard))
    if busy is not None:
        busy.set(False)
    return times


def ratio(times: dict[str, list[float]], top: str, bottom: str) -> float | None:
    if top not in times or bottom not in times:
        return None
    return statistics.median(a / b for a, b in zip(times[top], times[bottom], strict=True))


def summarize(architecture: Architecture, files: dict[str, Path], times: dict[str, dict[str, list[float]]],
              notes: list[str]) -> dict:
    quiet = times["quiet"]
    row = {"model": architecture.name, "family": group(architecture), "notes": notes,
           "ms": {c: {name: statistics.median(v) * 1e3 for name, v in runner.items()} for c, runner in times.items()},
           "numpy/ort": ratio(quiet, "numpy", "ort"), "auto/ort": ratio(quiet, "auto", "ort"),
           "int8/fp32": ratio(quiet, "auto_int8", "auto")}
    if "int8" in files:
        row["fp32/int8 size"] = files["fp32"].stat().st_size / files["int8"].stat().st_size
    if "loaded" in times:
        loaded = times["loaded"]
        row["numpy/ort loaded"] = ratio(loaded, "numpy", "ort")
        for name in ("numpy", "ort", "auto"):
            if name in loaded:
                row[f"{name} loaded/quiet"] = statistics.median(
                    a / b for a, b in zip(loaded[name], quiet[name], strict=True))
    return row


# -- report --------------------------------------------------------------------------------------
COLUMNS = [("numpy/ort", "numpy/ORT"), ("auto/ort", "auto/ORT"), ("numpy/ort loaded", "np/ORT load"),
           ("numpy loaded/quiet", "np load/q"), ("ort loaded/quiet", "ORT load/q"),
           ("fp32/int8 size", "int8 smaller"), ("int8/fp32", "int8/fp32 t")]


def cell(value: float | None, width: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.2f}"


def print_row(row: dict) -> None:
    ort_ms = row["ms"]["quiet"].get("ort")
    cells = [f"{row['model']:<16}{row['family']:<19}", f"{ort_ms:>9.2f}"]
    cells += [cell(row.get(key), max(len(title) + 2, 9)) for key, title in COLUMNS]
    print("".join(cells), flush=True)
    for note in row["notes"]:
        print(f"    {note}", flush=True)


def print_header() -> None:
    titles = "".join(f"{title:>{max(len(title) + 2, 9)}}" for _, title in COLUMNS)
    print(f"\n{'model':<16}{'family':<19}{'ORT ms':>9}{titles}", flush=True)


def print_medians(rows: list[dict]) -> None:
    print("\nmedians per family (goal: numpy/ORT <= 3 transformers, <= 2.5 CNNs; np load/q <= 2; "
          "auto/ORT <= 1.05; int8 >= 3.5x smaller, int8/fp32 <= 1)")
    for family in sorted({row["family"] for row in rows}):
        mine = [row for row in rows if row["family"] == family]
        cells = [f"{family + f' ({len(mine)})':<35}{'':>9}"]
        for key, title in COLUMNS:
            values = [row[key] for row in mine if row.get(key) is not None]
            cells.append(cell(statistics.median(values) if values else None, max(len(title) + 2, 9)))
        print("".join(cells))
    misses = []
    for row in rows:
        goal = GOALS[row["family"]]
        checks = [("numpy/ort", goal), ("numpy loaded/quiet", 2.0), ("auto/ort", 1.05)]
        if row["family"] == "cnn":
            checks += [("int8/fp32", 1.0)]
        for key, limit in checks:
            if row.get(key) is not None and row[key] > limit:
                misses.append(f"{row['model']} {key} {row[key]:.2f} > {limit}")
        size = row.get("fp32/int8 size")
        if size is not None and size < 3.5:
            misses.append(f"{row['model']} int8 only {size:.2f}x smaller")
    print(f"\ngoals missed ({len(misses)}):")
    for miss in misses:
        print(f"  {miss}")


def machine() -> dict[str, str]:
    """The CPU's name and its vector/matrix flags (from lscpu), core count and load."""
    info = {"cores": str(os.cpu_count()), "load average": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "Model name":
            info["cpu"] = value.strip()
        elif key.strip() == "Flags":
            wanted = ("avx", "fma", "f16c", "amx", "vnni", "bf16")
            info["flags"] = " ".join(f for f in value.split() if f.startswith(wanted) or "vnni" in f)
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="", help="comma-separated architecture names (default: all)")
    parser.add_argument("--exporter", choices=EXPORTERS, default="dynamo")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lite-bench-zoo")
    parser.add_argument("--threads", type=int, default=2, help="ONNX Runtime's intra-op threads (default 2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=0.2, help="timed seconds per runner per round")
    parser.add_argument("--discard", type=float, default=0.25,
                        help="untimed seconds before each runner's timed calls (ONNX Runtime's idle threads spin on)")
    parser.add_argument("--load", action="store_true", help="also measure under one competing busy process")
    parser.add_argument("--no-int8", dest="int8", action="store_false")
    parser.add_argument("--reconvert", action="store_true", help="convert again even where the cache has files")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    names = [name for name in args.models.split(",") if name]
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown architecture(s) {unknown}; known: {', '.join(BY_NAME)}")
    architectures = [BY_NAME[name] for name in names] if names else list(ARCHITECTURES)
    args.cache.mkdir(parents=True, exist_ok=True)
    sources = export_all(architectures, args.exporter, args.cache)
    before = machine()
    print(" | ".join(f"{key}: {value}" for key, value in before.items()))
    print(f"exporter {args.exporter}; ORT {args.threads} threads; {args.rounds} rounds x {args.seconds} s per runner"
          f"{'; quiet and under one busy process' if args.load else '; quiet only'}")
    busy = BusyProcess() if args.load else None
    rows = []
    print_header()
    try:
        for architecture in architectures:
            if architecture.name not in sources:
                continue
            notes: list[str] = []
            try:
                files = convert_all(architecture, sources[architecture.name], args.int8, args.reconvert)
            except Exception as err:  # noqa: BLE001 - a failed conversion is a row of the table
                print(f"{architecture.name:<16}conversion failed: {type(err).__name__}: {str(err).splitlines()[0]}")
                continue
            feeds = architecture.make_inputs(np.random.default_rng(0))
            calls = runners(sources[architecture.name], files, feeds, args.threads, notes)
            times = measure(calls, args.rounds, args.seconds, args.discard, busy)
            del calls
            rows.append(summarize(architecture, files, times, notes))
            print_row(rows[-1])
    finally:
        if busy is not None:
            busy.close()
    print_medians(rows)
    after = machine()["load average"]
    print(f"\nload average before: {before['load average']}; after: {after}")
    if args.json:
        args.json.write_text(json.dumps({"machine": before, "load_after": after, "args": {
            k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
