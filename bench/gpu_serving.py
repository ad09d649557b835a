#!/usr/bin/env python3
"""256 concurrent single-image gRPC clients against ``lite serve`` on one GPU.

ResNet-50 (torchvision definition, random weights) converted with ``--fp16 --fp16-io
--dynamic-batch`` is served with dynamic batching (``max_batch_size`` 256, batches padded to
powers of two, or to ``--preferred`` sizes) on ``--device cuda`` by ``--workers`` server
processes (``lite serve --workers``). ``--client-processes`` processes of ``--concurrency``
tritonclient aio callers each (256 in all by default) send one 224×224 fp16 image per request,
the next when answered, for ``--duration`` seconds (``serving.bench.run_bench``, the load loop of
``lite bench --grpc``). Reported: images/s served, the server's breakdown per request (queue, input, infer,
output) and its average batch, against the engine's own batch-256 throughput measured in this
process on numpy inputs (what the server hands it) and on device-resident ones. Where the
server's CPU goes: each of its threads' share of a core over the middle of the run (from
/proc; the event loop runs on the main thread).

    python bench/gpu_serving.py --json gpu_serving.json          # on the GPU machine

``--server floor`` runs the same clients against a bare grpc.aio server that answers each request
with a zero output of the model's shape without looking at it: what one Python gRPC process takes
in of this load, whatever it serves. ``--profile FILE`` samples the server with py-spy (when
installed) over the middle of the run, every thread of every worker, into a speedscope file
(``--profile-native``: C frames too, at the cost of stopping the server for each sample).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from servers import free_port, start_lite_serve, subprocess_env, wait_ready  # noqa: E402 - bench/servers.py

CLIENT = """
import asyncio, json, sys
from serving.bench import run_bench
report = asyncio.run(run_bench(sys.argv[1], "resnet50", concurrency=int(sys.argv[2]), duration=float(sys.argv[3]),
                               warmup=2))
print(json.dumps(report))
"""


FLOOR = """
import asyncio, sys
import grpc
from serving._generated import inference_pb2 as pb, inference_pb2_grpc as pb_grpc

T = pb.ModelMetadataResponse.TensorMetadata
OUT = bytes(2000)  # 1000 float16 zeros per image

class Floor(pb_grpc.GRPCInferenceServiceServicer):
    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)
    async def ModelReady(self, request, context):
        return pb.ModelReadyResponse(ready=True)
    async def ModelMetadata(self, request, context):
        return pb.ModelMetadataResponse(name=request.name, versions=["1"], platform="floor",
                                        inputs=[T(name="input", datatype="FP16", shape=[-1, 3, 224, 224])],
                                        outputs=[T(name="output", datatype="FP16", shape=[-1, 1000])])
    async def ModelConfig(self, request, context):
        return pb.ModelConfigResponse(config=pb.ModelConfig(name=request.name, max_batch_size=256))
    async def ModelStatistics(self, request, context):
        return pb.ModelStatisticsResponse()
    async def ModelInfer(self, request, context):
        rows = request.inputs[0].shape[0]
        return pb.ModelInferResponse(
            model_name=request.model_name, id=request.id,
            outputs=[pb.ModelInferResponse.InferOutputTensor(name="output", datatype="FP16", shape=[rows, 1000])],
            raw_output_contents=[OUT * rows])

async def main():
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 << 20)])
    pb_grpc.add_GRPCInferenceServiceServicer_to_server(Floor(), server)
    server.add_insecure_port("127.0.0.1:" + sys.argv[1])
    await server.start()
    await server.wait_for_termination()

asyncio.run(main())
"""


def engine_throughput(lite_path: Path, batch: int, seconds: float) -> dict:
    """The engine at ``batch``, loaded and run on the main thread (as a script does) and on
    another thread (as the server does: cuDNN's runtime fusion is then off, see
    lite.engines.ort.sessions.SessionConfig.fuse_conv_bias)."""
    from concurrent.futures import ThreadPoolExecutor

    import torch
    from gpu_resnet50 import timed

    import lite

    def measure() -> dict:
        model = lite.Model.load(lite_path, device="cuda", cache_dir=None)
        x_dev = torch.randn(batch, 3, 224, 224, device="cuda").half()
        x_host = x_dev.cpu().numpy()
        sync = torch.cuda.synchronize
        device = timed(lambda: model.predict({"input": x_dev}), sync, seconds)
        host = timed(lambda: model.predict({"input": x_host}), sync, seconds)
        return {"device_images_per_s": batch / device, "numpy_images_per_s": batch / host}

    results = {"main_thread": measure()}
    with ThreadPoolExecutor(1) as pool:
        results["server_thread"] = pool.submit(measure).result()
    return results


def thread_cpu_ticks(pid: int) -> dict[int, tuple[str, int]]:
    """Per thread of ``pid`` and of its child processes (the workers): (name, user + system
    clock ticks so far). A process's main thread (its event loop) is named "main (event loop)";
    a worker's threads carry the worker's pid."""
    children = Path(f"/proc/{pid}/task/{pid}/children")
    pids = [pid, *map(int, children.read_text().split())] if children.exists() else [pid]
    ticks = {}
    for process in pids:
        tag = "" if process == pid else f"worker {process}: "
        for task in Path(f"/proc/{process}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
            except OSError:  # the thread ended
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            name = "main (event loop)" if int(task.name) == process else name
            ticks[int(task.name)] = (tag + name, int(fields[11]) + int(fields[12]))  # utime, stime
    return ticks


def thread_load(before: dict, after: dict, seconds: float) -> list[dict]:
    """Threads' share of a core between two samples, busiest first (those above 1 %)."""
    hertz = os.sysconf("SC_CLK_TCK")
    rows = []
    for tid, (name, ticks) in after.items():
        share = (ticks - before.get(tid, (name, 0))[1]) / hertz / seconds
        if share > 0.01:
            rows.append({"thread": name, "core_share": round(share, 3)})
    return sorted(rows, key=lambda row: -row["core_share"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--client-processes", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=16, help="callers per client process")
    parser.add_argument("--workers", type=int, default=4, help="lite serve --workers")
    parser.add_argument("--preferred", type=int, nargs="*", default=[],
                        help="preferred batch sizes (none: batches padded to powers of two)")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--delay-us", type=int, default=5000, help="max_queue_delay_us of the batcher")
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--server", choices=("lite", "floor"), default="lite")
    parser.add_argument("--profile", default=None, help="py-spy speedscope output of the server")
    parser.add_argument("--profile-native", action="store_true",
                        help="with --profile: native frames too (py-spy then stops the process for each sample)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    port = free_port()
    address = f"127.0.0.1:{port}"
    env = subprocess_env()
    results: dict = {"server": args.server}
    if args.server == "floor":
        server = subprocess.Popen([sys.executable, "-c", FLOOR, str(port)], env=env, cwd=ROOT,
                                  stderr=subprocess.PIPE, text=True)
    else:
        from gpu_resnet50 import export

        from converter import convert_model
        from lite.format import save

        workdir = Path(tempfile.mkdtemp())
        _, fp32_path, _ = export(workdir)
        repository = workdir / "repo"
        (repository / "resnet50" / "1").mkdir(parents=True)
        lite_path = repository / "resnet50" / "1" / "model.lite"
        save(convert_model(str(fp32_path), fp16=True, fp16_io=True, dynamic_batch=True), lite_path)
        (repository / "resnet50" / "config.json").write_text(json.dumps({
            "max_batch_size": 256, "instance_count": args.instances, "device": "cuda", "max_queue_size": 4096,
            "dynamic_batching": {"max_queue_delay_us": args.delay_us, "preferred_batch_sizes": args.preferred},
            "warmup": {"batch_size": 256, "count": 2},
        }))
        results["engine"] = engine_throughput(lite_path, 256, 3.0)
        print("engine, batch 256:", json.dumps(results["engine"]), flush=True)
        server = start_lite_serve(repository, port, ("--workers", str(args.workers)), stderr=subprocess.PIPE,
                                  text=True)
    try:
        started = time.perf_counter()
        wait_ready(address, server, ("resnet50",), timeout=300)
        results["server_ready_s"] = round(time.perf_counter() - started, 1)
        clients = [subprocess.Popen([sys.executable, "-c", CLIENT, address, str(args.concurrency), str(args.duration)],
                                    env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(args.client_processes)]
        time.sleep(3.0)  # past the clients' start and warmup
        before, sampled = thread_cpu_ticks(server.pid), time.perf_counter()
        window = max(args.duration - 4.0, 1.0)
        profiler = None
        if args.profile:
            sampling = ["--native"] if args.profile_native else ["--nonblocking"]
            profiler = subprocess.Popen(["py-spy", "record", "--pid", str(server.pid), "--duration", str(int(window)),
                                         "--format", "speedscope", "--idle", "--threads", "--subprocesses", *sampling,
                                         "--output", args.profile], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                        text=True)
        time.sleep(window)
        after, span = thread_cpu_ticks(server.pid), time.perf_counter() - sampled
        if profiler is not None:
            print("py-spy:", profiler.communicate(timeout=60)[0][-500:], flush=True)
        results["server_threads_core_share"] = thread_load(before, after, span)
        reports = []
        for client in clients:
            out, err = client.communicate(timeout=args.duration + 120)
            lines = [line for line in out.splitlines() if line.startswith("{")]
            if client.returncode != 0 or not lines:
                raise RuntimeError(f"a client failed:\n{err[-2000:]}")
            reports.append(json.loads(lines[-1]))
    finally:
        server.terminate()
        try:
            _, server_err = server.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server_err = ""
    served = sum(r["throughput_items_per_s"] for r in reports)
    results["clients"] = args.client_processes * args.concurrency
    results["served_images_per_s"] = served
    results["server_breakdown_one_window"] = reports[0].get("server")
    results["latency_us_p50_each_process"] = [r["latency_us"]["p50"] for r in reports]
    for where, figures in results.get("engine", {}).items():
        results[f"vs_engine_{where}_numpy"] = served / figures["numpy_images_per_s"]
        results[f"vs_engine_{where}_device"] = served / figures["device_images_per_s"]
    print(json.dumps(results, indent=2))
    if server_err.strip():
        print("server stderr (tail):", server_err[-1500:])
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
