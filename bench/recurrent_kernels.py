"""Time the numpy engine's LSTM/GRU/RNN against ONNX Runtime on one-node models (both on 1 thread).

    python bench/recurrent_kernels.py [--threads 1] [--repeat 200] [--hidden 128] [--seq 100]

Layers as exported models use them: batch 1, input 64, weights constant (so the engine's
load-time preparation applies), forward and bidirectional, LSTM with peepholes too (as madmom's
models have them), plus a streaming LSTM step (one frame, state in and out, as a voice-activity
model is called). The numpy figures go through the engine
(load-time work included), not the bare kernel. Prints the minimum and median ms per call, and
checks the outputs against ONNX Runtime's.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _kernel_bench import configure_threads, ort_session  # bench/, the script's folder

THREADS = configure_threads(sys.argv, default=1)
# Run from a checkout without installing: the repository root holds the ``lite`` package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from converter import convert_model  # noqa: E402
from lite.engines.numpy_engine import NumpyEngine  # noqa: E402

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
OUTPUTS = {"LSTM": ["y", "y_h", "y_c"], "GRU": ["y", "y_h"], "RNN": ["y", "y_h"]}
INPUT = 64


def _model(op, direction, hidden, seq, attributes, peepholes=False):
    """One recurrent node with constant weights and biases (and LSTM's peepholes P); X (and
    states, for seq 1) fed."""
    rng = np.random.default_rng(0)
    directions = 2 if direction == "bidirectional" else 1
    gates = GATES[op]
    weights = {
        "W": rng.standard_normal((directions, gates * hidden, INPUT)) * 0.1,
        "R": rng.standard_normal((directions, gates * hidden, hidden)) * 0.1,
        "B": rng.standard_normal((directions, 2 * gates * hidden)) * 0.1,
    }
    if peepholes:
        weights["P"] = rng.standard_normal((directions, 3 * hidden)) * 0.1
    initializers = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()]
    feeds = {"x": rng.standard_normal((seq, 1, INPUT)).astype(np.float32)}
    names = ["x", "W", "R", "B"]
    if seq == 1:  # a stream: the state travels between calls
        feeds["h"] = rng.standard_normal((directions, 1, hidden)).astype(np.float32)
        names += ["", "h"]
        if op == "LSTM":
            feeds["c"] = rng.standard_normal((directions, 1, hidden)).astype(np.float32)
            names.append("c")
    if peepholes:
        names += [""] * (7 - len(names)) + ["P"]
    node = helper.make_node(op, names, OUTPUTS[op], direction=direction, hidden_size=hidden, **attributes)
    graph = helper.make_graph(
        [node], "bench", [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, None) for name in OUTPUTS[op]], initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feeds


def _times_ms(fn, repeat):
    for _ in range(5):
        fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return 1e3 * min(samples), 1e3 * float(np.median(samples))


# (op, direction, attributes, peepholes)
CASES = [
    ("LSTM", "forward", {}, False),
    ("LSTM", "bidirectional", {}, False),
    ("LSTM", "forward", {}, True),
    ("LSTM", "bidirectional", {}, True),
    ("GRU", "forward", {"linear_before_reset": 1}, False),
    ("GRU", "bidirectional", {"linear_before_reset": 1}, False),
    ("GRU", "bidirectional", {"linear_before_reset": 0}, False),
    ("RNN", "bidirectional", {}, False),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--seq", type=int, default=100)
    args = parser.parse_args()
    print(f"hidden {args.hidden}, input {INPUT}, batch 1, {THREADS} thread(s); ms per call, min / median of {args.repeat}")
    print(f"{'layer':<40}{'numpy':>16}{'ORT':>16}{'ratio':>7}")
    cases = [(op, direction, attributes, peepholes, args.seq) for op, direction, attributes, peepholes in CASES]
    cases.append(("LSTM", "forward", {}, False, 1))
    for op, direction, attributes, peepholes, seq in cases:
        model, feeds = _model(op, direction, args.hidden, seq, attributes, peepholes)
        engine = NumpyEngine(convert_model(model, optimize=False))
        session = ort_session(model, THREADS)
        ours, theirs = engine.run(feeds), session.run(None, feeds)
        for name, expected in zip(OUTPUTS[op], theirs):
            np.testing.assert_allclose(ours[name], expected, rtol=1e-4, atol=1e-5, err_msg=f"{op} {name}")
        numpy_min, numpy_median = _times_ms(lambda: engine.run(feeds), args.repeat)
        ort_min, ort_median = _times_ms(lambda: session.run(None, feeds), args.repeat)
        label = f"{op} {direction} seq {seq}" + "".join(f" lbr={v}" for v in attributes.values())
        label += " peepholes" if peepholes else ""
        print(f"{label:<40}{numpy_min:>8.3f}{numpy_median:>8.3f}{ort_min:>8.3f}{ort_median:>8.3f}"
              f"{numpy_median / ort_median:>7.1f}")


if __name__ == "__main__":
    main()
