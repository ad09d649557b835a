#!/usr/bin/env python3
"""Where a small request's time goes in lite serve, against the bare grpc.aio floor.

    python bench/serving_overhead.py [--rounds 4] [--duration 3] [--steps-only]
        [--server floor --server floor:spin=40 --server floor:loop=uvloop --server lite
         --server lite:event-loop=asyncio ...]

Two parts, on the FP32 [1,16] identity model of bench/serving.py:

1. Servers under load. Every ``--server`` starts first; then ``--rounds`` rounds measure each in
   turn at concurrency 8 (tritonclient aio, closed loop) for ``--duration`` seconds and read the
   server process's CPU time (``/proc/PID/stat``) over the same window. The table gives medians
   over rounds: requests a second and the server's CPU microseconds per request. ``floor:spin=N``
   is the floor busy-waiting N µs per request (what N µs of per-request work costs in
   throughput), ``floor:loop=uvloop`` the floor on uvloop; ``lite:ARG=VALUE`` passes ``--ARG VALUE``
   to lite serve, ``lite:FLAG`` passes ``--FLAG`` (e.g. ``lite:no-reflection``).
2. The request path in-process (in a process of its own; ``--steps-only`` runs just this): lite's
   steps for one request, each timed alone in a loop (best of 3 repetitions): decoding, validation, the engine, the data
   plane with scheduling and statistics, encoding.

Linux only (``/proc``); loopback only; every loop is bounded by ``--rounds`` and ``--duration``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "bench"))  # after the checkout: `serving` stays the package
from servers import free_port, stop, wait_ready  # noqa: E402 - bench/servers.py

# bench/serving.py's servers and load loop (a file named like the package, so loaded by path).
_spec = importlib.util.spec_from_file_location("serving_bench", ROOT / "bench" / "serving.py")
serving_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(serving_bench)
measure, start_floor, start_lite = serving_bench.measure, serving_bench.start_floor, serving_bench.start_lite

DEFAULT_SERVERS = ("floor", "floor:loop=uvloop", "floor:spin=40", "lite", "lite:event-loop=asyncio")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(spec: str, workdir: Path):
    kind, *options = spec.split(":")
    settings = dict(option.split("=", 1) if "=" in option else (option, None) for option in options)
    port = free_port()
    if kind == "floor":
        process = start_floor(port, float(settings.get("spin", 0)), settings.get("loop", "asyncio"))
        wait_ready(f"127.0.0.1:{port}", process)
    elif kind == "lite":
        extra = tuple(item for name, value in settings.items()
                      for item in ((f"--{name}",) if value is None else (f"--{name}", value)))
        process = start_lite(port, workdir / spec.replace(":", "_").replace("=", "-"), extra)
        wait_ready(f"127.0.0.1:{port}", process, ["identity"])
    else:
        raise SystemExit(f"--server {spec!r}: expected floor[:spin=US][:loop=uvloop] or lite[:FLAG[=VALUE]]")
    return port, process


async def load(port: int, duration: float, process) -> tuple[float, float]:
    import tritonclient.grpc.aio as aioclient

    tensor = aioclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
    client = aioclient.InferenceServerClient(f"127.0.0.1:{port}")
    try:
        await measure(client, tensor, 8, 0.5, 0.0)  # warm-up, outside the CPU window
        before = cpu_seconds(process.pid)
        result = await measure(client, tensor, 8, duration, 0.0)
        spent = cpu_seconds(process.pid) - before
    finally:
        await client.close()
    return result["rps"], 1e6 * spent / (result["rps"] * duration)


def servers_under_load(specs: list[str], rounds: int, duration: float) -> None:
    with tempfile.TemporaryDirectory() as folder:
        started = {spec: start(spec, Path(folder)) for spec in specs}
        results: dict[str, list[tuple[float, float]]] = {spec: [] for spec in specs}
        try:
            for index in range(rounds):
                order = specs[index % len(specs):] + specs[:index % len(specs)]
                for spec in order:
                    port, process = started[spec]
                    results[spec].append(asyncio.run(load(port, duration, process)))
                print(f"round {index + 1}/{rounds}", file=sys.stderr, flush=True)
        finally:
            for _, process in started.values():
                stop(process)
    print(f"concurrency 8, medians of {rounds} rounds of {duration:g} s")
    print(f"{'server':32s} {'req/s':>8s} {'server CPU µs/request':>22s}   rounds (req/s)")
    for spec, rows in results.items():
        rps = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(f"{spec:32s} {rps:8.0f} {cpu:22.0f}   {[round(r[0]) for r in rows]}")


def request_steps() -> None:
    """lite's request path, step by step, in this process (no gRPC transport)."""
    import argparse as _argparse

    from lite.format import GraphBuilder, save
    from serving._generated import inference_pb2 as pb
    from serving.grpc import converters
    from serving.grpc.server import Server
    from serving.grpc.servicer import InferenceServicer
    from serving.settings import Settings, add_arguments

    with tempfile.TemporaryDirectory() as folder:
        version = Path(folder) / "identity" / "1"
        version.mkdir(parents=True)
        b = GraphBuilder("identity")
        b.output(b.node("Identity", [b.input("INPUT0", np.float32, ["N", 16])], outputs=["OUTPUT0"]),
                 np.float32, ["N", 16])
        save(b.build(), str(version / "model.lite"))
        parser = _argparse.ArgumentParser()
        add_arguments(parser)
        settings = Settings.from_sources(parser.parse_args(
            ["--repository", folder, "--port", "0", "--metrics-port", "0", "--device", "numpy"]), environ={})
        data = pb.ModelInferRequest(
            model_name="identity", raw_input_contents=[np.arange(16, dtype=np.float32).tobytes()],
            inputs=[pb.ModelInferRequest.InferInputTensor(name="INPUT0", datatype="FP32", shape=[1, 16])],
        ).SerializeToString()

        class Context:
            def time_remaining(self):
                return None

        async def main() -> None:
            server = Server(settings)
            await server.manager.load_startup_models()
            server.dataplane.started = True
            servicer, context = InferenceServicer(server.dataplane, 8), Context()
            model = server.manager.get("identity")
            request = converters.to_request(pb.ModelInferRequest.FromString(data), None)
            feeds = dict(request.inputs)
            response = await server.dataplane.infer(request)

            async def infer():
                await servicer.ModelInfer(pb.ModelInferRequest.FromString(data), context)

            steps = [
                ("parse the message", lambda: pb.ModelInferRequest.FromString(data), False),
                ("to_request (decode)", lambda: converters.to_request(pb.ModelInferRequest.FromString(data), None), False),
                ("lite.Model.predict", lambda: model._model.predict(feeds), False),
                ("  of which the engine's run", lambda: model._model.engine.run(feeds), False),
                ("dataplane.infer (model, scheduling, statistics)", lambda: server.dataplane.infer(request), True),
                ("from_response (encode)", lambda: converters.from_response(response, {}), False),
                ("servicer.ModelInfer, all of the above", infer, True),
            ]
            print("in-process, µs per request (best of 3 x 20,000)")
            for label, step, awaited in steps:
                best = float("inf")
                for _ in range(4):  # the first repetition warms up
                    began = time.perf_counter()
                    for _ in range(20_000):
                        if awaited:
                            await step()
                        else:
                            step()
                    best = min(best, (time.perf_counter() - began) / 20_000 * 1e6)
                print(f"  {label:50s} {best:6.2f}")
            await server.manager.close()

        asyncio.run(main())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", action="append", default=None, help=f"default: {' '.join(DEFAULT_SERVERS)}")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--steps-only", action="store_true", help="only the in-process request path")
    args = parser.parse_args()
    if args.steps_only:
        request_steps()
        return 0
    servers_under_load(args.server or list(DEFAULT_SERVERS), args.rounds, args.duration)
    # In a process of its own: tritonclient's generated code and the server's both define the
    # protocol's messages, and one process's protobuf pool takes only one of them.
    return subprocess.run([sys.executable, __file__, "--steps-only"], check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
