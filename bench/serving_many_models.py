"""A server holding many models: its threads, its memory, and its latency, per ONNX Runtime thread pool policy.

    python bench/serving_many_models.py [--models 300] [--pools session,shared,session:1] [--rounds 3] [--duration 3]

The repository holds ``--models`` tiny models (``tiny000``...: x + c on a [1, 16] float32 tensor)
and one mid-size CNN (``cnn``: four 3x3 convolutions on a [1, 3, 96, 96] image, a few ms a call),
all on ONNX Runtime's CPU provider. One server per ``--pools`` value starts
(``--ort-thread-pools POOLS``, and ``--threads THREADS`` for ``POOLS:THREADS``; ``default``
passes no flag, for a server that has none) and stays up. Once every model is ready, each server's threads (``/proc/PID/task``) and resident memory
(``VmRSS``) are read. Then ``--rounds`` rounds measure every server in turn (the order rotates
each round): ``tiny000`` and ``cnn`` at concurrency 1 and 4, ``--duration`` seconds each after a
second of warm-up, through ``lite bench``'s closed-loop client (serving.bench.run_bench), reading
the server's CPU time (``/proc/PID/stat``) around each. The tables give the median p50 latency
and CPU time per request over rounds, and each server's ratio to the first one's.

Only loopback addresses are used; every loop is bounded by ``--rounds`` and ``--duration``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))  # first: the checkout's serving package, not bench/serving.py
from servers import free_port, start_lite_serve, stop, wait_ready  # noqa: E402 - bench/servers.py

from lite.format import GraphBuilder, save  # noqa: E402
from serving.bench import run_bench  # noqa: E402

CASES = (("tiny000", 1), ("tiny000", 4), ("cnn", 1), ("cnn", 4))


def tiny_model(index: int):
    builder = GraphBuilder(f"tiny{index:03d}")
    x = builder.input("INPUT0", np.float32, [1, 16])
    c = builder.constant("c", np.full([1, 16], index, np.float32))
    builder.output(builder.node("Add", [x, c], outputs=["OUTPUT0"]), np.float32, [1, 16])
    return builder.build()


def cnn_model():
    """Four 3x3 convolutions with ReLU (3 -> 32 -> 32 stride 2 -> 64 -> 64 stride 2), then a global average."""
    rng = np.random.default_rng(0)
    builder = GraphBuilder("cnn")
    value = builder.input("INPUT0", np.float32, [1, 3, 96, 96])
    channels = 3
    for index, (width, stride) in enumerate(((32, 1), (32, 2), (64, 1), (64, 2))):
        weight = builder.constant(f"w{index}", (rng.standard_normal((width, channels, 3, 3)) * 0.1).astype(np.float32))
        bias = builder.constant(f"b{index}", np.zeros(width, np.float32))
        value = builder.node("Conv", [value, weight, bias], pads=[1, 1, 1, 1], strides=[stride, stride])
        value = builder.node("Relu", [value])
        channels = width
    builder.output(builder.node("GlobalAveragePool", [value], outputs=["OUTPUT0"]), np.float32, [1, 64, 1, 1])
    return builder.build()


def build_repository(directory: Path, count: int) -> None:
    for name, model in [(f"tiny{i:03d}", tiny_model(i)) for i in range(count)] + [("cnn", cnn_model())]:
        (directory / name / "1").mkdir(parents=True)
        save(model, str(directory / name / "1" / "model.lite"))


def policy_flags(policy: str) -> tuple[str, ...]:
    """The server flags of ``policy``: ``POOLS[:THREADS]`` (``shared``, ``session:1``), or ``default``."""
    pools, _, threads = policy.partition(":")
    flags = () if pools == "default" else ("--ort-thread-pools", pools)
    return flags + (("--threads", threads) if threads else ())


def process_figures(pid: int) -> dict:
    """Threads and resident memory of process ``pid``, from /proc."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {"threads": len(list(Path(f"/proc/{pid}/task").iterdir())),
            "rss_mib": round(int(status["VmRSS"].split()[0]) / 1024, 1),
            "virtual_mib": round(int(status["VmSize"].split()[0]) / 1024, 1)}


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far, every thread's (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measure(port: int, pid: int, model: str, concurrency: int, duration: float) -> tuple[float, float]:
    """p50 latency (µs) and the server's CPU time per request (µs) over one closed-loop run."""
    started = cpu_seconds(pid)
    report = await run_bench(f"127.0.0.1:{port}", model, concurrency=concurrency, duration=duration, warmup=20)
    return report["latency_us"]["p50"], (cpu_seconds(pid) - started) * 1e6 / max(report["requests"], 1)


async def run_rounds(servers: dict[str, tuple[int, int]], rounds: int, duration: float) -> dict[str, dict]:
    """Per policy and case: the p50 latencies and CPU times per request of each round."""
    cases = [f"{m} c{c}" for m, c in CASES]
    times: dict[str, dict] = {pools: {"p50": {c: [] for c in cases}, "cpu": {c: [] for c in cases}} for pools in servers}
    order = list(servers)
    for round_index in range(rounds):
        turn = order[round_index % len(order):] + order[:round_index % len(order)]
        for (model, concurrency), case in zip(CASES, cases):
            for pools in turn:
                port, pid = servers[pools]
                await measure(port, pid, model, concurrency, 1.0)  # warm-up: the other server's threads settle
                p50, cpu = await measure(port, pid, model, concurrency, duration)
                times[pools]["p50"][case].append(p50)
                times[pools]["cpu"][case].append(cpu)
    return times


def print_table(title: str, values: dict[str, dict[str, list[float]]], rounds: int) -> None:
    first = next(iter(values))
    print(f"{title}, median of {rounds} rounds; ratio to {first} (median of the rounds' ratios):")
    for case in values[first]:
        row = [f"{case:>12}"]
        for pools, cases in values.items():
            ratio = statistics.median(t / b for t, b in zip(cases[case], values[first][case]))
            row.append(f"{pools} {statistics.median(cases[case]):8.0f} ({ratio:.2f}x)")
        print("  ".join(row))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=300, help="tiny models besides the CNN")
    parser.add_argument("--pools", default="session,shared,session:1",
                        help="policies, comma-separated: --ort-thread-pools values, each with :THREADS (--threads) "
                             "or without")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--no-latency", action="store_true", help="threads and memory only")
    args = parser.parse_args()
    policies = args.pools.split(",")
    with tempfile.TemporaryDirectory() as workdir:
        repository = Path(workdir) / "repository"
        build_repository(repository, args.models)
        servers, ports = {}, {}
        try:
            for pools in policies:
                ports[pools] = free_port()
                extra = policy_flags(pools)
                servers[pools] = start_lite_serve(repository, ports[pools], extra)
            for pools in policies:
                wait_ready(f"127.0.0.1:{ports[pools]}", servers[pools], ["cnn", "tiny000"], timeout=600)
            figures = {pools: process_figures(servers[pools].pid) for pools in policies}
            print(f"{args.models} tiny models + cnn, device auto (ONNX Runtime CPU)")
            for pools, values in figures.items():
                print(f"  {pools:>8}: {values['threads']} threads, RSS {values['rss_mib']} MiB, "
                      f"virtual {values['virtual_mib']} MiB")
            if args.no_latency:
                return
            times = asyncio.run(run_rounds({p: (ports[p], servers[p].pid) for p in policies}, args.rounds,
                                           args.duration))
        finally:
            for server in servers.values():
                stop(server)
    print_table("p50 latency (µs)", {pools: times[pools]["p50"] for pools in policies}, args.rounds)
    print_table("server CPU time per request (µs)", {pools: times[pools]["cpu"] for pools in policies}, args.rounds)


if __name__ == "__main__":
    main()
