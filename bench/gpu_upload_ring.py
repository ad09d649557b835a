#!/usr/bin/env python3
"""numpy batches to the GPU: the staging ring against one pinned buffer of the batch's size.

Two parts, one process, steps interleaved over ``--rounds``, ms per call (median of the rounds):

- the upload alone (:class:`lite.engines.host_upload.HostUploader`, waited for), a 256x3x224x224
  float16 batch: one pinned buffer of the batch's size (``ring_slots=0``, the previous scheme)
  against rings of 2, 3 and 4 chunks of 4, 8 and 16 MB; each back to back, after 18 ms of host
  sleep, and after 18 ms of GPU work the host waited for (what ``predict`` does between calls);
- with ``--workdir``: ResNet-50 fp16 (``bench/gpu_issue_check.py``'s model) compiled by ``lite
  compile --mode reduce-overhead --batch-sizes 256``, ``predict`` at batch 256 with a PyTorch tensor,
  and with numpy in / out through each uploader: the fraction of throughput numpy inputs lose.

    python bench/gpu_upload_ring.py [--workdir /tmp/w] [--rounds 7] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--out")
    parser.add_argument("--threads", type=int, nargs="*", default=[],
                        help="also time the 3 x 8 MB ring with PyTorch's intra-op threads set to each count")
    args = parser.parse_args()
    import torch

    from lite.engines.host_upload import HostUploader

    print("torch", torch.__version__, torch.cuda.get_device_name(), "threads", torch.get_num_threads(), flush=True)
    batch = np.random.default_rng(0).standard_normal((256, 3, 224, 224), dtype=np.float32).astype(np.float16)
    uploaders = {"one buffer, 8 MB chunks": HostUploader(torch, "cuda", 8 << 20, ring_slots=0)}
    for slots in (2, 3, 4):
        for megabytes in (4, 8, 16):
            uploaders[f"ring {slots} x {megabytes} MB"] = HostUploader(torch, "cuda", megabytes << 20, ring_slots=slots)
    for count in args.threads:
        uploaders[f"ring 3 x 8 MB, {count} threads"] = HostUploader(torch, "cuda", 8 << 20, ring_slots=3)
    target = torch.empty(batch.shape, dtype=torch.float16, device="cuda")
    default_threads = torch.get_num_threads()
    cycles = int(18e-3 * torch.cuda.get_device_properties(0).clock_rate * 1e3)  # about 18 ms of GPU spinning

    def before(mode: str) -> None:
        if mode == "after 18 ms sleep":
            time.sleep(0.018)
        elif mode == "after 18 ms GPU work":
            torch.cuda._sleep(cycles)
            torch.cuda.synchronize()

    modes = ("back to back", "after 18 ms sleep", "after 18 ms GPU work")
    times = {(name, mode): [] for name in uploaders for mode in modes}
    for uploader in uploaders.values():
        uploader.upload_into(batch, target)
        uploader.wait()
    for index in range(args.rounds):
        names = list(uploaders)
        names = names[index % len(names):] + names[:index % len(names)]
        for name in names:
            torch.set_num_threads(int(name.split(", ")[1].split()[0]) if ", " in name else default_threads)
            for mode in modes:
                samples = []
                for _ in range(args.calls):
                    before(mode)
                    started = time.perf_counter()
                    uploaders[name].upload_into(batch, target)
                    uploaders[name].wait()
                    samples.append(time.perf_counter() - started)
                times[(name, mode)].append(statistics.median(samples) * 1e3)
    torch.set_num_threads(default_threads)
    assert np.array_equal(target.cpu().numpy(), batch)
    staging_part(torch, batch, before, modes, args.rounds, args.calls)
    table = {f"{name} | {mode}": round(statistics.median(v), 3) for (name, mode), v in times.items()}
    print("\nupload of 77 MB, ms (waited)")
    for name in uploaders:
        print(f"  {name:26s} " + "  ".join(f"{mode}: {statistics.median(times[(name, mode)]):.3f}" for mode in modes))
    result = {"upload": table}
    if args.workdir:
        result["predict"] = predict_part(Path(args.workdir), batch, args.rounds, torch, HostUploader)
    if args.out:
        Path(args.out, "upload_ring.json").write_text(json.dumps(result, indent=1))
    return 0


def staging_part(torch, batch: np.ndarray, before, modes, rounds: int, calls: int) -> None:
    """The host's share alone: the 77 MB into pinned chunks (no device copy), and one 8 MB chunk."""
    source = torch.from_numpy(batch.reshape(-1).view(np.uint8))
    ring = [torch.empty(8 << 20, dtype=torch.uint8, pin_memory=True) for _ in range(3)]
    whole = torch.empty(source.numel(), dtype=torch.uint8, pin_memory=True)

    def to_ring():
        for index, start in enumerate(range(0, source.numel(), 8 << 20)):
            end = min(start + (8 << 20), source.numel())
            ring[index % 3][:end - start].copy_(source[start:end])

    steps = {"staging into the ring": to_ring, "staging into one buffer": lambda: whole.copy_(source),
             "the first 8 MB chunk alone": lambda: ring[0].copy_(source[:8 << 20])}
    times = {(name, mode): [] for name in steps for mode in modes}
    for _ in range(rounds):
        for name, step in steps.items():
            for mode in modes:
                samples = []
                for _ in range(calls):
                    before(mode)
                    started = time.perf_counter()
                    step()
                    samples.append(time.perf_counter() - started)
                times[(name, mode)].append(statistics.median(samples) * 1e3)
    print("\nthe host copy alone, ms")
    for name in steps:
        print(f"  {name:26s} " + "  ".join(f"{mode}: {statistics.median(times[(name, mode)]):.3f}" for mode in modes))


def predict_part(workdir: Path, batch: np.ndarray, rounds: int, torch, HostUploader) -> dict:
    from gpu_issue_check import latency_ms, make_model

    import lite

    workdir.mkdir(parents=True, exist_ok=True)
    path = make_model(workdir)
    cache = workdir / "cache"
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lite.cli", "compile", str(path), "--device", "cuda", "--mode",
                           "reduce-overhead", "--batch-sizes", "256", "--cache-dir", str(cache)],
                          cwd=ROOT, capture_output=True, text=True)
    print(f"lite compile: exit {done.returncode} in {time.perf_counter() - started:.0f} s "
          f"{(done.stdout + done.stderr)[-600:]}", flush=True)
    model = lite.Model.load(path, engine="torch", device="cuda", precision="fp16", cache_dir=cache, startup="best")
    print("startup", json.dumps(model.engine.startup_state(), default=str)[:400], flush=True)
    x = torch.from_numpy(batch).cuda()
    engine = model.engine
    kinds = {"one buffer": HostUploader(torch, engine.device, 8 << 20, ring_slots=0),
             "ring 3 x 8 MB": HostUploader(torch, engine.device, 8 << 20, ring_slots=3)}

    def numpy_with(uploader):
        def call():
            engine._uploader = uploader
            return model.predict({"input": batch})
        return call

    runners = {"predict, torch tensor in": lambda: model.predict({"input": x})}
    runners.update({f"predict, numpy in / out, {name}": numpy_with(u) for name, u in kinds.items()})
    reference = runners["predict, torch tensor in"]()["logits"].float().cpu().numpy()
    for name, runner in runners.items():
        got = runner()["logits"]
        got = got if isinstance(got, np.ndarray) else got.float().cpu().numpy()
        assert np.allclose(np.asarray(got, np.float32), reference, atol=1e-2), name
    sync = torch.cuda.synchronize
    times = {name: [] for name in runners}
    names = list(runners)
    for index in range(rounds):
        for name in names[index % len(names):] + names[:index % len(names)]:
            times[name].append(latency_ms(runners[name], sync, 1.0))
    medians = {name: statistics.median(v) for name, v in times.items()}
    base = medians["predict, torch tensor in"]
    print("\npredict at batch 256, ms (waited), images/s, fewer images/s than the tensor")
    for name, ms in medians.items():
        print(f"  {name:42s} {ms:8.3f}  {256e3 / ms:8.0f}  {1 - base / ms:6.1%}")
    return {name: round(ms, 3) for name, ms in medians.items()}


if __name__ == "__main__":
    sys.exit(main())
