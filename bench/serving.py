#!/usr/bin/env python3
"""Serving benchmark: lite serve vs a bare grpc.aio echo server (the floor)
and MLServer 1.7 (the peer), all serving an FP32 [1,16] identity model to tritonclient aio
clients on loopback, side by side in one run on the same machine.

    python bench/serving.py [--rounds 5] [--duration 3] [--mlserver-python /tmp/mlsenv/bin/python]

Method. The machine is small and shared (2 cores, other jobs), so one long run per server mixes
the servers' speed with the machine's mood. Instead every server starts first and stays up; then
``--rounds`` rounds each measure every server in turn (the order rotates each round), at
concurrency 1 and at concurrency 8, for ``--duration`` seconds after ``--warmup`` seconds. The
figures are medians over rounds, and each ratio (lite / floor, lite / MLServer) is the median of
the per-round ratios: the two servers of a ratio were measured seconds apart, under the same load.

Targets: at concurrency 1, lite's p50 latency <= 1.2x the floor's; at concurrency 8, lite's
throughput >= 0.9x the floor's and >= 1.6x MLServer's. MLServer runs from another interpreter
(``--mlserver-python``, default /tmp/mlsenv/bin/python when it exists; it pins its own
grpcio/protobuf) and is skipped when there is none.

Only loopback addresses are used; every loop is bounded by ``--duration`` and ``--rounds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from servers import free_port, start_lite_serve, stop, wait_ready  # noqa: E402 - bench/servers.py

DEFAULT_MLSERVER_PYTHON = Path("/tmp/mlsenv/bin/python")
FLOOR, LITE, PEER = "floor (grpc.aio echo)", "lite serve", "MLServer 1.7"

# ----- the floor: a bare grpc.aio server that echoes the inputs (run as a subprocess) ----------

# argv: port [spin_us [loop]]: bench/serving_overhead.py makes it spin (busy-wait) per request
# and run on uvloop, to price a server's per-request work; bench/serving.py uses neither.
ECHO_SERVER = """
import asyncio, sys, time
import grpc
from serving._generated import inference_pb2 as pb, inference_pb2_grpc as pb_grpc

SPIN = float(sys.argv[2]) * 1e-6 if len(sys.argv) > 2 else 0.0

class Echo(pb_grpc.GRPCInferenceServiceServicer):
    async def ModelInfer(self, request, context):
        if SPIN:
            until = time.perf_counter() + SPIN
            while time.perf_counter() < until:
                pass
        return pb.ModelInferResponse(
            model_name=request.model_name, id=request.id,
            outputs=[pb.ModelInferResponse.InferOutputTensor(name="OUTPUT0", datatype=t.datatype, shape=t.shape)
                     for t in request.inputs],
            raw_output_contents=request.raw_input_contents)
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

async def main():
    server = grpc.aio.server()
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Echo(), server)
    server.add_insecure_port("127.0.0.1:" + sys.argv[1])
    await server.start()
    await server.wait_for_termination()

if len(sys.argv) > 3 and sys.argv[3] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""

# ----- the peer: MLServer with a small custom runtime that returns its input --------------------

MLSERVER_RUNTIME = """
from mlserver import MLModel
from mlserver.types import InferenceRequest, InferenceResponse, ResponseOutput


class Identity(MLModel):
    async def load(self) -> bool:
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        tensor = payload.inputs[0]
        return InferenceResponse(
            model_name=self.name,
            outputs=[ResponseOutput(name="OUTPUT0", shape=tensor.shape, datatype=tensor.datatype,
                                    data=tensor.data)],
        )
"""


def start_floor(port: int, spin_us: float = 0.0, loop: str = "asyncio") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port), str(spin_us), loop], env=env)


def start_lite(port: int, workdir: Path, extra: tuple[str, ...] = ()) -> subprocess.Popen:
    from lite.format import GraphBuilder, save

    model_dir = workdir / "lite" / "identity" / "1"
    model_dir.mkdir(parents=True)
    b = GraphBuilder("identity")
    x = b.input("INPUT0", np.float32, ["N", 16])
    y = b.node("Identity", [x], outputs=["OUTPUT0"])
    b.output(y, np.float32, ["N", 16])
    save(b.build(), str(model_dir / "model.lite"))
    # engine "auto": lite measures its engines on the model and serves it with the fastest (for
    # this identity model the numpy engine; `lite bench --autotune` on it prints the times).
    (model_dir.parent / "config.json").write_text(json.dumps({"engine": "auto"}))
    return start_lite_serve(workdir / "lite", port, extra)


def start_mlserver(port: int, workdir: Path, python: str) -> subprocess.Popen:
    model_dir = workdir / "mlserver" / "identity"
    model_dir.mkdir(parents=True)
    (model_dir / "runtime.py").write_text(textwrap.dedent(MLSERVER_RUNTIME))
    settings = {"name": "identity", "implementation": "runtime.Identity"}
    (model_dir / "model-settings.json").write_text(json.dumps(settings))
    (workdir / "mlserver" / "settings.json").write_text(json.dumps({
        "grpc_port": port, "http_port": free_port(), "host": "127.0.0.1", "metrics_endpoint": None,
        "parallel_workers": 0,
    }))
    cli = str(Path(python).parent / "mlserver")  # the console script next to that interpreter
    return subprocess.Popen([cli, "start", str(workdir / "mlserver")], cwd=model_dir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measure(client, tensor, concurrency: int, duration: float, warmup: float) -> dict:
    """Closed loop (``lite bench --grpc``'s): ``concurrency`` callers, each sending its next request when answered."""
    from serving.bench import closed_loop

    def call():
        return client.infer("identity", [tensor])

    await closed_loop(call, concurrency, warmup)
    latencies, elapsed = await closed_loop(call, concurrency, duration)
    lat = np.asarray(latencies) * 1e6
    return {"rps": len(lat) / elapsed, "p50_us": float(np.percentile(lat, 50)),
            "p99_us": float(np.percentile(lat, 99))}


async def run_rounds(ports: dict[str, int], rounds: int, duration: float, warmup: float) -> list[dict]:
    import tritonclient.grpc.aio as aioclient

    tensor = aioclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
    clients = {name: aioclient.InferenceServerClient(f"127.0.0.1:{port}") for name, port in ports.items()}
    names = list(ports)
    results = []
    try:
        for index in range(rounds):
            order = names[index % len(names):] + names[:index % len(names)]
            row: dict[str, dict] = {}
            for name in order:
                row[name] = {
                    "c1": await measure(clients[name], tensor, 1, duration, warmup),
                    "c8": await measure(clients[name], tensor, 8, duration, warmup),
                }
            results.append(row)
            print(f"round {index + 1}/{rounds} (order: {', '.join(order)})", flush=True)
            for name in names:
                r = row[name]
                print(f"  {name:24s} c=1: p50 {r['c1']['p50_us']:6.0f} µs {r['c1']['rps']:6.0f} req/s | "
                      f"c=8: {r['c8']['rps']:6.0f} req/s p50 {r['c8']['p50_us']:6.0f} µs", flush=True)
    finally:
        for client in clients.values():
            await client.close()
    return results


def summarize(rounds: list[dict]) -> dict:
    names = list(rounds[0])
    medians = {
        name: {point: {key: statistics.median(r[name][point][key] for r in rounds)
                       for key in ("rps", "p50_us", "p99_us")}
               for point in ("c1", "c8")}
        for name in names
    }

    def ratio(values: list[float]) -> dict:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    ratios = {
        "lite/floor c1 p50": ratio([r[LITE]["c1"]["p50_us"] / r[FLOOR]["c1"]["p50_us"] for r in rounds]),
        "lite/floor c8 throughput": ratio([r[LITE]["c8"]["rps"] / r[FLOOR]["c8"]["rps"] for r in rounds]),
    }
    if PEER in names:
        for name, server in (("lite", LITE), ("floor", FLOOR)):
            ratios[f"{name}/MLServer c8 throughput"] = ratio(
                [r[server]["c8"]["rps"] / r[PEER]["c8"]["rps"] for r in rounds])
    return {"medians": medians, "ratios": ratios}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds measured per point and round")
    parser.add_argument("--warmup", type=float, default=0.5, help="seconds before each point")
    parser.add_argument("--mlserver-python", default=None, help="interpreter with mlserver 1.7 installed")
    parser.add_argument("--lite-arg", action="append", default=[], help="extra lite serve flag (repeatable)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()
    if args.rounds < 1 or args.duration <= 0:
        parser.error("--rounds must be >= 1 and --duration > 0")

    starters = {FLOOR: lambda port, tmp: start_floor(port),
                LITE: lambda port, tmp: start_lite(port, tmp, tuple(args.lite_arg))}
    mlserver_python = args.mlserver_python
    if mlserver_python is None and DEFAULT_MLSERVER_PYTHON.exists():
        mlserver_python = str(DEFAULT_MLSERVER_PYTHON)
    if mlserver_python is not None:
        starters[PEER] = lambda port, tmp: start_mlserver(port, tmp, mlserver_python)
    else:
        print("MLServer: not run (pass --mlserver-python, or install mlserver==1.7.1 in /tmp/mlsenv)")

    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            ports = {}
            for name, start in starters.items():
                port = free_port()
                workdir = Path(tmp) / name.split()[0].lower()
                workdir.mkdir()
                process = start(port, workdir)
                processes.append(process)
                wait_ready(f"127.0.0.1:{port}", process)
                ports[name] = port
            rounds = asyncio.run(run_rounds(ports, args.rounds, args.duration, args.warmup))
        finally:
            for process in processes:
                stop(process)

    summary = summarize(rounds)
    print(f"\nmedians over {args.rounds} rounds of {args.duration:g} s per point:")
    for name, m in summary["medians"].items():
        print(f"  {name:24s} c=1: p50 {m['c1']['p50_us']:6.0f} µs {m['c1']['rps']:6.0f} req/s | "
              f"c=8: {m['c8']['rps']:6.0f} req/s p99 {m['c8']['p99_us']:6.0f} µs")
    print("ratios (median of per-round ratios, [min, max]):")
    for name, r in summary["ratios"].items():
        print(f"  {name:32s} {r['median']:.2f}x  [{r['min']:.2f}, {r['max']:.2f}]")
    ratios = summary["ratios"]
    checks = {
        "c1 p50 <= 1.2x floor": ratios["lite/floor c1 p50"]["median"] <= 1.2,
        "c8 throughput >= 0.9x floor": ratios["lite/floor c8 throughput"]["median"] >= 0.9,
    }
    if "lite/MLServer c8 throughput" in ratios:
        checks["c8 throughput >= 1.6x MLServer"] = ratios["lite/MLServer c8 throughput"]["median"] >= 1.6
    for check, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {check}")
    if args.json is not None:
        args.json.write_text(json.dumps({"rounds": rounds, **summary, "checks": checks}, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
