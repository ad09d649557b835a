#!/usr/bin/env python3
"""System shared memory against tensors in the message: ``lite serve`` with a large tensor model.

    python bench/serving_shm.py [--perf-analyzer PATH] [--rounds 5] [--duration 3] [--concurrency 1]
    python bench/serving_shm.py --client tritonclient [--rounds 5] [--duration 3]

The model is an Identity over FP32 [1, 3, 512, 512] (3 MiB in, 3 MiB out), so what is measured is
moving the tensors, not computing. One ``lite serve`` process (defaults, loopback) serves it; the
rounds alternate between the two ways of sending (the order flips each round), and the ratio is the
median of the per-round ratios of throughput (shared memory / message).

``--client perf-analyzer`` (the default when a perf_analyzer binary is found): Triton's
perf_analyzer, ``-i grpc --concurrency-range C --measurement-interval`` of ``--duration``
seconds and ``--stability-percentage 50`` (a busy machine rarely holds its default 10 %), with ``--shared-memory none`` or ``--shared-memory system --output-shared-memory-size
3145728``; docs/serving.md says how to make the binary run here. ``--client tritonclient``:
``--concurrency`` threads, each with its own tritonclient.grpc client calling ``infer`` in a
closed loop, the tensors either in the request (``set_data_from_numpy``, output answered raw) or
in regions made with ``tritonclient.utils.shared_memory`` (input written once, the output read
back with ``get_contents_as_numpy`` after each call, so both ways hand the caller the output).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from servers import free_port, start_lite_serve, stop, wait_ready  # noqa: E402 - bench/servers.py

MODEL = "big"
SHAPE = (1, 3, 512, 512)
NBYTES = int(np.prod(SHAPE)) * 4


def build_repository(root: Path) -> None:
    from lite.format import GraphBuilder, save

    builder = GraphBuilder(MODEL)
    x = builder.input("INPUT0", np.float32, list(SHAPE))
    builder.output(builder.node("Identity", [x], outputs=["OUTPUT0"]), np.float32, list(SHAPE))
    (root / MODEL / "1").mkdir(parents=True)
    save(builder.build(), str(root / MODEL / "1" / "model.lite"))


def perf_analyzer_round(binary: str, address: str, shared: bool, concurrency: int, duration: float,
                        stability: int) -> dict:
    command = [binary, "-m", MODEL, "-u", address, "-i", "grpc", "--concurrency-range", str(concurrency),
               "--measurement-interval", str(int(duration * 1000)), "--stability-percentage", str(stability)]
    if shared:
        command += ["--shared-memory", "system", "--output-shared-memory-size", str(NBYTES)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"perf_analyzer failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    throughput = float(re.search(r"Throughput: ([\d.]+) infer/sec", done.stdout).group(1))
    p50 = float(re.search(r"p50 latency: (\d+) usec", done.stdout).group(1))
    return {"throughput": throughput, "p50_ms": p50 / 1000}


def tritonclient_round(address: str, shared: bool, concurrency: int, duration: float) -> dict:
    import tritonclient.grpc as grpcclient
    import tritonclient.utils.shared_memory as shm

    x = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)
    latencies: list[float] = []
    lock = threading.Lock()
    deadline = time.perf_counter() + duration

    def caller(index: int) -> None:
        client = grpcclient.InferenceServerClient(address)
        tensor = grpcclient.InferInput("INPUT0", list(SHAPE), "FP32")
        output = grpcclient.InferRequestedOutput("OUTPUT0")
        handles = []
        if shared:
            tag = uuid.uuid4().hex[:8]
            handles = [shm.create_shared_memory_region(f"in{tag}", f"/lite_bench_in{tag}", NBYTES),
                       shm.create_shared_memory_region(f"out{tag}", f"/lite_bench_out{tag}", NBYTES)]
            shm.set_shared_memory_region(handles[0], [x])
            client.register_system_shared_memory(f"in{tag}", f"/lite_bench_in{tag}", NBYTES)
            client.register_system_shared_memory(f"out{tag}", f"/lite_bench_out{tag}", NBYTES)
            tensor.set_shared_memory(f"in{tag}", NBYTES)
            output.set_shared_memory(f"out{tag}", NBYTES)
        else:
            tensor.set_data_from_numpy(x)
        mine = []
        try:
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                result = client.infer(MODEL, [tensor], outputs=[output])
                if shared:
                    answer = shm.get_contents_as_numpy(handles[1], np.float32, list(SHAPE))
                else:
                    answer = result.as_numpy("OUTPUT0")
                mine.append(time.perf_counter() - start)
            assert answer.shape == SHAPE
        finally:
            if shared:
                client.unregister_system_shared_memory(f"in{tag}")
                client.unregister_system_shared_memory(f"out{tag}")
                for handle in handles:
                    shm.destroy_shared_memory_region(handle)
            client.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    return {"throughput": len(latencies) / elapsed, "p50_ms": statistics.median(latencies) * 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--client", choices=("perf-analyzer", "tritonclient"), default=None,
                        help="the load generator (default: perf-analyzer when a binary is found, else tritonclient)")
    parser.add_argument("--perf-analyzer", default=os.environ.get("PERF_ANALYZER") or shutil.which("perf_analyzer"),
                        help="the perf_analyzer binary (default: $PERF_ANALYZER, or perf_analyzer on PATH)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds measured per point")
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--stability-percentage", type=int, default=50,
                        help="perf_analyzer's: how far the last 3 windows may differ (its default, 10, is rarely met "
                             "on a shared machine)")
    args = parser.parse_args()
    client = args.client or ("perf-analyzer" if args.perf_analyzer else "tritonclient")
    if client == "perf-analyzer" and not args.perf_analyzer:
        parser.error("no perf_analyzer binary: give --perf-analyzer PATH (docs/serving.md) or --client tritonclient")

    with tempfile.TemporaryDirectory() as tmp:
        build_repository(Path(tmp))
        port = free_port()
        address = f"127.0.0.1:{port}"
        server = start_lite_serve(Path(tmp), port)
        try:
            wait_ready(address, server, [MODEL])
            results: dict[bool, list[dict]] = {False: [], True: []}
            print(f"model {MODEL} FP32 {list(SHAPE)} ({NBYTES} bytes in and out), client {client}, "
                  f"concurrency {args.concurrency}, {args.rounds} rounds of {args.duration} s; load {os.getloadavg()[0]:.2f}")
            for index in range(args.rounds):
                for shared in (False, True) if index % 2 == 0 else (True, False):
                    if client == "perf-analyzer":
                        point = perf_analyzer_round(args.perf_analyzer, address, shared, args.concurrency,
                                                    args.duration, args.stability_percentage)
                    else:
                        point = tritonclient_round(address, shared, args.concurrency, args.duration)
                    results[shared].append(point)
                    print(f"  round {index + 1} {'shared memory' if shared else 'message      '}: "
                          f"{point['throughput']:8.1f} infer/s  p50 {point['p50_ms']:7.2f} ms")
            ratios = [s["throughput"] / m["throughput"] for m, s in zip(results[False], results[True], strict=True)]
            for shared in (False, True):
                points = results[shared]
                print(f"{'shared memory' if shared else 'message':13}: median {statistics.median(p['throughput'] for p in points):.1f} "
                      f"infer/s, p50 {statistics.median(p['p50_ms'] for p in points):.2f} ms")
            print(f"shared memory / message, throughput: {statistics.median(ratios):.2f}x "
                  f"[{min(ratios):.2f}-{max(ratios):.2f}]; load {os.getloadavg()[0]:.2f}")
        finally:
            stop(server)
    return 0


if __name__ == "__main__":
    sys.exit(main())
