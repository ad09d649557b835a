"""``lite quickstart [--workdir DIR]``: build, save, inspect and run a model on built-in data.

Stages that need packages from other extras (training, conversion, serving) join as those
packages land; each stage prints what it did and the run ends with a summary table.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np


def register(subparsers) -> None:
    parser = subparsers.add_parser("quickstart", help="run the toolchain end to end on built-in data")
    parser.add_argument("--workdir", default="lite-quickstart", help="directory for the artifacts (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.set_defaults(handler=run)


def build_classifier(features: np.ndarray, labels: np.ndarray, classes: int, seed: int):
    """A two-layer classifier fitted in closed form (random features + least squares), as a .lite graph."""
    from lite.format import GraphBuilder

    rng = np.random.default_rng(seed)
    hidden = 256
    w1 = (rng.standard_normal((features.shape[1], hidden)) / np.sqrt(features.shape[1])).astype(np.float32)
    b1 = np.zeros(hidden, np.float32)
    h = np.maximum(features @ w1 + b1, 0)
    targets = np.eye(classes, dtype=np.float32)[labels]
    w2 = np.linalg.lstsq(np.c_[h, np.ones(len(h))], targets, rcond=None)[0].astype(np.float32)
    b = GraphBuilder("digits_mlp", opset=17)
    x = b.input("pixels", np.float32, ["N", features.shape[1]])
    y = b.node("Gemm", [x, b.constant("w1", w1), b.constant("b1", b1)])
    y = b.node("Relu", [y])
    y = b.node("Gemm", [y, b.constant("w2", w2[:-1]), b.constant("b2", w2[-1])])
    y = b.node("Softmax", [y], outputs=["probabilities"], axis=-1)
    b.output(y, np.float32, ["N", classes])
    return b.build({"producer": "lite quickstart", "labels": str(list(range(classes)))})


def load_digits_or_synthetic(seed: int) -> tuple[np.ndarray, np.ndarray, str]:
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        rng = np.random.default_rng(seed)
        centers = rng.standard_normal((10, 64)).astype(np.float32)
        labels = rng.integers(0, 10, 1797)
        return (centers[labels] + 0.5 * rng.standard_normal((1797, 64))).astype(np.float32), labels, "synthetic"
    digits = load_digits()
    return (digits.data / 16.0).astype(np.float32), digits.target, "scikit-learn digits"


def run(args: argparse.Namespace) -> int:
    import lite
    from lite.format import save
    from lite.commands.inspect import render_text, summarize

    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    features, labels, source = load_digits_or_synthetic(args.seed)
    split = int(0.8 * len(features))
    print(f"[1/3] data: {source}, {split} train / {len(features) - split} test samples")
    model_ir = build_classifier(features[:split], labels[:split], 10, args.seed)
    path = workdir / "digits_mlp.lite"
    save(model_ir, path)
    print(f"[2/3] model written with the writer API: {path}")
    print(render_text(summarize(lite.format.load(path), str(path))))
    model = lite.Model.load(path, device="numpy")
    start = time.perf_counter()
    probabilities = model.predict({"pixels": features[split:]})["probabilities"]
    elapsed = time.perf_counter() - start
    accuracy = float(np.mean(probabilities.argmax(axis=1) == labels[split:]))
    print("[3/3] run on the numpy engine")
    print()
    print(f"{'path':<28} {'accuracy':>9} {'file':>10} {'latency':>12}")
    print(f"{'fp32 .lite (numpy engine)':<28} {accuracy:>9.2%} {path.stat().st_size / 1024:>8.1f}KB "
          f"{elapsed * 1e3 / (len(features) - split):>9.3f} ms/sample")
    print(f"\nartifacts in {workdir.resolve()}")
    return 0
