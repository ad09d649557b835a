#!/usr/bin/env python3
"""One server, several models: an OCR pipeline's three models behind ``lite serve``, clients calling them in turn.

    python bench/serving_models.py [--rounds 3] [--duration 4] [--concurrency 1 2]

rapidocr 1.4.4's PP-OCRv4 detector, direction classifier and recognizer (the ``zoo`` extra's
wheel), converted with default options, are served by two ``lite serve`` processes that differ in
one setting: ``spinning`` of their ONNX Runtime sessions (``config.json``: ``"engine":
"onnxruntime"`` and ``"engine_options": {"spinning": ...}``): ``run`` (lite's default: the threads
stop spinning when a run returns) and ``always`` (ONNX Runtime's own behaviour). A client thread
sends one image's requests in turn (detector, classifier, recognizer, each waiting for the
previous answer, with tritonclient's gRPC client on loopback), ``--concurrency`` such threads at
once. Both servers stay up; each round measures each in turn (the order alternates), ``--duration``
seconds after one second of warm-up. The table gives medians over rounds of the pipeline's p50
latency and of pipelines per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from servers import free_port, start_lite_serve, stop, wait_ready  # noqa: E402 - bench/servers.py

from tests.zoo.wheels import MODELS, locate  # noqa: E402

PIPELINE = {"det": "ch_PP-OCRv4_det_infer", "cls": "ch_ppocr_mobile_v2.0_cls_infer", "rec": "ch_PP-OCRv4_rec_infer"}
SETTINGS = ("run", "always")


def repository(root: Path, spinning: str) -> Path:
    import converter

    for name, stem in PIPELINE.items():
        source = locate(next(m for m in MODELS if Path(m.file).stem == stem))
        version = root / spinning / name / "1"
        version.mkdir(parents=True)
        converted = root / f"{name}.lite"
        if not converted.exists():
            converter.convert(source, converted, verify=False)
        (version / "model.lite").write_bytes(converted.read_bytes())
        config = {"device": "cpu", "engine": "onnxruntime", "engine_options": {"spinning": spinning}}
        (version.parent / "config.json").write_text(json.dumps(config))
    return root / spinning


def feeds() -> dict[str, dict[str, np.ndarray]]:
    out = {}
    for name, stem in PIPELINE.items():
        model = next(m for m in MODELS if Path(m.file).stem == stem)
        out[name] = model.make_inputs(np.random.default_rng(0))
    return out


def measure(address: str, inputs, concurrency: int, duration: float) -> dict[str, float]:
    import tritonclient.grpc as grpcclient

    latencies: list[float] = []
    lock = threading.Lock()
    start_at = time.perf_counter() + 1.0  # warm-up until then
    stop_at = start_at + duration

    def client() -> None:
        connection = grpcclient.InferenceServerClient(address)
        requests = []
        for name, feed in inputs.items():
            tensors = []
            for input_name, value in feed.items():
                tensor = grpcclient.InferInput(input_name, list(value.shape), "FP32")
                tensor.set_data_from_numpy(value)
                tensors.append(tensor)
            requests.append((name, tensors))
        mine = []
        while (now := time.perf_counter()) < stop_at:
            for name, tensors in requests:
                connection.infer(name, tensors)
            if now >= start_at:
                mine.append(time.perf_counter() - now)
        connection.close()
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"p50_ms": statistics.median(latencies) * 1e3, "per_s": len(latencies) / duration}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    inputs = feeds()
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        servers = {}
        try:
            for spinning in SETTINGS:
                port = free_port()
                process = start_lite_serve(repository(root, spinning), port)
                servers[spinning] = (f"127.0.0.1:{port}", process)
            for address, process in servers.values():
                wait_ready(address, process, list(PIPELINE), timeout=300)
            results = {(s, c): [] for s in SETTINGS for c in args.concurrency}
            for index in range(args.rounds):
                for concurrency in args.concurrency:
                    order = SETTINGS if index % 2 == 0 else SETTINGS[::-1]
                    for spinning in order:
                        results[spinning, concurrency].append(
                            measure(servers[spinning][0], inputs, concurrency, args.duration))
        finally:
            for _, process in servers.values():
                stop(process)
    print(f"PP-OCR pipeline (det, cls, rec in turn) through lite serve; medians over {args.rounds} rounds")
    print(f"{'spinning':<10}{'clients':>8}{'p50 ms':>10}{'pipelines/s':>13}")
    for (spinning, concurrency), values in results.items():
        p50 = statistics.median(v["p50_ms"] for v in values)
        rate = statistics.median(v["per_s"] for v in values)
        print(f"{spinning:<10}{concurrency:>8}{p50:>10.1f}{rate:>13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
