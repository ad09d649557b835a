"""Several models in one process, called in turns: lite's cpu engine against ONNX Runtime sessions.

    python bench/multi_model.py [--rounds 7] [--runs 10]

An OCR pipeline is three models called one after the other on every image (rapidocr's PP-OCRv4
text detector ``det``, direction classifier ``cls`` and recognizer ``rec``, from the ``zoo`` extra's wheel, on the inputs
tests/zoo gives them); a server holds several models and serves them as requests come. Each
runner below loads the three models and is timed two ways: the pipeline (detector, classifier,
recognizer in turn: one call of each is one iteration) and each model called alone, back to back.

- ``onnxruntime``: ``InferenceSession`` on each original file with default options, as rapidocr
  itself builds them;
- ``onnxruntime+stop``: the same with ``session.force_spinning_stop=1``, ONNX Runtime's option that
  lite's default sets (so the figure shows where lite's gain comes from);
- ``lite always``: ``lite.Model.load(file, device="cpu", spinning="always")``, ONNX Runtime's own
  spinning behaviour (lite before it set the option);
- ``lite``: ``lite.Model.load(file, device="cpu")``, the default.

Runners take turns round by round in a rotating order; a turn starts with untimed calls for a
quarter of a second (the previous runner's threads may still spin) and times ``--runs``
iterations. The table gives each runner's median over rounds, and ratios to ``onnxruntime``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from wheel_models import round_time as turn  # a turn: untimed calls first, then the median of the timed ones

from tests.zoo.wheels import MODELS, locate

PIPELINE = ("ch_PP-OCRv4_det_infer", "ch_ppocr_mobile_v2.0_cls_infer", "ch_PP-OCRv4_rec_infer")


def runners(directory: Path) -> tuple[dict[str, list[Callable[[], object]]], list[str]]:
    """Per runner, one callable per pipeline model (each bound to its input)."""
    import onnxruntime as ort

    import converter
    import lite

    models = [next(m for m in MODELS if Path(m.file).stem == stem) for stem in PIPELINE]
    sources = [locate(model) for model in models]
    feeds = [model.make_inputs(np.random.default_rng(0)) for model in models]
    converted = []
    for source in sources:
        target = directory / f"{source.stem}.lite"
        converter.convert(source, target, verify=False)
        converted.append(target)

    def sessions(stop: bool) -> list[Callable[[], object]]:
        calls = []
        for source, feed in zip(sources, feeds):
            options = ort.SessionOptions()
            options.log_severity_level = 3
            if stop:
                options.add_session_config_entry("session.force_spinning_stop", "1")
            session = ort.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
            calls.append(lambda session=session, feed=feed: session.run(None, feed))
        return calls

    def lite_models(**options) -> list[Callable[[], object]]:
        loaded = [lite.Model.load(path, device="cpu", **options) for path in converted]
        return [lambda model=model, feed=feed: model.predict(feed) for model, feed in zip(loaded, feeds)]

    table = {"onnxruntime": sessions(False), "onnxruntime+stop": sessions(True),
             "lite always": lite_models(spinning="always"), "lite": lite_models()}
    return table, ["det", "cls", "rec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        table, names = runners(Path(directory))
        columns = ["pipeline", *names]
        times: dict[str, dict[str, list[float]]] = {runner: {c: [] for c in columns} for runner in table}
        order = list(table)
        for index in range(args.rounds):
            for runner in order[index % len(order):] + order[: index % len(order)]:
                calls = table[runner]

                def pipeline(calls=calls) -> None:
                    for call in calls:
                        call()

                times[runner]["pipeline"].append(turn(pipeline, args.runs))
                for name, call in zip(names, calls):
                    times[runner][name].append(turn(call, args.runs))
    medians = {runner: {c: statistics.median(v) * 1e3 for c, v in cells.items()} for runner, cells in times.items()}
    print(f"median ms over {args.rounds} rounds of {args.runs} calls; ratio to onnxruntime in brackets")
    print(f"{'runner':<18}" + "".join(f"{c:>19}" for c in columns))
    for runner, cells in medians.items():
        row = "".join(f"{cells[c]:>10.2f} ({cells[c] / medians['onnxruntime'][c]:4.2f}x)" for c in columns)
        print(f"{runner:<18}{row}")
    alone = sum(medians["lite"][name] for name in names)
    print(f"lite: pipeline {medians['lite']['pipeline']:.2f} ms against {alone:.2f} ms for its models alone")


if __name__ == "__main__":
    main()
