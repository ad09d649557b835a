"""Load tool for any KServe v2 gRPC server: ``lite bench --grpc ADDR --model NAME``.

    lite bench --grpc 127.0.0.1:8001 --model resnet --concurrency 8 --duration 10 [--batch B]

Closed loop: ``concurrency`` tritonclient aio callers each send the next request as soon as the
previous one is answered, for ``duration`` seconds, after ``warmup`` untimed requests each.
Reports throughput, client latency percentiles, and the server's own breakdown (queue, compute
input / infer / output, average batch) from ModelStatistics deltas over the measured window.
Inputs are random, shaped from the model's metadata (variable dimensions become 1, the batch
dimension ``batch``), except those given a shape (``--shape NAME:D1,D2,...``: the request's tensor
has that shape) or an array (``--input NAME=FILE``, .npy, or .npz holding several: sent as it
is), as a model with variable image sizes needs. A name the model has no input of is an error
that lists its inputs. A server that wants a bearer token gets ``LITE_AUTH_TOKEN``.

The runtime's ``lite bench`` finds :func:`bench_command` through the ``lite.bench_backends``
entry point ``grpc`` (pyproject.toml) and never imports this package itself.

This module talks to the server as a client (tritonclient) and never imports the server's
generated protocol code: both register the same protobuf names in one descriptor pool.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import numpy as np

from lite.commands._inputs import parse_shape_overrides


def _tritonclient():
    try:
        import tritonclient.grpc.aio as client
    except ImportError as err:
        raise ValueError("lite bench --grpc needs tritonclient: pip install 'tritonclient[grpc]'") from err
    return client


TOKEN_VARIABLE = "LITE_AUTH_TOKEN"


def bench_command(args: argparse.Namespace) -> int:
    """The ``grpc`` plug-in of ``lite bench``: measure, print the report, optionally write JSON."""
    if not args.served_model:
        raise ValueError("--grpc needs --model NAME (the served model's name)")
    aio = _tritonclient()
    shapes = parse_shape_overrides(args.shape)
    arrays = read_arrays(args.input)
    try:
        report = asyncio.run(run_bench(
            args.grpc, args.served_model, concurrency=args.concurrency, duration=args.duration,
            warmup=args.warmup, batch=args.batch, token=os.environ.get(TOKEN_VARIABLE, ""),
            shapes=shapes, arrays=arrays,
        ))
    except aio.InferenceServerException as err:
        # lite's CLI prints ValueErrors as one line; the server's status says what went wrong
        message = f"{args.grpc} model {args.served_model!r}: {err.message()} ({err.status()})"
        raise ValueError(message) from err
    print(format_report(report))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(report, handle, indent=2)
    return 0


async def run_bench(address: str, model: str, *, version: str = "", concurrency: int = 1,
                    duration: float = 10.0, warmup: int = 5, batch: int = 1, token: str = "",
                    shapes: dict[str, tuple[int, ...]] | None = None,
                    arrays: dict[str, np.ndarray] | None = None) -> dict:
    """Measure ``model`` at ``address``; ``warmup`` untimed requests per caller come first.
    ``shapes`` fixes the shape of the named inputs' random tensors, ``arrays`` gives the named
    inputs' data (the name "" stands for the only input of a model that has one)."""
    if concurrency < 1 or duration <= 0 or batch < 1 or warmup < 0:
        raise ValueError("--concurrency and --batch must be >= 1, --duration > 0 and --warmup >= 0")
    aio = _tritonclient()
    headers = {"authorization": f"Bearer {token}"} if token else None
    client = aio.InferenceServerClient(address)
    try:
        metadata = await client.get_model_metadata(model, version, headers=headers, as_json=True)
        config = await client.get_model_config(model, version, headers=headers, as_json=True)
        batched = int(config["config"].get("max_batch_size", 0)) > 0
        specs = metadata["inputs"]
        shapes = _by_input(shapes or {}, specs, model, "--shape")
        arrays = _by_input(arrays or {}, specs, model, "--input")
        inputs = [_make_input(aio, spec, batch, batched, shapes.get(spec["name"]), arrays.get(spec["name"]))
                  for spec in specs]
        if batched and (shapes or arrays):
            batch = max(1, int(inputs[0].shape()[0])) if inputs and inputs[0].shape() else batch

        async def warm() -> None:
            for _ in range(warmup):
                await client.infer(model, inputs, model_version=version, headers=headers)

        await asyncio.gather(*(warm() for _ in range(concurrency)))
        before = await client.get_inference_statistics(model, version, headers=headers, as_json=True)
        latencies, elapsed = await closed_loop(
            lambda: client.infer(model, inputs, model_version=version, headers=headers), concurrency, duration)
        after = await client.get_inference_statistics(model, version, headers=headers, as_json=True)
    finally:
        await client.close()
    report = _report(model, concurrency, batch, latencies, elapsed, before, after)
    report["inputs"] = {tensor.name(): [int(d) for d in tensor.shape()] for tensor in inputs}
    return report


async def closed_loop(call: Callable[[], Awaitable[Any]], concurrency: int,
                      seconds: float) -> tuple[list[float], float]:
    """``concurrency`` callers, each awaiting ``call()`` again as soon as it returns, for
    ``seconds``: the latency of every call (seconds) and the elapsed time."""
    latencies: list[float] = []
    start = time.perf_counter()
    stop_at = start + seconds

    async def caller() -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(caller() for _ in range(concurrency)))
    return latencies, time.perf_counter() - start


def read_arrays(pairs: list[str] | None) -> dict[str, np.ndarray]:
    """``NAME=FILE`` pairs (.npy; an .npz holds several arrays under their input names); a bare
    ``FILE`` is for a model of one input (name "")."""
    arrays: dict[str, np.ndarray] = {}
    for pair in pairs or []:
        name, sep, path = pair.partition("=")
        if not sep:
            name, path = "", pair
        if not Path(path).is_file():
            raise ValueError(f"--input {pair!r}: {path} is not a file (give NAME=FILE, a .npy or .npz file)")
        try:
            loaded = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise ValueError(f"--input {pair!r}: {path} is not a .npy/.npz file without pickled objects ({err})") from err
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                arrays.update({key: loaded[key] for key in loaded.files})
        else:
            arrays[name] = loaded
    return arrays


def _by_input(values: dict[str, Any], specs: list[dict], model: str, flag: str) -> dict[str, Any]:
    """``values`` keyed by the model's input names: "" becomes the only input's name; a name the
    model has no input of is an error naming the ones it has."""
    names = [spec["name"] for spec in specs]
    keyed = {}
    for name, value in values.items():
        if name == "":
            if len(names) != 1:
                raise ValueError(f"{flag} without a NAME: model {model!r} has {len(names)} inputs {names}; "
                                 f"write {flag} NAME:... or NAME=...")
            name = names[0]
        elif name not in names:
            raise ValueError(f"{flag} names input {name!r}, but model {model!r} has no such input; its inputs "
                             f"are {names}")
        keyed[name] = value
    return keyed


def _make_input(aio, spec: dict, batch: int, batched: bool, fixed: tuple[int, ...] | None = None,
                array: np.ndarray | None = None):
    """The request's tensor for ``spec``: ``array`` when given, else random data of shape ``fixed``
    or of the metadata's shape (variable dimensions 1, the batch dimension ``batch``)."""
    datatype = spec["datatype"]
    if array is not None:
        tensor = aio.InferInput(spec["name"], list(array.shape), datatype)
        tensor.set_data_from_numpy(_as_datatype(array, datatype, spec["name"]))
        return tensor
    if fixed is not None:
        shape = list(fixed)
    else:
        shape = [int(d) for d in spec.get("shape", [])]
        shape = [batch if (i == 0 and batched) else (1 if d < 0 else d) for i, d in enumerate(shape)]

    if datatype == "BYTES":
        data = np.full(shape, b"x", dtype=object)
    elif datatype == "BOOL":
        data = np.zeros(shape, dtype=bool)
    else:
        from tritonclient.utils import triton_to_np_dtype

        data = np.random.default_rng(0).random(shape).astype(triton_to_np_dtype(datatype))
    tensor = aio.InferInput(spec["name"], shape, datatype)
    tensor.set_data_from_numpy(data)
    return tensor


def _as_datatype(array: np.ndarray, datatype: str, name: str) -> np.ndarray:
    """``array`` in the input's datatype: numbers are converted (a float64 file for an FP32
    input), other mismatches are an error."""
    if datatype == "BYTES":
        if array.dtype.kind not in ("O", "S", "U"):
            raise ValueError(f"--input for {name!r}: the input is BYTES, the file holds {array.dtype}")
        return array.astype(object)
    from tritonclient.utils import triton_to_np_dtype

    wanted = np.dtype(triton_to_np_dtype(datatype))
    if array.dtype != wanted and not (array.dtype.kind in "biuf" and wanted.kind in "biuf"):
        raise ValueError(f"--input for {name!r}: the input is {datatype}, the file holds {array.dtype}")
    return array.astype(wanted, copy=False)


def _report(model: str, concurrency: int, batch: int, latencies: list[float], elapsed: float,
            before: dict, after: dict) -> dict:
    lat = np.asarray(latencies) * 1e6
    report = {
        "model": model,
        "concurrency": concurrency,
        "batch": batch,
        "requests": len(latencies),
        "seconds": round(elapsed, 3),
        "throughput_rps": round(len(latencies) / elapsed, 1),
        "throughput_items_per_s": round(len(latencies) * batch / elapsed, 1),
        "latency_us": {
            "p50": round(float(np.percentile(lat, 50)), 1) if len(lat) else None,
            "p90": round(float(np.percentile(lat, 90)), 1) if len(lat) else None,
            "p99": round(float(np.percentile(lat, 99)), 1) if len(lat) else None,
            "mean": round(float(lat.mean()), 1) if len(lat) else None,
        },
        "server": _server_breakdown(before, after),
    }
    return report


def _server_breakdown(before: dict, after: dict) -> dict:
    """Per-request averages (µs) of the server's durations over the window, summed over versions."""

    def totals(stats: dict) -> dict[str, float]:
        sums: dict[str, float] = {}
        for model in stats.get("model_stats", []):
            infer = model.get("inference_stats", {})
            for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
                entry = infer.get(key, {})
                sums[key + "_count"] = sums.get(key + "_count", 0) + int(entry.get("count", 0))
                sums[key + "_ns"] = sums.get(key + "_ns", 0) + int(entry.get("ns", 0))
            sums["inferences"] = sums.get("inferences", 0) + int(model.get("inference_count", 0))
            sums["executions"] = sums.get("executions", 0) + int(model.get("execution_count", 0))
        return sums

    b, a = totals(before), totals(after)
    delta = {key: a.get(key, 0) - b.get(key, 0) for key in a}
    out = {}
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        count = delta.get(key + "_count", 0)
        out[key + "_us"] = round(delta.get(key + "_ns", 0) / count / 1e3, 1) if count else None
    executions = delta.get("executions", 0)
    out["average_batch"] = round(delta.get("inferences", 0) / executions, 2) if executions else None
    return out


def format_report(report: dict, as_json: bool = False) -> str:
    if as_json:
        return json.dumps(report, indent=2)
    lat = report["latency_us"]
    server = report["server"]
    return "\n".join([
        f"model {report['model']}: concurrency {report['concurrency']}, batch {report['batch']}, "
        f"{report['requests']} requests in {report['seconds']} s",
        f"  throughput  {report['throughput_rps']} req/s ({report['throughput_items_per_s']} items/s)",
        f"  latency     p50 {lat['p50']} µs  p90 {lat['p90']} µs  p99 {lat['p99']} µs",
        f"  server      request {server['success_us']} µs = queue {server['queue_us']} + input "
        f"{server['compute_input_us']} + infer {server['compute_infer_us']} + output "
        f"{server['compute_output_us']} µs; average batch {server['average_batch']}",
    ])
