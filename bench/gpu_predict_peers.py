#!/usr/bin/env python3
"""``predict`` on CUDA against its peers in one process: torch.compile and ONNX Runtime's best.

ResNet-50 fp16 as ``bench/gpu_issue_check.py`` makes it. Two steps, so that the slow compilations
can run while other work goes on (device time is scarce):

- ``--prepare``: export and convert the network, then ``lite compile`` it for batch 1 and 256
  (mode auto, the default: max-autotune and reduce-overhead both compiled and the faster kept
  per batch size; both artifacts stay in the cache), into ``--workdir`` (``--ort-only``: export
  and convert only).
- the measurement (default): loads those artifacts (no compilation) and times, in interleaved
  rounds, at batch 1 and 256:

  lite ``predict`` (torch engine) with PyTorch tensors, CuPy arrays and numpy arrays (at 256 also
  numpy in pinned memory, the staged upload alone at several chunk sizes and the pageable copy
  alone), ``engine.run``, at batch 1 the same engine in modes reduce-overhead and max-autotune
  (each from its artifact in the cache); ``torch.compile``
  on the original network fed the same kinds of input (mode reduce-overhead at batch 1;
  max-autotune at 256 with ``--max-autotune-peer``); ``device="cuda"`` (the ONNX Runtime
  engine) with the same inputs and through ``Model.bind`` (replaying its buffers, and with a new
  input copied in); ONNX Runtime's best configuration (NHWC, CUDA graph, IOBinding),
  with ``fuse_conv_bias`` replaying its fixed buffers, as a caller with a new tensor each call
  uses it (copied in, output cloned; host-ordered or on a PyTorch stream), and with numpy in / out.

"waited": each call followed by ``torch.cuda.synchronize()``; "queued": calls back to back, one
synchronize at the end; "host us": the host time of a call, calls queued. Needs onnxruntime-gpu
for the ONNX Runtime rows (they are skipped otherwise).

    python bench/gpu_predict_peers.py --prepare --workdir /tmp/w
    python bench/gpu_predict_peers.py --workdir /tmp/w --out $OUT --max-autotune-peer
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_issue_check import host_us, latency_ms, make_model, pipelined_ms, say  # noqa: E402


def prepare(workdir: Path, ort_only: bool = False, batches: tuple[str, ...] = ("1", "256")) -> None:
    """Export and convert (once), then ``lite compile`` ``batches`` in mode auto (run the batch
    sizes in separate calls where one call's time is limited: each adds to the package)."""
    model = make_model(workdir)
    if ort_only:
        return
    cache = workdir / "cache"
    package = workdir / "r50.lite.compiled"
    done_before = json.loads((package / "manifest.json").read_text())["batch_sizes"] if package.is_dir() else []
    sizes = sorted({*map(int, batches), *done_before})  # earlier sizes load from the cache: the package keeps them
    command = [sys.executable, "-m", "lite.cli", "compile", str(model), "--device", "cuda", "--batch-sizes",
               *map(str, sizes), "--cache-dir", str(cache)]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    say(f"lite compile auto {sizes}: exit {done.returncode} in {time.perf_counter() - started:.0f} s "
        f"{(done.stdout + done.stderr)[-1500:]}")


def ort_or_none():
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return None
    if hasattr(ort, "preload_dlls"):
        ort.preload_dlls()
    return ort


def measure(runners: dict, rounds: int, seconds: float, queued_calls: int) -> dict:
    import torch

    sync = torch.cuda.synchronize
    waited: dict = {name: [] for name in runners}
    queued: dict = {name: [] for name in runners}
    names = list(runners)
    for index in range(rounds):
        for name in names[index % len(names):] + names[:index % len(names)]:
            try:
                waited[name].append(latency_ms(runners[name], sync, seconds))
                if "numpy" not in name and "upload" not in name and "copy" not in name:
                    queued[name].append(pipelined_ms(runners[name], sync, queued_calls))
            except Exception as err:  # noqa: BLE001 - the error is a row of the table
                say(f"{name}: {type(err).__name__}: {err}")
                traceback.print_exc()
                runners[name] = None
                names.remove(name)
    return {name: {"waited_ms": round(float(np.median(waited[name])), 4) if waited[name] else None,
                   "queued_ms": round(float(np.median(queued[name])), 4) if queued[name] else None}
            for name in runners}


def ort_peers(ort, torch, fp16_onnx: Path, x, x_numpy: np.ndarray) -> dict:
    """ONNX Runtime's best configuration (NHWC, CUDA graph, IOBinding, fuse_conv_bias or not) as
    runners: replaying its fixed buffers (no new input, output overwritten by the next call), and
    as a caller with a new PyTorch tensor each call must use it: copied into the bound input,
    output cloned, either waiting for the copy on the host (the session's own stream) or with
    the session on a PyTorch stream ordered by events (the expert's way; what lite does)."""
    from gpu_resnet50 import ort_best_session

    runners = {}
    best, binding, _ = ort_best_session(ort, fp16_onnx, x_numpy)
    runners["ORT best (NHWC + CUDA graph + IOBinding)"] = lambda: best.run_with_iobinding(binding)
    fused, fused_binding, fused_y = ort_best_session(ort, fp16_onnx, x_numpy, {"fuse_conv_bias": "1"})
    runners["ORT best + fuse_conv_bias"] = lambda: fused.run_with_iobinding(fused_binding)
    x_in, y_out = (torch.from_dlpack(value) for value in fused_binding.keep_alive)

    def host_ordered():
        x_in.copy_(x)
        torch.cuda.current_stream().synchronize()  # the session's stream is not ordered after torch's
        fused.run_with_iobinding(fused_binding)
        return y_out.clone()

    runners["ORT best + fuse_conv_bias, new input copied, output cloned"] = host_ordered
    x_value, y_value = fused_binding.keep_alive

    def numpy_in_out():
        x_value.update_inplace(x_numpy)
        fused.run_with_iobinding(fused_binding)
        return y_value.numpy()

    runners["ORT best + fuse_conv_bias, numpy in / out"] = numpy_in_out
    side = torch.cuda.Stream()
    expert, expert_binding, _ = ort_best_session(ort, fp16_onnx, x_numpy, {
        "fuse_conv_bias": "1", "user_compute_stream": str(side.cuda_stream)})
    options = ort.RunOptions()
    options.add_run_config_entry("disable_synchronize_execution_providers", "1")
    e_in, e_out = (torch.from_dlpack(value) for value in expert_binding.keep_alive)
    ready, done = torch.cuda.Event(), torch.cuda.Event()

    def stream_ordered():
        current = torch.cuda.current_stream()
        ready.record(current)
        side.wait_event(ready)
        result = torch.empty_like(e_out)
        with torch.cuda.stream(side):
            e_in.copy_(x)
            expert.run_with_iobinding(expert_binding, options)
            result.copy_(e_out)
        done.record(side)
        current.wait_event(done)
        return result

    runners["ORT best + fuse_conv_bias on a torch stream, copies ordered by events"] = stream_ordered
    return runners


def torch_engine_runners(lite_best, lite_ro, lite_ma, x, x_numpy, x_pinned, x_cupy, batch: int) -> dict:
    """lite's torch engine through ``predict`` with each kind of input a caller may have."""
    runners = {"lite predict, torch in": lambda: lite_best.predict({"input": x})}
    if x_cupy is not None:
        runners["lite predict, CuPy in"] = lambda: lite_best.predict({"input": x_cupy})
    runners["lite predict, numpy in / out"] = lambda: lite_best.predict({"input": x_numpy})
    if batch == 1:
        runners["lite engine.run, torch in"] = lambda: lite_best.engine.run({"input": x})
        runners["lite mode reduce-overhead, predict"] = lambda: lite_ro.predict({"input": x})
        runners["lite mode max-autotune, predict"] = lambda: lite_ma.predict({"input": x})
    else:
        runners["lite predict, numpy in pinned memory"] = lambda: lite_best.predict({"input": x_pinned})
    return runners


def compiled_peer_runners(torch, peer, mode: str, x, x_numpy, x_cupy) -> dict:
    """``torch.compile`` on the original network fed the same kinds of input: a PyTorch tensor
    (NCHW, and in mode reduce-overhead a channels-last copy too), a CuPy array (imported through DLPack) and a numpy array
    (copied to the GPU, the answer copied back)."""
    x_cl = x.contiguous(memory_format=torch.channels_last)

    def call(make_input):
        def run():
            with torch.no_grad():
                return peer(make_input())
        return run

    runners = {f"torch.compile {mode}, NCHW in": call(lambda: x)}
    if mode == "reduce-overhead":  # a second compilation (another layout); max-autotune's takes minutes
        runners[f"torch.compile {mode}, channels-last in"] = call(lambda: x_cl)
    if x_cupy is not None:
        runners[f"torch.compile {mode}, CuPy in"] = call(lambda: torch.from_dlpack(x_cupy))
    numpy_call = call(lambda: torch.from_numpy(x_numpy).cuda())
    runners[f"torch.compile {mode}, numpy in / out"] = lambda: numpy_call().cpu().numpy()
    return runners


def ort_engine_runners(report: dict, lite_ort, x, x_numpy, x_cupy, batch: int) -> dict:
    import torch

    lite_ort.predict({"input": x})
    lite_ort.predict({"input": x_numpy})
    got = torch.from_dlpack(lite_ort.predict({"input": x})["logits"]).float()
    report[f"ort_engine_max_abs_diff_vs_numpy_io_b{batch}"] = float(np.abs(
        got.cpu().numpy() - lite_ort.predict({"input": x_numpy})["logits"].astype(np.float32)).max())
    runners = {"lite device=cuda (ORT), torch in": lambda: lite_ort.predict({"input": x}),
               "lite device=cuda (ORT), engine.run": lambda: lite_ort.engine.run({"input": x})}
    if x_cupy is not None:
        got_cupy = torch.from_dlpack(lite_ort.predict({"input": x_cupy})["logits"]).float()
        report[f"ort_engine_max_abs_diff_cupy_vs_torch_b{batch}"] = float((got - got_cupy).abs().max().item())
        runners["lite device=cuda (ORT), CuPy in"] = lambda: lite_ort.predict({"input": x_cupy})
    runners["lite device=cuda (ORT), numpy in / out"] = lambda: lite_ort.predict({"input": x_numpy})
    binding = lite_ort.bind({"input": x})
    bound = binding.inputs["input"]
    report[f"ort_engine_bound_max_abs_diff_b{batch}"] = float(
        (binding.run()["logits"].float() - got).abs().max().item())
    runners["lite device=cuda (ORT), Model.bind: replaying its buffers"] = binding.run

    def bound_new_input():
        bound.copy_(x)
        return binding.run()

    runners["lite device=cuda (ORT), Model.bind: a new input copied in"] = bound_new_input
    return runners


def main_measure(workdir: Path, rounds: int, seconds: float, ort_only: bool = False,
                 max_autotune_peer: bool = False, batches: tuple[int, ...] = (1, 256)) -> dict:
    ort = ort_or_none()
    import torch
    import torchvision

    import lite
    from lite.engines.host_upload import HostUploader

    model_path = workdir / "r50.lite"
    cache = workdir / "cache"
    report: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                    "onnxruntime": None if ort is None else ort.__version__}
    lite_best = lite_ro = lite_ma = net = None
    peers: dict = {}
    if not ort_only:
        lite_best = lite.Model.load(model_path, engine="torch", device="cuda", precision="fp16", cache_dir=cache,
                                    startup="best")
        lite_ro, lite_ma = (lite.Model.load(model_path, engine="torch", device="cuda", precision="fp16",
                                            cache_dir=cache, startup="best", mode=mode, precompiled=None)
                            for mode in ("reduce-overhead", "max-autotune"))
        torch.manual_seed(0)
        net = torchvision.models.resnet50(weights=None).eval().half().cuda().to(memory_format=torch.channels_last)
        peers[1] = ("reduce-overhead", torch.compile(net, mode="reduce-overhead"))
        if max_autotune_peer:
            peers[256] = ("max-autotune", torch.compile(net, mode="max-autotune"))
    lite_ort = None
    if ort is not None:
        lite_ort = lite.Model.load(model_path, device="cuda", cache_dir=cache / "ort")
    try:
        import cupy
    except ImportError:
        cupy = None
    tables = {}
    host: dict = {}
    for batch in batches:
        x = torch.randn(batch, 3, 224, 224, device="cuda").half()
        x_numpy = x.cpu().numpy()
        x_pinned = lite.pinned_empty(x_numpy.shape, np.float16)
        x_pinned[...] = x_numpy
        x_cupy = None if cupy is None else cupy.from_dlpack(x)
        runners: dict = {}
        if lite_best is not None:
            started = time.perf_counter()
            lite_best.predict({"input": x})
            lite_best.predict({"input": x_numpy})
            report[f"lite_first_call_s_b{batch}"] = round(time.perf_counter() - started, 2)
            out = lite_best.predict({"input": x})["logits"].float()
            runners.update(torch_engine_runners(lite_best, lite_ro, lite_ma, x, x_numpy, x_pinned, x_cupy, batch))
            if batch == 1:
                for other in (lite_ro, lite_ma):
                    started = time.perf_counter()
                    other.predict({"input": x})
                    report[f"first_call_s_b1_{other.engine.mode}"] = round(time.perf_counter() - started, 2)
        if batch in peers:
            mode, peer = peers[batch]
            peer_runners = compiled_peer_runners(torch, peer, mode, x, x_numpy, x_cupy)
            started = time.perf_counter()
            for run in peer_runners.values():
                for _ in range(3):
                    reference = run()
            torch.cuda.synchronize()
            report[f"peer_compile_s_b{batch}"] = round(time.perf_counter() - started, 1)
            reference = peer_runners[f"torch.compile {mode}, NCHW in"]().float()
            report[f"cosine_b{batch}"] = round(torch.nn.functional.cosine_similarity(
                out.flatten(), reference.flatten(), dim=0).item(), 6)
            runners.update(peer_runners)
        if batch == 256 and lite_best is not None:
            for chunk_mb in (4, 8, 16, 32):
                uploader = HostUploader(torch, x.device, chunk_bytes=chunk_mb << 20)
                target = torch.empty_like(x)
                runners[f"upload alone, {chunk_mb} MB chunks"] = \
                    lambda u=uploader, t=target: u.upload_into(x_numpy, t)
            runners["pageable copy alone"] = lambda: x.copy_(torch.from_numpy(x_numpy))
        if lite_ort is not None:
            runners.update(ort_engine_runners(report, lite_ort, x, x_numpy, x_cupy, batch))
            runners.update(ort_peers(ort, torch, workdir / "resnet50_fp16.onnx", x, x_numpy))
        say(f"batch {batch}: {len(runners)} runners")
        tables[batch] = measure(runners, rounds, seconds, 100 if batch == 1 else 20)
        host[batch] = {name: round(host_us(fn, torch.cuda.synchronize), 1) for name, fn in runners.items()
                       if fn is not None and "numpy" not in name and "upload" not in name and "copy alone" not in name}
        say(f"batch {batch}: {json.dumps(tables[batch])}")
        say(f"batch {batch} host us per call: {json.dumps(host[batch])}")
    report["tables"] = tables
    report["host_us_per_call"] = host
    if lite_best is not None:
        state = lite_best.engine.startup_state()
        report["startup_state"] = {"shapes": state["shapes"], "modes": state["modes"],
                                   "precompiled": state["precompiled"]}
        manifest = json.loads((workdir / "r50.lite.compiled" / "manifest.json").read_text())
        report["package_choices"] = {" ".join(map(str, c["shapes"])): {"mode": c["mode"], "ms": c["ms_per_call"]}
                                     for c in manifest.get("choices", {}).values()}
        report["startup_state_reduce_overhead"] = lite_ro.engine.startup_state()["shapes"]
    report["ort_engine"] = None if lite_ort is None else lite_ort.device
    return report


def print_table(report: dict) -> None:
    print(json.dumps({k: v for k, v in report.items() if k not in ("tables", "host_us_per_call")}, indent=1))
    for batch, rows in report["tables"].items():
        host = report["host_us_per_call"].get(batch, {})
        print(f"\nbatch {batch} on {report['gpu']}")
        print(f"{'runner':<72} {'waited ms':>10} {'queued ms':>10} {'images/s':>9} {'host us':>8}")
        for name, row in rows.items():
            waited, queued = row["waited_ms"], row["queued_ms"]
            rate = "" if waited is None else f"{int(batch) / waited * 1e3:,.0f}"
            print(f"{name:<72} {'-' if waited is None else f'{waited:.4f}':>10} "
                  f"{'-' if queued is None else f'{queued:.4f}':>10} {rate:>9} {host.get(name, '-'):>8}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--prepare", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.4)
    parser.add_argument("--out", default=None)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 256], help="measured batch sizes")
    parser.add_argument("--prepare-batches", nargs="+", default=["1", "256"],
                        help="the batch sizes --prepare compiles (default 1 256)")
    parser.add_argument("--max-autotune-peer", action="store_true",
                        help="also torch.compile(mode='max-autotune') at batch 256 (compiles for minutes)")
    parser.add_argument("--ort-only", action="store_true",
                        help="only lite's ONNX Runtime engine (device='cuda') and ONNX Runtime's configurations: "
                             "no torch engine, no torch.compile, nothing compiled by --prepare")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        prepare(workdir, args.ort_only, tuple(args.prepare_batches))
        return 0
    report = main_measure(workdir, args.rounds, args.seconds, args.ort_only, args.max_autotune_peer,
                          tuple(args.batches))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "predict_peers.json").write_text(json.dumps(report, indent=2, default=str))
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
