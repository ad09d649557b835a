#!/usr/bin/env python3
"""``predict`` on CUDA against its peers in one process: torch.compile and ONNX Runtime's best.

ResNet-50 fp16 as ``bench/gpu_issue_check.py`` makes it. Two steps, so that the slow compilations
can run while other work goes on (device time is scarce):

- ``--prepare``: export and convert the network, then ``lite compile`` it for batch 1 and 256
  (max-autotune, the default) and for batch 1 in mode reduce-overhead, into ``--workdir``.
- the measurement (default): loads those artifacts (no compilation) and times, in interleaved rounds,

  batch 1: lite ``predict`` (torch engine) with PyTorch tensors, ``engine.run``, the same engine in
  mode reduce-overhead, ``torch.compile(mode="reduce-overhead")`` fed the same NCHW tensor and fed a
  channels-last copy; ``device="cuda"`` (ONNX Runtime engine) and ONNX Runtime's best configuration.

  batch 256: lite ``predict`` with PyTorch tensors, numpy in / out (through the pinned staging of
  :mod:`lite.engines.host_upload`), numpy in pinned memory; the staged upload alone at several chunk
  sizes, and the pageable copy alone; ``device="cuda"`` with PyTorch tensors and numpy; ONNX
  Runtime's best configuration, also with ``fuse_conv_bias``.

"waited": each call followed by ``torch.cuda.synchronize()``; "queued": calls back to back, one
synchronize at the end. Needs onnxruntime-gpu for the ONNX Runtime rows (they are skipped otherwise).

    python bench/gpu_predict_peers.py --prepare --workdir /tmp/w
    python bench/gpu_predict_peers.py --workdir /tmp/w --out $OUT
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

from gpu_issue_check import latency_ms, make_model, pipelined_ms, say  # noqa: E402


def prepare(workdir: Path) -> None:
    model = make_model(workdir)
    cache = workdir / "cache"
    for mode, batches, output in (("max-autotune", ["1", "256"], None),
                                  ("reduce-overhead", ["1"], workdir / "r50_reduce_overhead.compiled")):
        command = [sys.executable, "-m", "lite.cli", "compile", str(model), "--device", "cuda", "--batch-sizes",
                   *batches, "--mode", mode, "--cache-dir", str(cache)]
        if output is not None:
            command += ["--output", str(output)]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        say(f"lite compile {mode} {batches}: exit {done.returncode} in {time.perf_counter() - started:.0f} s "
            f"{(done.stdout + done.stderr)[-600:]}")
    (workdir / "prepared").write_text("done")


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


def main_measure(workdir: Path, rounds: int, seconds: float) -> dict:
    ort = ort_or_none()
    import torch
    import torchvision

    import lite
    from lite.engines.host_upload import HostUploader

    model_path = workdir / "r50.lite"
    cache = workdir / "cache"
    report: dict = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                    "onnxruntime": None if ort is None else ort.__version__}
    lite_best = lite.Model.load(model_path, engine="torch", device="cuda", precision="fp16", cache_dir=cache,
                                startup="best")
    lite_ro = lite.Model.load(model_path, engine="torch", device="cuda", precision="fp16", cache_dir=cache,
                              startup="best", mode="reduce-overhead", precompiled=None)
    lite_ort = None
    if ort is not None:
        lite_ort = lite.Model.load(model_path, device="cuda", cache_dir=cache / "ort")
    torch.manual_seed(0)
    net = torchvision.models.resnet50(weights=None).eval().half().cuda().to(memory_format=torch.channels_last)
    peer = torch.compile(net, mode="reduce-overhead")
    tables = {}
    for batch in (1, 256):
        x = torch.randn(batch, 3, 224, 224, device="cuda").half()
        x_numpy = x.cpu().numpy()
        x_pinned = lite.pinned_empty(x_numpy.shape, np.float16)
        x_pinned[...] = x_numpy
        started = time.perf_counter()
        lite_best.predict({"input": x})
        lite_best.predict({"input": x_numpy})
        report[f"lite_first_call_s_b{batch}"] = round(time.perf_counter() - started, 2)
        out = lite_best.predict({"input": x})["logits"].float()
        runners: dict = {"lite predict, torch in": lambda: lite_best.predict({"input": x})}
        if batch == 1:
            lite_ro.predict({"input": x})
            runners["lite engine.run, torch in"] = lambda: lite_best.engine.run({"input": x})
            runners["lite mode reduce-overhead, predict"] = lambda: lite_ro.predict({"input": x})
            x_cl = x.contiguous(memory_format=torch.channels_last)
            with torch.no_grad():
                started = time.perf_counter()
                for feed in (x, x, x, x_cl, x_cl, x_cl):
                    reference = peer(feed)
                torch.cuda.synchronize()
                report["peer_compile_s"] = round(time.perf_counter() - started, 1)

            def peer_nchw():
                with torch.no_grad():
                    return peer(x)

            def peer_cl():
                with torch.no_grad():
                    return peer(x_cl)

            runners["torch.compile reduce-overhead, NCHW in"] = peer_nchw
            runners["torch.compile reduce-overhead, channels-last in"] = peer_cl
            reference = reference.float()
            report["cosine_b1"] = round(torch.nn.functional.cosine_similarity(
                out.flatten(), reference.flatten(), dim=0).item(), 6)
        else:
            runners["lite predict, numpy in / out"] = lambda: lite_best.predict({"input": x_numpy})
            runners["lite predict, numpy in pinned memory"] = lambda: lite_best.predict({"input": x_pinned})
            for chunk_mb in (4, 8, 16, 32):
                uploader = HostUploader(torch, x.device, chunk_bytes=chunk_mb << 20)
                target = torch.empty_like(x)
                runners[f"upload alone, {chunk_mb} MB chunks"] = \
                    lambda u=uploader, t=target: u.upload_into(x_numpy, t)
            runners["pageable copy alone"] = lambda: x.copy_(torch.from_numpy(x_numpy))
        if lite_ort is not None:
            lite_ort.predict({"input": x})
            lite_ort.predict({"input": x_numpy})
            runners["lite device=cuda (ORT), torch in"] = lambda: lite_ort.predict({"input": x})
            runners["lite device=cuda (ORT), numpy in / out"] = lambda: lite_ort.predict({"input": x_numpy})
            from gpu_resnet50 import ort_best_session

            fp16_onnx = workdir / "resnet50_fp16.onnx"
            best, binding, _ = ort_best_session(ort, fp16_onnx, x_numpy)
            runners["ORT best (NHWC + CUDA graph + IOBinding)"] = lambda s=best, b=binding: s.run_with_iobinding(b)
            fused, fused_binding, _ = ort_best_session(ort, fp16_onnx, x_numpy, {"fuse_conv_bias": "1"})
            runners["ORT best + fuse_conv_bias"] = lambda s=fused, b=fused_binding: s.run_with_iobinding(b)
        say(f"batch {batch}: {len(runners)} runners")
        tables[batch] = measure(runners, rounds, seconds, 100 if batch == 1 else 20)
        say(f"batch {batch}: {json.dumps(tables[batch])}")
    report["tables"] = tables
    report["startup_state"] = lite_best.engine.startup_state()["shapes"]
    report["startup_state_reduce_overhead"] = lite_ro.engine.startup_state()["shapes"]
    report["ort_engine"] = None if lite_ort is None else lite_ort.device
    return report


def print_table(report: dict) -> None:
    print(json.dumps({k: v for k, v in report.items() if k != "tables"}, indent=1))
    for batch, rows in report["tables"].items():
        print(f"\nbatch {batch} on {report['gpu']}")
        print(f"{'runner':<48} {'waited ms':>10} {'queued ms':>10} {'images/s':>9}")
        for name, row in rows.items():
            waited, queued = row["waited_ms"], row["queued_ms"]
            rate = "" if waited is None else f"{int(batch) / waited * 1e3:,.0f}"
            print(f"{name:<48} {'-' if waited is None else f'{waited:.4f}':>10} "
                  f"{'-' if queued is None else f'{queued:.4f}':>10} {rate:>9}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--prepare", action="store_true")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.4)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    if args.prepare:
        prepare(workdir)
        return 0
    report = main_measure(workdir, args.rounds, args.seconds)
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "predict_peers.json").write_text(json.dumps(report, indent=2, default=str))
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
