#!/usr/bin/env python3
"""Dynamic batching acceptance: ResNet-18 on CPU, 32 concurrent single-image clients,
the same server with dynamic batching on and off, side by side in one run.

    python bench/serving_batching.py [--image-size 224] [--clients 32] [--rounds 3] [--duration 10]

ResNet-18 is built with tests/converter/models.py (the ONNX shape torch's exporter writes, random
weights), converted with ``converter.convert_model`` and saved with ``lite.format.save`` twice
into one repository: ``resnet18_batching`` (``max_batch_size`` 32 with ``dynamic_batching``) and
``resnet18`` (the same ``max_batch_size``, no batcher: one execution per request). One
``lite serve`` process serves both with its defaults (``--device auto``: ONNX Runtime's CPU
provider when installed). The rounds alternate between the two models (the order flips each
round); each point is ``--duration`` seconds of ``--clients`` tritonclient aio callers, each
sending one image at a time and the next when answered, after ``--warmup`` seconds (ONNX
Runtime's spinning threads need a moment after a switch). Reported: images/s, client latency,
and the server's average batch and compute time per execution (ModelStatistics deltas); the
ratio is the median of the per-round ratios.

Target: batching on >= 2x the throughput of batching off. Loopback only; every loop is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "converter"))
from servers import free_port, start_lite_serve, stop, wait_ready  # noqa: E402 - bench/servers.py

ON, OFF = "resnet18_batching", "resnet18"


def build_repository(root: Path, image_size: int, max_batch_size: int, delay_us: int) -> None:
    from models import resnet18  # tests/converter/models.py

    import converter
    from lite.format import save

    model = converter.convert_model(resnet18("legacy", image_size=image_size), dynamic_batch=True)
    for name in (ON, OFF):
        (root / name / "1").mkdir(parents=True)
        save(model, str(root / name / "1" / "model.lite"))
    config = {"max_batch_size": max_batch_size, "warmup": {"batch_size": 1, "count": 2}}
    (root / OFF / "config.json").write_text(json.dumps(config))
    batching = {**config, "dynamic_batching": {"max_queue_delay_us": delay_us}}
    (root / ON / "config.json").write_text(json.dumps(batching))


async def measure(client, model: str, images: list, clients: int, duration: float, warmup: float) -> dict:
    async def phase(seconds: float) -> tuple[list[float], float]:
        latencies: list[float] = []
        start = time.perf_counter()
        stop_at = start + seconds

        async def caller(index: int) -> None:
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                await client.infer(model, [images[index]])
                latencies.append(time.perf_counter() - t0)

        await asyncio.gather(*(caller(i) for i in range(clients)))
        return latencies, time.perf_counter() - start

    await phase(warmup)
    before = await client.get_inference_statistics(model, as_json=True)
    latencies, elapsed = await phase(duration)
    after = await client.get_inference_statistics(model, as_json=True)
    lat = np.asarray(latencies) * 1e3

    def totals(stats: dict) -> tuple[int, int, int]:
        entry = stats["model_stats"][0]
        infer = int(entry.get("inference_count", 0))
        runs = int(entry.get("execution_count", 0))
        compute = sum(int(b.get("compute_infer", {}).get("ns", 0)) for b in entry.get("batch_stats", []))
        return infer, runs, compute

    (i0, r0, c0), (i1, r1, c1) = totals(before), totals(after)
    runs = max(r1 - r0, 1)
    return {"images_per_s": len(lat) / elapsed, "p50_ms": float(np.percentile(lat, 50)),
            "p99_ms": float(np.percentile(lat, 99)), "average_batch": (i1 - i0) / runs,
            "compute_ms_per_execution": (c1 - c0) / runs / 1e6}


async def run_rounds(port: int, image_size: int, clients: int, rounds: int, duration: float,
                     warmup: float) -> list[dict]:
    import tritonclient.grpc.aio as aioclient

    rng = np.random.default_rng(0)
    images = []
    for _ in range(clients):  # one different image per client, encoded once
        tensor = aioclient.InferInput("input", [1, 3, image_size, image_size], "FP32")
        tensor.set_data_from_numpy(rng.standard_normal((1, 3, image_size, image_size), dtype=np.float32))
        images.append(tensor)
    client = aioclient.InferenceServerClient(f"127.0.0.1:{port}")
    results = []
    try:
        for index in range(rounds):
            order = (ON, OFF) if index % 2 == 0 else (OFF, ON)
            row = {model: await measure(client, model, images, clients, duration, warmup) for model in order}
            results.append(row)
            print(f"round {index + 1}/{rounds}", flush=True)
            for model in (ON, OFF):
                r = row[model]
                print(f"  {model:18s} {r['images_per_s']:7.1f} images/s  p50 {r['p50_ms']:7.1f} ms  "
                      f"p99 {r['p99_ms']:7.1f} ms  average batch {r['average_batch']:5.2f}  "
                      f"compute {r['compute_ms_per_execution']:7.1f} ms/execution", flush=True)
    finally:
        await client.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--clients", type=int, default=32, help="single-image clients (default 32)")
    parser.add_argument("--max-batch-size", type=int, default=32)
    parser.add_argument("--delay-us", type=int, default=2000, help="max_queue_delay_us of the batcher")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds measured per point and round")
    parser.add_argument("--warmup", type=float, default=2.0, help="seconds before each point")
    parser.add_argument("--server-arg", action="append", default=[], help="extra lite serve flag")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    if args.rounds < 1 or args.duration <= 0 or args.clients < 1:
        parser.error("--rounds and --clients must be >= 1 and --duration > 0")

    with tempfile.TemporaryDirectory() as tmp:
        repository = Path(tmp) / "repository"
        t0 = time.perf_counter()
        build_repository(repository, args.image_size, args.max_batch_size, args.delay_us)
        seconds = time.perf_counter() - t0
        print(f"ResNet-18 {args.image_size}x{args.image_size} built and converted in {seconds:.1f} s", flush=True)
        port = free_port()
        process = start_lite_serve(repository, port, args.server_arg)
        try:
            wait_ready(f"127.0.0.1:{port}", process, (ON, OFF), timeout=300)
            rounds = asyncio.run(run_rounds(port, args.image_size, args.clients, args.rounds, args.duration,
                                            args.warmup))
        finally:
            stop(process)

    ratios = [r[ON]["images_per_s"] / r[OFF]["images_per_s"] for r in rounds]
    medians = {model: {key: statistics.median(r[model][key] for r in rounds) for key in rounds[0][model]}
               for model in (ON, OFF)}
    print(f"\nmedians over {args.rounds} rounds, {args.clients} clients, ResNet-18 {args.image_size}px:")
    for model, m in medians.items():
        print(f"  {model:18s} {m['images_per_s']:7.1f} images/s  p50 {m['p50_ms']:7.1f} ms  "
              f"average batch {m['average_batch']:5.2f}")
    ratio = statistics.median(ratios)
    print(f"batching on / off: {ratio:.2f}x  (per round: {', '.join(f'{r:.2f}' for r in ratios)})")
    ok = ratio >= 2.0
    print(f"  {'PASS' if ok else 'FAIL'}  throughput with dynamic batching >= 2x without")
    if args.json is not None:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rounds": rounds,
                                         "medians": medians, "ratio": ratio, "pass": ok}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
