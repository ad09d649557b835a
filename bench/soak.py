#!/usr/bin/env python3
"""Soak test: ResNet-18 with dynamic batching at concurrency 64.

    python bench/soak.py --minutes 10            # the full run (make soak)
    python bench/soak.py --seconds 60 --json r.json   # the CI variant (tests/serving/test_soak.py)

ResNet-18 (tests/converter/models.py, the torch exporter's ONNX form, random weights, 32x32
images, 10 classes) is converted with ``converter.convert_model`` and saved with
``lite.format.save`` into a repository with ``max_batch_size`` 16 and dynamic batching; one
``python -m serving`` process serves it with its defaults. ``--concurrency`` tritonclient aio
callers each send one image and the next when answered, for the whole run, after ``--warmup``
seconds that are not measured. Pass criteria: zero failed requests; p99 latency of the last
window within 1.5x of the first (window: one minute, or a quarter of a shorter run); the server's
resident memory (VmRSS) at the end within 10 % of the value at the end of the warm-up.
Loopback only; the run stops by itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from servers import free_port, start_lite_serve, stop, wait_ready  # noqa: E402 - bench/servers.py

MODEL = "resnet18"


def build_repository(root: Path, image_size: int) -> None:
    import converter
    from lite.format import save
    from tests.converter.models import resnet18

    model = converter.convert_model(resnet18("legacy", image_size=image_size, classes=10), dynamic_batch=True)
    (root / MODEL / "1").mkdir(parents=True)
    save(model, str(root / MODEL / "1" / "model.lite"))
    config = {"max_batch_size": 16, "dynamic_batching": {"max_queue_delay_us": 2000},
              "warmup": {"batch_size": 1, "count": 2}}
    (root / MODEL / "config.json").write_text(json.dumps(config))


def resident_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def soak(address: str, pid: int, seconds: float, warmup: float, concurrency: int, image_size: int) -> dict:
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(address)
    image = np.random.default_rng(0).standard_normal((1, 3, image_size, image_size)).astype(np.float32)
    records: list[tuple[float, float]] = []  # (finished at, latency s) of measured requests
    failures: list[str] = []
    began = time.monotonic()
    measure_from = began + warmup
    end = measure_from + seconds
    memory: dict[str, int] = {}

    async def caller() -> None:
        while time.monotonic() < end:
            tensor = aioclient.InferInput("input", list(image.shape), "FP32")
            tensor.set_data_from_numpy(image)
            sent = time.monotonic()
            try:
                await client.infer(MODEL, [tensor], client_timeout=60)
            except Exception as err:  # noqa: BLE001 - counted, the soak goes on
                if sent >= measure_from:
                    failures.append(f"{type(err).__name__}: {err}"[:300])
                continue
            done = time.monotonic()
            if sent >= measure_from:
                records.append((done - measure_from, done - sent))

    async def sample_memory() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.monotonic()))
        memory["start_kb"] = resident_kb(pid)
        peak = memory["start_kb"]
        while time.monotonic() < end:
            await asyncio.sleep(1.0)
            peak = max(peak, resident_kb(pid))
        memory["end_kb"] = resident_kb(pid)
        memory["peak_kb"] = max(peak, memory["end_kb"])

    try:
        await asyncio.gather(sample_memory(), *(caller() for _ in range(concurrency)))
    finally:
        await client.close()
    window = min(60.0, seconds / 4)
    first = [latency for at, latency in records if at < window]
    last = [latency for at, latency in records if at >= seconds - window]
    p99_first = float(np.percentile(first, 99)) * 1000 if first else float("nan")
    p99_last = float(np.percentile(last, 99)) * 1000 if last else float("nan")
    growth = memory["end_kb"] / memory["start_kb"] - 1
    return {
        "seconds": seconds, "concurrency": concurrency, "image_size": image_size, "window_s": window,
        "requests": len(records), "failures": len(failures), "failure_examples": failures[:5],
        "throughput_per_s": len(records) / seconds,
        "p50_ms": float(np.percentile([r[1] for r in records], 50)) * 1000 if records else float("nan"),
        "p99_first_ms": p99_first, "p99_last_ms": p99_last, "p99_ratio": p99_last / p99_first,
        "rss_start_kb": memory["start_kb"], "rss_end_kb": memory["end_kb"], "rss_peak_kb": memory["peak_kb"],
        "rss_growth": growth,
        "passed": not failures and p99_last <= 1.5 * p99_first and growth <= 0.10,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    length = parser.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="measured length in minutes (default 10)")
    length.add_argument("--seconds", type=float, help="measured length in seconds")
    parser.add_argument("--warmup", type=float, default=10.0, help="unmeasured seconds first")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--json", type=Path, help="write the result here")
    args = parser.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else 60.0 * (args.minutes if args.minutes is not None else 10)

    with tempfile.TemporaryDirectory(prefix="lite-soak-") as folder:
        repository = Path(folder)
        build_repository(repository, args.image_size)
        port = free_port()
        process = start_lite_serve(repository, port)
        try:
            address = f"127.0.0.1:{port}"
            wait_ready(address, process, (MODEL,), timeout=300)
            result = asyncio.run(soak(address, process.pid, seconds, args.warmup, args.concurrency, args.image_size))
            result["server_alive"] = process.poll() is None
        finally:
            stop(process)
    print(f"{result['requests']} requests in {seconds:.0f} s at concurrency {args.concurrency} "
          f"({result['throughput_per_s']:.0f}/s), {result['failures']} failed; p99 first {result['p99_first_ms']:.1f} ms, "
          f"last {result['p99_last_ms']:.1f} ms (x{result['p99_ratio']:.2f}); RSS {result['rss_start_kb'] // 1024} -> "
          f"{result['rss_end_kb'] // 1024} MiB ({result['rss_growth']:+.1%}); {'PASS' if result['passed'] else 'FAIL'}")
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2))
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
