#!/usr/bin/env python3
"""The GPU checks of the torch engine's start-up, per-call speed, packages and CUDA custom ops,
in one script that checks, measures and prints a table (device time is scarce: few calls).

Phases (each prints its rows and writes them to ``--out/<phase>.json``):

- ``ops``: a CUDA kernel with MindSpore's AOT signature, built with nvcc, runs inside the torch
  engine on CUDA (device pointers, the engine's stream: checked by a kernel that records the
  stream it got), and trains in a ``train`` Cell with bprop; then the ``gpu`` tests.
- ``startup`` (batch 1, ResNet-50 fp16 as bench/gpu_resnet50.py makes it): a cold process with
  the default policy (background upgrade) — seconds from process start to the first result, the
  fast configuration's latency, when the compiled one was swapped in and its latency; then, in
  that process, ``predict`` with PyTorch / CuPy / numpy inputs against ``torch.compile``
  reduce-overhead and eager on the original network; a warm process on the same cache; ``lite
  compile`` of the batch; a process with a fresh cache and the package (and one whose package
  says another GPU architecture: it must fall back and say why).
- ``b256``: ``lite compile --batch-sizes 256`` (cold), a fresh process with the package to full
  speed, and ``predict`` (PyTorch, CuPy, numpy, pinned numpy inputs) against ``torch.compile``
  max-autotune on the original network.

    python bench/gpu_issue_check.py --phases ops startup --out $OUT
    python bench/gpu_issue_check.py --phases b256 --out $OUT
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _gpu_custom_ops import phase_ops  # noqa: E402  (beside this script)


def say(what: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------------
# ResNet-50 and the measuring children
# ------------------------------------------------------------------------------------------------
def make_model(workdir: Path) -> Path:
    from gpu_resnet50 import export

    from converter import convert_model
    from lite.format import save

    path = workdir / "r50.lite"
    if not path.exists():
        _, fp32_path, _ = export(workdir)
        save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), path)
    return path


def latency_ms(fn, sync, seconds: float = 1.0, min_iters: int = 20) -> float:
    """Median milliseconds per call, each call waited for (a caller that needs its answer)."""
    from gpu_resnet50 import timed

    return timed(fn, sync, seconds, min_iters) * 1e3


def queued_seconds(fn, sync, calls: int) -> tuple[float, float]:
    """Seconds per call in a loop of calls queued back to back, after warm-up: the host's time
    to queue them, and the time until the GPU has done them all (one synchronize at the end)."""
    for _ in range(5):
        fn()
    sync()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    queued = time.perf_counter() - start
    sync()
    return queued / calls, (time.perf_counter() - start) / calls


def host_us(fn, sync, calls: int = 50) -> float:
    """Microseconds of host time per call: calls queued without waiting (the GPU catches up after)."""
    return queued_seconds(fn, sync, calls)[0] * 1e6


def pipelined_ms(fn, sync, calls: int = 200) -> float:
    """Milliseconds per call in a loop that waits once at the end (calls queued back to back)."""
    return queued_seconds(fn, sync, calls)[1] * 1e3


def child(args: argparse.Namespace) -> None:
    """One measured process: load, first result, then what ``--what`` asks."""
    started = float(args.started)
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("lite").setLevel(logging.INFO)
    import torch

    import lite

    report: dict = {"import_s": round(time.perf_counter() - started, 2)}
    options = {} if args.startup is None else {"startup": args.startup}
    model = lite.Model.load(args.model, engine="torch", device="cuda", precision="fp16", cache_dir=args.cache,
                            **options)
    report["load_s"] = round(time.perf_counter() - started, 2)
    x = torch.randn(args.batch, 3, 224, 224, device="cuda").half()
    model.predict({"input": x})
    torch.cuda.synchronize()
    report["first_result_s"] = round(time.perf_counter() - started, 2)
    engine = model.engine
    report["state_after_first"] = engine.startup_state()
    sync = torch.cuda.synchronize
    call = lambda: model.predict({"input": x})  # noqa: E731
    report["first_config_ms"] = round(latency_ms(call, sync, 0.5), 4)
    if args.what in ("upgrade", "compare"):
        done = engine.wait_until_best(timeout=args.budget)
        report["best_swapped_in_s"] = round(time.perf_counter() - started, 2) if done else None
        report["state_after_wait"] = engine.startup_state()
        report["best_config_ms"] = round(latency_ms(call, sync, 0.5), 4)
    if args.what == "compare":
        report["compare"] = compare(model, args.batch, args.peer_mode)
    print("REPORT " + json.dumps(report), flush=True)


def compare(model, batch: int, peer_mode: str) -> dict:
    """predict with device / host inputs against torch.compile and eager on the original network,
    same process, interleaved rounds; medians."""
    import cupy
    import torch
    import torchvision

    import lite

    torch.manual_seed(0)
    net = torchvision.models.resnet50(weights=None).eval().half().cuda().to(memory_format=torch.channels_last)
    x = torch.randn(batch, 3, 224, 224, device="cuda").half()
    x_cupy = cupy.from_dlpack(x.clone())
    x_numpy = x.cpu().numpy()
    x_pinned = lite.pinned_empty(x_numpy.shape, np.float16)
    x_pinned[...] = x_numpy
    sync = torch.cuda.synchronize
    say(f"compiling torch.compile {peer_mode} at batch {batch} (cold)")
    started = time.perf_counter()
    peer = torch.compile(net, mode=peer_mode)
    with torch.no_grad():
        for _ in range(3):
            reference = peer(x.contiguous(memory_format=torch.channels_last))
        sync()
    peer_compile_s = time.perf_counter() - started
    lite_out = torch.from_dlpack(model.predict({"input": x})["logits"]).float()
    reference = reference.float()
    cosine = torch.nn.functional.cosine_similarity(lite_out.flatten(), reference.flatten(), dim=0).item()
    top1 = (lite_out.argmax(1) == reference.argmax(1)).float().mean().item()
    x_cl = x.contiguous(memory_format=torch.channels_last)

    def peer_call():
        with torch.no_grad():
            return peer(x_cl)

    def eager_call():
        with torch.no_grad():
            return net(x_cl)

    runners = {
        "lite predict, torch in": lambda: model.predict({"input": x}),
        "lite predict, cupy in": lambda: model.predict({"input": x_cupy}),
        "lite predict, numpy in/out": lambda: model.predict({"input": x_numpy}),
        "lite predict, pinned numpy in": lambda: model.predict({"input": x_pinned}),
        "lite engine.run, torch in": lambda: model.engine.run({"input": x}),
        f"torch.compile {peer_mode}": peer_call,
        "eager fp16 channels-last": eager_call,
    }
    latency: dict = {name: [] for name in runners}
    pipelined: dict = {name: [] for name in runners}
    for round_index in range(3):
        for name in list(runners)[round_index % len(runners):] + list(runners)[:round_index % len(runners)]:
            latency[name].append(latency_ms(runners[name], sync, 0.5))
            if "numpy" not in name:
                pipelined[name].append(pipelined_ms(runners[name], sync, 100 if batch < 64 else 20))
    return {"batch": batch, "cosine": round(cosine, 6), "top1_agreement": top1,
            "peer_compile_s": round(peer_compile_s, 1),
            "latency_ms": {k: round(float(np.median(v)), 4) for k, v in latency.items()},
            "pipelined_ms": {k: round(float(np.median(v)), 4) for k, v in pipelined.items() if v}}


def run_child(label: str, model: Path, cache: Path, batch: int, what: str, *, startup: str | None = None,
              budget: float = 400, peer_mode: str = "reduce-overhead", timeout: float = 560) -> dict:
    say(f"--- {label}")
    command = [sys.executable, str(Path(__file__).resolve()), "--child", "--model", str(model), "--cache", str(cache),
               "--batch", str(batch), "--what", what, "--budget", str(budget), "--peer-mode", peer_mode,
               "--started", repr(time.perf_counter())]
    if startup:
        command += ["--startup", startup]
    environment = dict(os.environ)
    environment.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed package has its bytecode
    environment["PYTHONPYCACHEPREFIX"] = str(cache.parent / "pycache")
    try:
        done = subprocess.run(command, stdout=subprocess.PIPE, text=True, cwd=ROOT, timeout=timeout, env=environment)
    except subprocess.TimeoutExpired:
        return {"label": label, "error": f"ran over {timeout:.0f} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    if done.returncode != 0 or not lines:
        return {"label": label, "error": f"exit {done.returncode}", "tail": done.stdout[-1500:]}
    report = json.loads(lines[-1][len("REPORT "):])
    report["label"] = label
    say(f"{label}: {json.dumps(report)[:1500]}")
    return report


def lite_compile(model: Path, cache: Path, batches: list[int]) -> dict:
    say(f"--- lite compile --batch-sizes {batches}")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lite.cli", "compile", str(model), "--device", "cuda",
                           "--batch-sizes", *map(str, batches), "--cache-dir", str(cache)],
                          cwd=ROOT, capture_output=True, text=True, timeout=560)
    report = {"seconds": round(time.perf_counter() - started, 1), "exit": done.returncode}
    try:
        report.update(json.loads(done.stdout))
    except ValueError:
        report["tail"] = (done.stdout + done.stderr)[-2000:]
    say(f"lite compile: {report}")
    return report


def foreign_package(model: Path) -> Path:
    """A copy of the model and its package whose manifest says another GPU architecture."""
    target = model.with_name("r50_other.lite")
    shutil.copy(model, target)
    package = Path(str(target) + ".compiled")
    shutil.rmtree(package, ignore_errors=True)
    shutil.copytree(Path(str(model) + ".compiled"), package)
    manifest = json.loads((package / "manifest.json").read_text())
    manifest["built_for"]["gpu_arch"] = "sm_80"
    manifest["built_for"]["gpu_name"] = "NVIDIA A100-SXM4-80GB"
    (package / "manifest.json").write_text(json.dumps(manifest))
    return target


def phase_startup(workdir: Path, budget: float) -> dict:
    model = make_model(workdir)
    cold_cache = workdir / "cache_cold"
    results = {"cold_background": run_child("cold cache, default policy (background upgrade), batch 1", model,
                                            cold_cache, 1, "compare", budget=budget)}
    results["warm"] = run_child("warm cache, batch 1", model, cold_cache, 1, "first", timeout=240)
    results["lite_compile"] = lite_compile(model, cold_cache, [1])
    results["package"] = run_child("fresh cache + package beside the model, batch 1", model, workdir / "cache_pkg",
                                   1, "first", startup="fast", timeout=240)
    if (Path(str(model) + ".compiled") / "manifest.json").exists():
        results["package_mismatch"] = run_child("fresh cache + package of another GPU arch, fast start", foreign_package(model),
                                                workdir / "cache_other", 1, "first", startup="fast", timeout=240)
    return results


def phase_b256(workdir: Path, budget: float) -> dict:
    model = make_model(workdir)
    cache = workdir / "cache_b256"
    results = {"lite_compile": lite_compile(model, cache, [256])}
    results["package"] = run_child("fresh cache + package, batch 256, vs torch.compile max-autotune", model,
                                   workdir / "cache_b256_pkg", 256, "compare", startup="best", budget=60,
                                   peer_mode="max-autotune", timeout=520)
    return results


def table(results: dict) -> None:
    for phase, rows in results.items():
        print(f"\n== {phase}")
        if not isinstance(rows, dict):
            print(rows)
            continue
        for key, value in rows.items():
            if isinstance(value, dict) and "label" in value:
                print(f"-- {value['label']}")
                for field in ("import_s", "load_s", "first_result_s", "first_config_ms", "best_swapped_in_s",
                              "best_config_ms", "error"):
                    if field in value:
                        print(f"   {field:<20} {value[field]}")
                if "state_after_first" in value:
                    print(f"   state after first   {value['state_after_first']}")
                if "state_after_wait" in value:
                    print(f"   state after wait    {value['state_after_wait']['shapes']}")
                compared = value.get("compare")
                if compared:
                    print(f"   batch {compared['batch']}: cosine {compared['cosine']}, top-1 {compared['top1_agreement']}, "
                          f"peer compile {compared['peer_compile_s']} s")
                    print(f"   {'runner':<36} {'ms/call (waited)':>17} {'ms/call (queued)':>17}")
                    for name, ms in compared["latency_ms"].items():
                        queued = compared["pipelined_ms"].get(name)
                        print(f"   {name:<36} {ms:>17.4f} {'' if queued is None else f'{queued:.4f}':>17}")
            else:
                print(f"   {key}: {json.dumps(value) if not isinstance(value, str) else value}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", nargs="+", choices=("ops", "startup", "b256"), default=["ops", "startup"])
    parser.add_argument("--out", default=None, help="folder for <phase>.json")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--budget", type=float, default=330, help="seconds to wait for the background upgrade")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--cache", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--what", default="first", help=argparse.SUPPRESS)
    parser.add_argument("--startup", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--peer-mode", default="reduce-overhead", help=argparse.SUPPRESS)
    parser.add_argument("--started", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return 0
    workdir = Path(args.workdir or tempfile.mkdtemp())
    workdir.mkdir(parents=True, exist_ok=True)
    out = Path(args.out) if args.out else None
    results: dict = {}
    for phase in args.phases:
        say(f"=== phase {phase}")
        try:
            if phase == "ops":
                results[phase] = phase_ops(workdir, say)
            elif phase == "startup":
                results[phase] = phase_startup(workdir, args.budget)
            else:
                results[phase] = phase_b256(workdir, args.budget)
        except Exception as err:  # noqa: BLE001 - report the phase's failure and go on with the next
            import traceback

            results[phase] = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-3000:]}
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / f"{phase}.json").write_text(json.dumps(results[phase], indent=2, default=str))
    table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
