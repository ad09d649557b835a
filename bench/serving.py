#!/usr/bin/env python3
"""Serving benchmark (issue 9, acceptance): lite serve vs a bare grpc.aio echo server (the floor)
and MLServer 1.7 (the peer), one after another in one run on the same machine, all serving an
FP32 [1,16] identity model to tritonclient aio clients on loopback.

    python bench/serving.py [--duration 5] [--mlserver-python /path/to/venv/bin/python]

Targets: at concurrency 1, lite's p50 latency <= 1.2x the floor's; at concurrency 8, lite's
throughput >= 0.9x the floor's and >= 1.6x MLServer's. MLServer runs from another interpreter
(``--mlserver-python``; it pins its own grpcio/protobuf), and is skipped when none is given and
``mlserver`` is not importable here.

Only loopback addresses are used; every loop is bounded by ``--duration``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# ----- the floor: a bare grpc.aio server that echoes the inputs (run as a subprocess) ----------

ECHO_SERVER = """
import asyncio, sys
import grpc
from serving._generated import inference_pb2 as pb, inference_pb2_grpc as pb_grpc

class Echo(pb_grpc.GRPCInferenceServiceServicer):
    async def ModelInfer(self, request, context):
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(port: int, process: subprocess.Popen, timeout: float = 60.0) -> None:
    import tritonclient.grpc as grpcclient

    deadline = time.monotonic() + timeout
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            if client.is_server_ready():
                return
        except Exception:  # not listening yet
            pass
        time.sleep(0.2)
    raise RuntimeError("server not ready in time")


def start_floor(port: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", ECHO_SERVER, str(port)], env=env)


def start_lite(port: int, workdir: Path) -> subprocess.Popen:
    from lite.format import GraphBuilder, save

    model_dir = workdir / "lite" / "identity" / "1"
    model_dir.mkdir(parents=True)
    b = GraphBuilder("identity")
    x = b.input("INPUT0", np.float32, ["N", 16])
    y = b.node("Identity", [x], outputs=["OUTPUT0"])
    b.output(y, np.float32, ["N", 16])
    save(b.build(), str(model_dir / "model.lite"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "serving", "--repository", str(workdir / "lite"), "--host", "127.0.0.1",
               "--port", str(port), "--metrics-port", "0", "--log-level", "warning"]
    return subprocess.Popen(command, env=env)


def start_mlserver(port: int, workdir: Path, python: str) -> subprocess.Popen:
    model_dir = workdir / "mlserver" / "identity"
    model_dir.mkdir(parents=True)
    (model_dir / "runtime.py").write_text(textwrap.dedent(MLSERVER_RUNTIME))
    (model_dir / "model-settings.json").write_text(json.dumps({"name": "identity", "implementation": "runtime.Identity"}))
    (workdir / "mlserver" / "settings.json").write_text(json.dumps({
        "grpc_port": port, "http_port": free_port(), "host": "127.0.0.1", "metrics_endpoint": None,
        "parallel_workers": 0,
    }))
    cli = str(Path(python).parent / "mlserver")  # the console script next to that interpreter
    return subprocess.Popen([cli, "start", str(workdir / "mlserver")], cwd=model_dir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def measure(port: int, concurrency: int, duration: float, warmup: float) -> dict:
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(f"127.0.0.1:{port}")
    tensor = aioclient.InferInput("INPUT0", [1, 16], "FP32")
    tensor.set_data_from_numpy(np.arange(16, dtype=np.float32).reshape(1, 16))
    try:
        async def phase(seconds: float) -> tuple[list[float], float]:
            latencies: list[float] = []
            start = time.perf_counter()
            stop_at = start + seconds

            async def caller() -> None:
                while time.perf_counter() < stop_at:
                    t0 = time.perf_counter()
                    await client.infer("identity", [tensor])
                    latencies.append(time.perf_counter() - t0)

            await asyncio.gather(*(caller() for _ in range(concurrency)))
            return latencies, time.perf_counter() - start

        await phase(warmup)
        latencies, elapsed = await phase(duration)
    finally:
        await client.close()
    lat = np.asarray(latencies) * 1e6
    return {"rps": len(lat) / elapsed, "p50_us": float(np.percentile(lat, 50)), "p99_us": float(np.percentile(lat, 99))}


def run_one(name: str, start, duration: float, warmup: float) -> dict:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        process = start(port, Path(tmp))
        try:
            wait_ready(port, process)
            return {
                "c1": asyncio.run(measure(port, 1, duration, warmup)),
                "c8": asyncio.run(measure(port, 8, duration, warmup)),
            }
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0, help="seconds measured per point")
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--mlserver-python", default=None, help="interpreter with mlserver 1.7 installed")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = parser.parse_args()

    servers = {"floor (grpc.aio echo)": lambda port, tmp: start_floor(port), "lite serve": start_lite}
    mlserver_python = args.mlserver_python
    if mlserver_python is None and importlib.util.find_spec("mlserver") is not None:
        mlserver_python = sys.executable
    if mlserver_python is not None:
        servers["MLServer 1.7"] = lambda port, tmp: start_mlserver(port, tmp, mlserver_python)
    results = {}
    for name, start in servers.items():
        results[name] = run_one(name, start, args.duration, args.warmup)
        r = results[name]
        print(f"{name:24s} c=1: p50 {r['c1']['p50_us']:7.0f} µs  {r['c1']['rps']:7.0f} req/s | "
              f"c=8: {r['c8']['rps']:7.0f} req/s  p99 {r['c8']['p99_us']:7.0f} µs", flush=True)
    floor, lite = results["floor (grpc.aio echo)"], results["lite serve"]
    checks = {
        "c1 p50 <= 1.2x floor": lite["c1"]["p50_us"] <= 1.2 * floor["c1"]["p50_us"],
        "c8 throughput >= 0.9x floor": lite["c8"]["rps"] >= 0.9 * floor["c8"]["rps"],
    }
    print(f"lite/floor: c1 p50 {lite['c1']['p50_us'] / floor['c1']['p50_us']:.2f}x, "
          f"c8 throughput {lite['c8']['rps'] / floor['c8']['rps']:.2f}x")
    if "MLServer 1.7" in results:
        peer = results["MLServer 1.7"]
        checks["c8 throughput >= 1.6x MLServer"] = lite["c8"]["rps"] >= 1.6 * peer["c8"]["rps"]
        print(f"lite/MLServer: c8 throughput {lite['c8']['rps'] / peer['c8']['rps']:.2f}x")
    else:
        print("MLServer: not run (pass --mlserver-python or install mlserver==1.7.*)")
    for check, ok in checks.items():
        print(f"  {'PASS' if ok else 'FAIL'}  {check}")
    if args.json is not None:
        args.json.write_text(json.dumps({"results": results, "checks": checks}, indent=2))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
