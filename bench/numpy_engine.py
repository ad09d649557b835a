"""The numpy engine against ONNX Runtime CPU on ResNet-18 and MobileNetV2 (batch 1, 224x224, 2 threads).

    python bench/numpy_engine.py [--rounds 5] [--runs 20] [--threads 2] [--memory] [--profile]
                                 [--models resnet18,mobilenet_v2]

Both networks are built with onnx.helper (tests/converter/models.py, ``legacy`` style: the
``torch.onnx.export`` form with BatchNormalization and Clip), converted once with
``converter.convert`` to ``.lite`` and to ``.onnx``; the numpy engine runs the ``.lite`` file
(``lite.Model.load(path, device="numpy")``), ONNX Runtime the converter's ``.onnx`` output.

The machine is shared and small, so every measurement runs in a fresh process of its own (BLAS
and ORT thread pools never overlap), engines alternate round by round, and the table gives the
median over rounds with the spread (min-max), the ratio of medians and the ratio of the best
rounds. Targets: ResNet-18 within 2.0x of ONNX Runtime, MobileNetV2 within 2.5x.
``--memory`` adds the lifetime bound against what a steady-state run holds (the engine's arena
plus everything allocated outside it). ``--profile`` adds where the numpy engine's time goes: per
kind of node (convolutions split into depthwise, pointwise and the rest), the median over runs,
next to ONNX Runtime's median time for the whole model.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"resnet18": 2.0, "mobilenet_v2": 2.5}
ENGINES = ("numpy", "onnxruntime")


def thread_environment(threads: int) -> dict[str, str]:
    """This environment for a worker process: BLAS on ``threads`` threads (OpenBLAS reads the
    count when numpy is imported) and the checkout on PYTHONPATH."""
    environment = dict(os.environ)
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        environment[name] = str(threads)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), environment.get("PYTHONPATH")]))
    return environment


def build_models(directory: Path, names: list[str]) -> dict[str, dict[str, Path]]:
    """Write ``NAME.lite`` and ``NAME.onnx`` (both from the converter) for each network."""
    import onnx

    import converter

    sys.path.insert(0, str(ROOT / "tests" / "converter"))
    import models

    paths = {}
    for name in names:
        source = directory / f"{name}.source.onnx"
        onnx.save(getattr(models, name)("legacy", image_size=224), source)
        lite_path, onnx_path = directory / f"{name}.lite", directory / f"{name}.onnx"
        converter.convert(source, lite_path, verify=False)
        converter.convert(source, onnx_path, verify=False)
        paths[name] = {"numpy": lite_path, "onnxruntime": onnx_path}
    return paths


def worker(engine: str, path: str, runs: int, threads: int) -> None:
    """Time one engine on one model in this (fresh) process; print the median ms as JSON."""
    import numpy as np

    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    if engine == "numpy":
        import lite

        model = lite.Model.load(path, device="numpy")
        name = model.inputs[0].name

        def call():
            return model.predict({name: x})
    else:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        name = session.get_inputs()[0].name

        def call():
            return session.run(None, {name: x})

    # Warm up for ~0.5 s: caches, scratch buffers, thread pools.
    deadline = time.perf_counter() + 0.5
    while time.perf_counter() < deadline:
        call()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"median_ms": statistics.median(samples), "min_ms": min(samples)}))


def profile_worker(path: str, runs: int) -> None:
    """Median ms per kind of node of the numpy engine over ``runs`` runs (this process); JSON."""
    import numpy as np

    import lite

    model = lite.Model.load(path, device="numpy")
    engine = model.engine
    plan = engine.plans[0]
    feeds = {model.inputs[0].name: np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}

    def kind(node) -> str:
        if node.op_type != "Conv":
            return node.op_type
        weights = plan.constants.get(node.inputs[1])
        group = node.attributes["group"].value if "group" in node.attributes else 1
        if weights is None:
            return "Conv"
        if group > 1 and group == weights.shape[0] and weights.shape[1] == 1:
            return "Conv depthwise"
        if all(k == 1 for k in weights.shape[2:]):
            return "Conv pointwise"
        return "Conv " + "x".join(str(k) for k in weights.shape[2:])

    for _ in range(5):
        model.predict(feeds)
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        totals: dict[str, float] = {}

        def observe(node, seconds, values):
            totals[kind(node)] = totals.get(kind(node), 0.0) + seconds * 1e3

        engine.run(feeds, observe)
        for name, ms in totals.items():
            samples.setdefault(name, []).append(ms)
    print(json.dumps({name: statistics.median(values) for name, values in samples.items()}))


def memory(path: Path) -> dict[str, float]:
    """Peak live activation bytes (the lifetime bound) against what one steady-state run holds:
    the engine's planned arena plus tracemalloc's peak of everything allocated outside it
    (``lite bench --memory``'s measurement)."""
    import numpy as np

    import lite
    from lite.commands.bench import measure_memory

    model = lite.Model.load(str(path), device="numpy")
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    m = measure_memory(model, {model.inputs[0].name: x})
    held = m["peak_allocated_bytes"]
    return {"bound": m["peak_live_bytes"], "arena": m["arena_bytes"], "outside": held - m["arena_bytes"],
            "ratio": m["ratio_to_bound"]}


def _measure(engine: str, path: Path, runs: int, threads: int) -> float:
    command = [sys.executable, __file__, "--worker", engine, str(path), "--runs", str(runs),
               "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=thread_environment(threads), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{engine} on {path.name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])["median_ms"]


def _profile(path: Path, runs: int, threads: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--worker", "profile", str(path), "--runs", str(runs), "--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, env=thread_environment(threads), check=False)
    if done.returncode != 0:
        raise RuntimeError(f"profiling {path.name} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds, one process each (default 5)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per process (default 20)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models", default="resnet18,mobilenet_v2")
    parser.add_argument("--memory", action="store_true", help="also report held memory against the lifetime bound")
    parser.add_argument("--profile", action="store_true", help="also report the numpy engine's time per kind of node")
    parser.add_argument("--worker", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        if args.worker[0] == "profile":
            profile_worker(args.worker[1], args.runs)
        else:
            worker(args.worker[0], args.worker[1], args.runs, args.threads)
        return 0
    names = args.models.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        paths = build_models(Path(tmp), names)
        if args.memory:
            print("memory (MiB): lifetime bound | arena + allocated outside it = held | ratio (target <= 1.25)")
            for name in names:
                m = memory(paths[name]["numpy"])
                print(f"  {name:<14}{m['bound'] / 2**20:8.2f} |{m['arena'] / 2**20:7.2f} +{m['outside'] / 2**20:6.2f}"
                      f" = {(m['arena'] + m['outside']) / 2**20:6.2f} | {m['ratio']:.2f}")
        times = {(name, engine): [] for name in names for engine in ENGINES}
        for round_index in range(args.rounds):
            # Alternate which engine goes first so drift on the shared machine hits both alike.
            order = ENGINES if round_index % 2 == 0 else ENGINES[::-1]
            for name in names:
                for engine in order:
                    times[name, engine].append(_measure(engine, paths[name][engine], args.runs, args.threads))
        profiles = {name: _profile(paths[name]["numpy"], args.runs, args.threads) for name in names} if args.profile else {}
    print(f"batch 1, 224x224, {args.threads} threads; median of {args.rounds} rounds (one process each) "
          f"x {args.runs} runs; spread = min-max over rounds")
    print(f"{'model':<14}{'numpy ms':>10}{'spread':>14}{'ORT ms':>9}{'spread':>14}{'ratio':>7}"
          f"{'best/best':>11}  target")
    for name in names:
        ours, theirs = times[name, "numpy"], times[name, "onnxruntime"]
        ratio = statistics.median(ours) / statistics.median(theirs)
        # On a shared machine the least disturbed round of each is a steadier comparison.
        best = min(ours) / min(theirs)
        target = TARGETS.get(name)
        verdict = "" if target is None else f"<={target}x: {'PASS' if ratio <= target else 'MISS'} (median)"
        print(f"{name:<14}{statistics.median(ours):>10.2f}{f'{min(ours):.1f}-{max(ours):.1f}':>14}"
              f"{statistics.median(theirs):>9.2f}{f'{min(theirs):.1f}-{max(theirs):.1f}':>14}{ratio:>7.2f}"
              f"{best:>11.2f}  {verdict}")
    for name, kinds in profiles.items():
        total = sum(kinds.values())
        theirs = statistics.median(times[name, "onnxruntime"])
        print(f"\n{name}: numpy engine per kind of node (median of {args.runs} runs, sum {total:.2f} ms), "
              f"against ONNX Runtime's {theirs:.2f} ms for the whole model")
        for kind, ms in sorted(kinds.items(), key=lambda item: -item[1]):
            print(f"  {kind:<18}{ms:>8.2f} ms {100 * ms / total:>5.1f}%  {ms / theirs:>5.2f}x ORT's total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
