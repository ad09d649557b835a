#!/usr/bin/env python3
"""ResNet-50 fp16 on one GPU: lite's torch engine against torch.compile and ONNX Runtime.

The network is torchvision's ResNet-50 with random weights, exported with the legacy exporter
and converted as bench/gpu_resnet50.py does (``convert_model(fp16=True, fp16_io=True,
dynamic_batch=True)``). Measured in one process, inputs resident on the GPU, per batch size:

- lite torch engine, ``mode="max-autotune"`` and ``mode="reduce-overhead"`` (torch tensors in,
  torch tensors out);
- the peer: ``torch.compile(mode="max-autotune")`` on the original PyTorch model (float16,
  channels-last weights);
- ONNX Runtime's best CUDA configuration (NHWC + CUDA graph + IOBinding with fixed buffers, the
  configuration of bench/gpu_resnet50.py) on the float16 ONNX export;

then a second process with warm caches: seconds from its start to its first result and to full
speed. Prints images/s, ms/image and the ratios the issue's acceptance names:
batch 256 ≥ 1.0× torch.compile max-autotune and ≥ 2.4× ORT best; batch 1 ≤ 0.5 ms per image;
warm start ≤ 10 s.

Every measurement is guarded (an error is recorded, the run goes on) and a time budget skips
what no longer fits (``--budget``, 460 s by default; compilation dominates: max-autotune takes
minutes per batch size on a cold cache). Compile caches go to ``--cache-dir`` (a fresh temporary
folder by default, so the first compile is cold and the warm start is honest).

    python bench/gpu_engines.py --json gpu_engines.json               # on the GPU machine
    python bench/gpu_engines.py --no-aot --json gpu_engines.json      # lite through torch.compile
    python bench/gpu_engines.py --device cpu --model tiny --batches 1 2 --quick   # logic check on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from _engine_contenders import (
    build_network,
    copy_of,
    export_models,
    lite_runner,
    ort_best_runner,
    peer_runner,
)
from gpu_resnet50 import timed

LITE_MODES = ("max-autotune", "reduce-overhead")


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        import torch

        self.torch = torch
        self.args = args
        self.started = time.perf_counter()
        self.results: dict = {"rows": {}, "compile_seconds": {}, "errors": {}, "skipped": []}
        if args.device == "cuda":
            self.sync = torch.cuda.synchronize
        else:
            self.sync = lambda: None

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.started)

    def measure(self, batch: int, label: str, fn, *, needs: float = 30.0) -> None:
        """First call (compilation) and steady state of ``fn``; errors and budget skips are recorded."""
        key = f"{label}@{batch}"
        if self.left() < needs:
            self.results["skipped"].append(key)
            print(f"[skip] {key}: {self.left():.0f} s of budget left, needs ~{needs:.0f} s", flush=True)
            return
        try:
            start = time.perf_counter()
            fn()
            self.sync()
            self.results["compile_seconds"][key] = round(time.perf_counter() - start, 2)
            seconds = timed(fn, self.sync, self.args.seconds, min_iters=5 if self.args.quick else 10)
            row = self.results["rows"].setdefault(str(batch), {})
            row[label] = {"ms_per_batch": seconds * 1e3, "images_per_s": batch / seconds,
                          "ms_per_image": seconds * 1e3 / batch}
            print(f"[done] {key}: {batch / seconds:,.0f} images/s, {seconds * 1e3 / batch:.4f} ms/image "
                  f"(first call {self.results['compile_seconds'][key]} s)", flush=True)
        except Exception as err:  # keep going: the error is part of the result
            self.results["errors"][key] = f"{type(err).__name__}: {err}"[:2000]
            traceback.print_exc()


def run_parent(args: argparse.Namespace) -> dict:
    import torch

    import lite
    from lite.engines.torch import TorchEngine

    bench = Bench(args)
    torch.backends.cudnn.benchmark = True  # for every torch-based contender alike
    workdir = Path(tempfile.mkdtemp(prefix="gpu_engines_"))
    cache_dir = Path(args.cache_dir or workdir / "cache")
    info = bench.results["info"] = {"torch": torch.__version__, "device": args.device, "model": args.model,
                                    "image_size": args.image_size, "cache_dir": str(cache_dir), "aot": args.aot}
    if args.device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    net = build_network(args.model)
    start = time.perf_counter()
    lite_path, onnx_path = export_models(net, workdir, args.image_size, args.device)
    info["export_and_convert_seconds"] = round(time.perf_counter() - start, 2)
    model_ir = lite.Model.load(lite_path, device="numpy").ir
    dtype = torch.float16 if args.device == "cuda" else torch.float32
    peer_net = copy_of(net).to(device=args.device, dtype=dtype)
    if args.device == "cuda":
        peer_net = peer_net.to(memory_format=torch.channels_last)

    engines: dict[str, TorchEngine] = {}
    for mode in args.modes:
        try:
            engines[mode] = TorchEngine(model_ir, device=args.device, mode=mode, cache_dir=cache_dir,
                                        **engine_options(args))
            info[f"lite_{mode}_precision"] = engines[mode].compute_precision
            info[f"lite_{mode}_partition"] = engines[mode].describe()
        except Exception as err:
            bench.results["errors"][f"lite_{mode}"] = f"{type(err).__name__}: {err}"
            traceback.print_exc()
    peer = torch.compile(peer_net, mode="max-autotune") if args.device == "cuda" else torch.compile(peer_net)
    peer_graphs = args.device == "cuda"

    inputs = {}
    for batch in args.batches:
        x = torch.randn(batch, 3, args.image_size, args.image_size, device=args.device)
        inputs[batch] = (x.half(), x.to(dtype))
    # Most important first, as the budget may cut the tail: the largest batch (lite's first mode,
    # the peer, ORT), the smallest batch with lite, the warm start, then everything else.
    large, small = max(args.batches), min(args.batches)
    first = [(large, f"lite_{args.modes[0]}", args.modes[0]), (large, "torch_compile_max_autotune", "peer"),
             (large, "ort_best", "ort")] + [(small, f"lite_{mode}", mode) for mode in reversed(args.modes)]
    rest = []
    for batch in sorted(args.batches, reverse=True):
        rest += [(batch, f"lite_{mode}", mode) for mode in args.modes]
        rest += [(batch, "torch_compile_max_autotune", "peer"), (batch, "ort_best", "ort")]
    rest = [step for step in rest if step not in first]
    with torch.no_grad():
        for batch, label, kind in first:
            run_step(bench, engines, peer, peer_graphs, onnx_path, inputs, batch, label, kind)
        check_agreement(bench, engines, peer_net, inputs[small])
        warm_start(bench, lite_path, cache_dir, large)
        for batch, label, kind in rest:
            run_step(bench, engines, peer, peer_graphs, onnx_path, inputs, batch, label, kind)
    for mode, engine in engines.items():
        runner = next((s.runner for s in engine.segments if s.on_torch), None)
        for attribute in ("aot_declined", "graph_declined", "reloaded"):
            if getattr(runner, attribute, None):
                info[f"lite_{mode}_{attribute}"] = getattr(runner, attribute)
    bench.results["ratios"] = ratios(bench.results, args)
    bench.results["total_seconds"] = round(time.perf_counter() - bench.started, 1)
    return bench.results


def run_step(bench: Bench, engines: dict, peer, peer_graphs: bool, onnx_path: Path, inputs: dict, batch: int,
             label: str, kind: str) -> None:
    x_lite, x_peer = inputs[batch]
    needs = 20.0 if kind == "ort" else 60.0
    if kind == "peer":
        bench.measure(batch, label, peer_runner(peer, x_peer, peer_graphs), needs=needs)
    elif kind == "ort":
        host = x_lite.cpu().numpy() if bench.args.device == "cuda" else x_peer.numpy()
        try:
            runner = ort_best_runner(onnx_path, host, bench.args.device)
        except Exception as err:
            bench.results["errors"][f"{label}@{batch}"] = f"{type(err).__name__}: {err}"
            return
        bench.measure(batch, label, runner, needs=needs)
    elif kind in engines:
        bench.measure(batch, label, lite_runner(engines[kind], x_lite), needs=needs)


def check_agreement(bench: Bench, engines: dict, peer_net, inputs) -> None:
    """lite's output against the PyTorch model's on the same input (cosine, top-1 agreement)."""
    x_lite, x_peer = inputs
    try:
        torch = sys.modules["torch"]
        reference = peer_net(x_peer).float().cpu().numpy()
        for mode, engine in engines.items():
            got = torch.as_tensor(engine.run({"input": x_lite})["logits"]).float().cpu().numpy()
            cosine = float((got * reference).sum() / (np.linalg.norm(got) * np.linalg.norm(reference)))
            bench.results["info"][f"lite_{mode}_cosine_vs_torch"] = round(cosine, 6)
            top1 = float(np.mean(got.argmax(1) == reference.argmax(1)))
            bench.results["info"][f"lite_{mode}_top1_agreement_vs_torch"] = top1
    except Exception as err:
        bench.results["errors"]["agreement"] = f"{type(err).__name__}: {err}"
        traceback.print_exc()


def warm_start(bench: Bench, lite_path: Path, cache_dir: Path, batch: int) -> None:
    """A second process with the caches this one filled: seconds to first result and to full speed."""
    args = bench.args
    mode = args.modes[0]
    if bench.left() < 30:
        bench.results["skipped"].append("warm_start")
        return
    command = [sys.executable, __file__, "--child", str(lite_path), "--cache-dir", str(cache_dir), "--device",
               args.device, "--batches", str(batch), "--modes", mode, "--image-size", str(args.image_size)]
    if args.freezing is not None:
        command.append("--freezing" if args.freezing else "--no-freezing")
    if args.aot is not None:
        command.append("--aot" if args.aot else "--no-aot")
    started = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=max(30.0, min(180.0, bench.left())),
                              env={**os.environ, "LITE_BENCH_SPAWNED_AT": repr(started)})
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            bench.results["errors"]["warm_start"] = (done.stderr or done.stdout)[-2000:]
            return
        bench.results["warm_start"] = json.loads(lines[-1])
        print(f"[done] warm start: {bench.results['warm_start']}", flush=True)
    except Exception as err:
        bench.results["errors"]["warm_start"] = f"{type(err).__name__}: {err}"


def run_child(args: argparse.Namespace) -> None:
    """The warm second process: load, build the engine, run until calls take the steady time."""
    spawned = float(os.environ.get("LITE_BENCH_SPAWNED_AT", time.time()))
    import torch

    import lite
    from lite.engines.torch import TorchEngine

    imported = time.time()
    model_ir = lite.Model.load(args.child, device="numpy").ir
    loaded = time.time()
    engine = TorchEngine(model_ir, device=args.device, mode=args.modes[0], cache_dir=args.cache_dir,
                         **engine_options(args))
    built = time.time()
    batch = args.batches[0]
    x = torch.randn(batch, 3, args.image_size, args.image_size, device=args.device).half()
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    times = []
    with torch.no_grad():
        for _ in range(30):
            start = time.perf_counter()
            engine.run({"input": x})
            sync()
            times.append(time.perf_counter() - start)
            if len(times) == 1:
                first_result = time.time()
    steady = float(np.median(times[-10:]))
    runner = next(s.runner for s in engine.segments if s.on_torch)
    # Full speed: the end of the first call after which every call is within 20% of the steady time.
    elapsed = np.cumsum(times)
    slow = [i for i, t in enumerate(times) if t > 1.2 * steady]
    full_speed = (first_result - spawned) + float(elapsed[slow[-1]] - elapsed[0]) if slow else first_result - spawned
    print(json.dumps({"mode": args.modes[0], "batch": batch, "import_seconds": round(imported - spawned, 2),
                      "load_seconds": round(loaded - imported, 2), "engine_seconds": round(built - loaded, 2),
                      "second_call_s": round(times[1], 3), "third_call_s": round(times[2], 3),
                      "start_to_first_result_s": round(first_result - spawned, 2),
                      "start_to_full_speed_s": round(full_speed, 2), "first_call_s": round(times[0], 3),
                      "steady_ms_per_batch": round(steady * 1e3, 3),
                      "aot_declined": getattr(runner, "aot_declined", None),
                      "artifacts_compiled_again": getattr(runner, "reloaded", None)}))


def engine_options(args: argparse.Namespace) -> dict:
    """The engine options the command line sets (``--freezing``, ``--aot``)."""
    options = {} if args.freezing is None else {"freezing": args.freezing}
    if args.aot is not None:
        options["aot"] = args.aot
    return options


def ratios(results: dict, args: argparse.Namespace) -> dict:
    out: dict = {}
    for batch, row in results["rows"].items():
        lite = {k: v["images_per_s"] for k, v in row.items() if k.startswith("lite_")}
        if not lite:
            continue
        best_label = max(lite, key=lite.get)
        entry = {"lite_best": best_label, "lite_best_images_per_s": lite[best_label],
                 "lite_best_ms_per_image": row[best_label]["ms_per_image"]}
        if "torch_compile_max_autotune" in row:
            entry["vs_torch_compile_max_autotune"] = lite[best_label] / row["torch_compile_max_autotune"]["images_per_s"]
        if "ort_best" in row:
            entry["vs_ort_best"] = lite[best_label] / row["ort_best"]["images_per_s"]
        out[batch] = entry
    return out


def report(results: dict, args: argparse.Namespace) -> None:
    labels = [f"lite_{m}" for m in args.modes] + ["torch_compile_max_autotune", "ort_best"]
    print(json.dumps(results["info"], indent=2))
    print(f"\n{'batch':>6} " + " ".join(f"{label:>28}" for label in labels) + "   (images/s  ms/image)")
    for batch in sorted(results["rows"], key=int):
        row = results["rows"][batch]
        cells = [f"{row[label]['images_per_s']:>15,.0f} {row[label]['ms_per_image']:>9.4f}ms" if label in row
                 else f"{'-':>28}" for label in labels]
        print(f"{batch:>6} " + " ".join(cells))
    print("\nfirst call (compile) seconds:", json.dumps(results["compile_seconds"]))
    for batch, entry in sorted(results["ratios"].items(), key=lambda item: int(item[0])):
        parts = [f"best lite = {entry['lite_best']}", f"{entry['lite_best_ms_per_image']:.4f} ms/image"]
        if "vs_torch_compile_max_autotune" in entry:
            parts.append(f"{entry['vs_torch_compile_max_autotune']:.3f}x torch.compile max-autotune (target >= 1.0 at 256)")
        if "vs_ort_best" in entry:
            parts.append(f"{entry['vs_ort_best']:.3f}x ORT best (target >= 2.4 at 256)")
        if batch == "1":
            parts.append("target <= 0.5 ms/image")
        print(f"batch {batch}: " + "; ".join(parts))
    if "warm_start" in results:
        print(f"warm start (target <= 10 s to full speed): {results['warm_start']}")
    if results["skipped"]:
        print("skipped (budget):", ", ".join(results["skipped"]))
    for key, error in results["errors"].items():
        print(f"error {key}: {error.splitlines()[0] if error else ''}")
    print(f"total {results['total_seconds']} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256])
    parser.add_argument("--modes", nargs="+", default=list(LITE_MODES), help="lite torch engine modes")
    parser.add_argument("--seconds", type=float, default=2.0, help="timed window per measurement")
    parser.add_argument("--quick", action="store_true", help="1 s windows, fewer iterations")
    parser.add_argument("--budget", type=float, default=460.0, help="seconds; later measurements are skipped")
    parser.add_argument("--cache-dir", default=None, help="compile caches (default: a fresh temporary folder)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--model", default="resnet50", help="torchvision model name, or 'tiny'")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--freezing", action=argparse.BooleanOptionalAction, default=None,
                        help="the torch engine's freezing option (default: the engine's default)")
    parser.add_argument("--aot", action=argparse.BooleanOptionalAction, default=None,
                        help="lite's engine compiles ahead of time (artifacts a later process loads) or through "
                             "torch.compile (default: the engine's default, ahead of time on CUDA)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.seconds = min(args.seconds, 1.0)
    if args.child:
        run_child(args)
        return 0
    results = run_parent(args)
    report(results, args)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
