"""CPU engines at batch 1: lite (engine="auto") against ONNX Runtime and OpenVINO, same run.

Models: ResNet-18 and MobileNetV2 at 224x224 (tests/converter/models.py, dynamo style), written
as .onnx for the peers and converted to .lite (converter.convert_model + lite.format.save).

Configurations, each in its own process:

- ``ort_fp32``:  a plain ``onnxruntime.InferenceSession`` on the .onnx (all optimizations);
- ``ov_fp32``:   ``openvino.Core().compile_model`` on the .onnx, ``INFERENCE_PRECISION_HINT=f32``;
- ``ov_bf16``:   the same with ``bf16`` (OpenVINO's default on CPUs with bf16 units);
- ``lite_exact``: ``lite.Model.load(path, engine="auto", precision="exact")`` + ``model.predict``;
- ``lite_bf16``:  ``lite.Model.load(path, engine="auto", precision="bf16")`` + ``model.predict``;
- int8 (optional, ``--configs ort_int8,ov_int8,lite_int8``): the model quantized once by
  ``lite convert --quant int8`` (QDQ, 16 random calibration images) and written both as .onnx and
  .lite; ``ort_int8`` and ``ov_int8`` (f32 hint for the float parts) run the .onnx,
  ``lite_int8`` the .lite with ``engine="auto", precision="exact"``.

Targets: lite_exact <= 1.0x min(ort_fp32, ov_fp32); lite_bf16 <= 1.0x ov_bf16;
lite_int8 <= 1.0x min(ort_int8, ov_int8); a second process start with warm caches reaches full
speed within 2 s.

Method. The machine's 2 cores are shared with other work, whose load changes from second to
second, so the configurations are measured *interleaved*: one long-lived process per
configuration (engine loaded once), and ``--cycles`` cycles in which each process in turn (in a
fresh random order every cycle) runs untimed calls for ``--discard`` seconds (the previous
process's threads may still be spinning: ONNX Runtime's workers spin ~0.3 s after a run) and
then ``--calls`` timed calls, reporting their median. All configurations of one
cycle are measured within about a second of each other, so the per-cycle ratios (lite over its
peer) cancel most of the outside load; the report gives per-configuration medians with their
interquartile range and the ratios' median and interquartile range. The load average is
printed before and after.

Starts. lite's caches live in a fresh folder (``XDG_CACHE_HOME``). A *cold* start (tuning and
compiling) is timed once per lite configuration; then ``--starts`` fresh processes per
configuration time a *warm* start: from just before the parent starts the process to the end of
the first call no slower than 1.25x that process's own steady median (imports, load and compile
included).

    python bench/cpu_engines.py [--cycles 30] [--calls 10] [--starts 5] [--models resnet18,mobilenet_v2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ("ort_fp32", "ov_fp32", "ov_bf16", "lite_exact", "lite_bf16")
INT8_CONFIGS = ("ort_int8", "ov_int8", "lite_int8")  # with --configs ...,ort_int8,ov_int8,lite_int8
FULL_SPEED = 1.25


def build(directory: Path, names: list[str], int8: bool) -> None:
    """``NAME.onnx`` and ``NAME.lite``; with ``int8``, also ``NAME_int8.onnx`` and ``NAME_int8.lite``:
    the same QDQ model (lite convert --quant int8, 16 random calibration images) in both formats."""
    sys.path.insert(0, str(ROOT / "tests" / "converter"))
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import onnx
    from models import BUILDERS

    import converter
    import lite.format

    calibration = directory / "calibration"
    if int8:
        calibration.mkdir()
        rng = np.random.default_rng(0)
        for index in range(16):
            np.save(calibration / f"{index:04d}.npy", rng.standard_normal((3, 224, 224)).astype(np.float32))
    for name in names:
        proto = BUILDERS[name]("dynamo", image_size=224)
        onnx.save(proto, directory / f"{name}.onnx")
        lite.format.save(converter.convert_model(proto), directory / f"{name}.lite")
        for suffix in (".lite", ".onnx") if int8 else ():
            converter.convert(directory / f"{name}.onnx", directory / f"{name}_int8{suffix}", quant="int8",
                              calibration_data=str(calibration), calibration_size=16)


def load_call(config: str, directory: Path, name: str):
    """The configuration's engine, loaded, as a no-argument call; and the engine lite chose."""
    import numpy as np

    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    if config.endswith("_int8"):
        name = f"{name}_int8"
    if config in ("ort_fp32", "ort_int8"):
        import onnxruntime as ort

        session = ort.InferenceSession(str(directory / f"{name}.onnx"), providers=["CPUExecutionProvider"])
        input_name = session.get_inputs()[0].name
        return (lambda: session.run(None, {input_name: x})), "onnxruntime"
    if config.startswith("ov_"):
        import openvino as ov

        hint = "bf16" if config == "ov_bf16" else "f32"
        compiled = ov.Core().compile_model(str(directory / f"{name}.onnx"), "CPU",
                                           {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY"})
        request = compiled.create_infer_request()
        return (lambda: request.infer([x], share_inputs=True)), "openvino"
    sys.path.insert(0, str(ROOT))
    import lite

    precision = "exact" if config == "lite_int8" else config.removeprefix("lite_")
    model = lite.Model.load(directory / f"{name}.lite", engine="auto", precision=precision)
    return (lambda: model.predict({"input": x})), model.device


def timed(call, count: int) -> list[float]:
    times = []
    for _ in range(count):
        begin = time.perf_counter()
        call()
        times.append((time.perf_counter() - begin) * 1e3)
    return times


def start_worker(config: str, directory: Path, name: str, started: float, calls: int) -> dict:
    """One fresh process: time to full speed (see the module docstring)."""
    call, chosen = load_call(config, directory, name)
    loaded = time.time() - started
    ends, times = [], []
    for _ in range(calls):
        times.extend(timed(call, 1))
        ends.append(time.time() - started)
    median = statistics.median(times[len(times) // 2:])
    ready = next(end for end, ms in zip(ends, times) if ms <= FULL_SPEED * median)
    return {"config": config, "model": name, "engine": chosen, "load_s": loaded, "full_speed_s": ready,
            "steady_ms": median}


def serve_worker(config: str, directory: Path, name: str) -> None:
    """A long-lived process: load, then answer ``burst CALLS DISCARD_SECONDS`` lines with the timed calls."""
    call, chosen = load_call(config, directory, name)
    print(json.dumps({"engine": chosen}), flush=True)
    for line in sys.stdin:
        command = line.split()
        if not command or command[0] != "burst":
            break
        calls, discard_s = int(command[1]), float(command[2])
        deadline = time.perf_counter() + discard_s
        while time.perf_counter() < deadline:
            call()
        print(json.dumps(timed(call, calls)), flush=True)


def spawn_start(config: str, directory: Path, name: str, calls: int, env: dict) -> dict:
    started = time.time()
    command = [sys.executable, __file__, "--worker", "start", "--config", config, "--dir", str(directory),
               "--models", name, "--started", repr(started), "--calls", str(calls)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{config} on {name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def interleave(configs: list[str], directory: Path, name: str, args: argparse.Namespace, env: dict) -> list[dict]:
    workers = {}
    for config in configs:
        command = [sys.executable, __file__, "--worker", "serve", "--config", config, "--dir", str(directory),
                   "--models", name]
        workers[config] = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    engines = {config: json.loads(process.stdout.readline())["engine"] for config, process in workers.items()}
    cycles = []
    order = random.Random(0)
    try:
        for _ in range(args.cycles):
            result = {}
            # A fresh order each cycle: each configuration follows each other one equally often
            # (a rotation would keep the same predecessor, and ORT's spinning threads slow the next).
            for config in order.sample(configs, len(configs)):
                process = workers[config]
                process.stdin.write(f"burst {args.calls} {args.discard}\n")
                process.stdin.flush()
                result[config] = statistics.median(json.loads(process.stdout.readline()))
            cycles.append({"model": name, "engines": engines, "ms": result})
    finally:
        for process in workers.values():
            process.stdin.close()
            process.wait()
    return cycles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument("--calls", type=int, default=10, help="timed calls per burst")
    parser.add_argument("--discard", type=float, default=0.3, help="seconds of untimed calls before each burst")
    parser.add_argument("--starts", type=int, default=5, help="warm process starts per lite configuration")
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--configs", default=",".join(CONFIGS))
    parser.add_argument("--json", help="write the raw results here")
    parser.add_argument("--worker", choices=("start", "serve"), help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    parser.add_argument("--dir", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    names = args.models.split(",")
    if args.worker == "start":
        print(json.dumps(start_worker(args.config, Path(args.dir), names[0], args.started, args.calls)))
        return 0
    if args.worker == "serve":
        serve_worker(args.config, Path(args.dir), names[0])
        return 0
    configs = args.configs.split(",")
    lite_configs = [c for c in configs if c.startswith("lite_")]
    with tempfile.TemporaryDirectory(prefix="cpu_engines_") as folder:
        directory = Path(folder)
        build(directory, names, int8=any(config.endswith("_int8") for config in configs))
        env = {**os.environ, "XDG_CACHE_HOME": str(directory / "cache")}
        print(f"load average before: {os.getloadavg()}", flush=True)
        starts = []
        for name in names:
            for config in lite_configs:
                cold = spawn_start(config, directory, name, 20, env)
                print(f"cold start {name} {config}: full speed after {cold['full_speed_s']:.2f} s "
                      f"(tuning and compiling included; chose {cold['engine']})", flush=True)
        cycles = []
        for name in names:
            cycles.extend(interleave(configs, directory, name, args, env))
            print(f"{name}: {args.cycles} interleaved cycles done", flush=True)
        for _ in range(args.starts):
            for name in names:
                for config in lite_configs:
                    starts.append(spawn_start(config, directory, name, 40, env))
        print(f"load average after: {os.getloadavg()}")
    report(cycles, starts, names, configs)
    if args.json:
        Path(args.json).write_text(json.dumps({"cycles": cycles, "starts": starts}, indent=2))
    return 0


def quartiles(values: list[float]) -> tuple[float, float, float]:
    q1, _, q3 = statistics.quantiles(values, n=4) if len(values) > 1 else (values[0],) * 3
    return q1, statistics.median(values), q3


def report(cycles: list[dict], starts: list[dict], names: list[str], configs: list[str]) -> None:
    print(f"\n{'model':<14}{'config':<12}{'engine':<18}{'median ms':>10}{'q1':>9}{'q3':>9}")
    for name in names:
        mine = [c for c in cycles if c["model"] == name]
        for config in configs:
            q1, median, q3 = quartiles([c["ms"][config] for c in mine])
            print(f"{name:<14}{config:<12}{mine[0]['engines'][config]:<18}{median:>10.3f}{q1:>9.3f}{q3:>9.3f}")
    print("\nper-cycle ratios (median [q1, q3] over cycles; target <= 1.0):")
    for name in names:
        mine = [c["ms"] for c in cycles if c["model"] == name]
        if {"lite_exact", "ort_fp32", "ov_fp32"} <= set(configs):
            q1, median, q3 = quartiles([c["lite_exact"] / min(c["ort_fp32"], c["ov_fp32"]) for c in mine])
            print(f"  {name}: lite exact / min(ORT fp32, OpenVINO fp32) = {median:.3f}x [{q1:.3f}, {q3:.3f}]")
            q1, median, q3 = quartiles([c["ov_fp32"] / c["ort_fp32"] for c in mine])
            print(f"  {name}: (OpenVINO fp32 / ORT fp32 = {median:.3f}x [{q1:.3f}, {q3:.3f}])")
        if {"lite_bf16", "ov_bf16"} <= set(configs):
            q1, median, q3 = quartiles([c["lite_bf16"] / c["ov_bf16"] for c in mine])
            print(f"  {name}: lite bf16 / OpenVINO bf16 = {median:.3f}x [{q1:.3f}, {q3:.3f}]")
        if {"lite_int8", "ort_int8", "ov_int8"} <= set(configs):
            q1, median, q3 = quartiles([c["lite_int8"] / min(c["ort_int8"], c["ov_int8"]) for c in mine])
            print(f"  {name}: lite int8 / min(ORT int8, OpenVINO int8) = {median:.3f}x [{q1:.3f}, {q3:.3f}]")
    if starts:
        print("\nwarm starts (seconds from process start; median / max over starts; target <= 2 s):")
        for name in names:
            for config in sorted({s["config"] for s in starts}):
                mine = [s for s in starts if s["model"] == name and s["config"] == config]
                ready = [s["full_speed_s"] for s in mine]
                loaded = [s["load_s"] for s in mine]
                print(f"  {name:<14}{config:<12} loaded {statistics.median(loaded):.2f} / {max(loaded):.2f}   "
                      f"full speed {statistics.median(ready):.2f} / {max(ready):.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
