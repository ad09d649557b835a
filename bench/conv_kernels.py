"""Time the numpy Conv/pool kernels against ONNX Runtime single-op models (both on 2 threads).

    python bench/conv_kernels.py [--threads 2] [--repeat 30]

Layers: every distinct conv of ResNet-18 at batch 1 (224x224), weighted by how often it
occurs, plus its max pool; and the depthwise and a few pointwise convs of MobileNetV2.
Prints per-layer medians, the ratio numpy / ORT, and the weighted totals.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from _kernel_bench import configure_threads, ort_session  # bench/, the script's folder

THREADS = configure_threads(sys.argv, default=2)
# Run from a checkout without installing: the repository root holds the ``lite`` package.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from lite.ops import KERNELS  # noqa: E402

# (name, count, op, input shape, weight shape or None, attributes)
RESNET18 = [
    ("conv1 7x7/2", 1, "Conv", (1, 3, 224, 224), (64, 3, 7, 7), {"strides": [2, 2], "pads": [3, 3, 3, 3]}),
    ("maxpool 3x3/2", 1, "MaxPool", (1, 64, 112, 112), None,
     {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("l1 3x3 64", 4, "Conv", (1, 64, 56, 56), (64, 64, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("l2 3x3/2 64>128", 1, "Conv", (1, 64, 56, 56), (128, 64, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("l2 1x1/2 64>128", 1, "Conv", (1, 64, 56, 56), (128, 64, 1, 1), {"strides": [2, 2]}),
    ("l2 3x3 128", 3, "Conv", (1, 128, 28, 28), (128, 128, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("l3 3x3/2 128>256", 1, "Conv", (1, 128, 28, 28), (256, 128, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("l3 1x1/2 128>256", 1, "Conv", (1, 128, 28, 28), (256, 128, 1, 1), {"strides": [2, 2]}),
    ("l3 3x3 256", 3, "Conv", (1, 256, 14, 14), (256, 256, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("l4 3x3/2 256>512", 1, "Conv", (1, 256, 14, 14), (512, 256, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("l4 1x1/2 256>512", 1, "Conv", (1, 256, 14, 14), (512, 256, 1, 1), {"strides": [2, 2]}),
    ("l4 3x3 512", 3, "Conv", (1, 512, 7, 7), (512, 512, 3, 3), {"pads": [1, 1, 1, 1]}),
    ("gap", 1, "GlobalAveragePool", (1, 512, 7, 7), None, {}),
]


def _depthwise(channels, size, stride, count):
    return (
        f"dw 3x3/{stride} {channels}@{size}", count, "Conv", (1, channels, size, size), (channels, 1, 3, 3),
        {"group": channels, "strides": [stride, stride], "pads": [1, 1, 1, 1]},
    )


def _pointwise(cin, cout, size, count):
    return (f"pw {cin}>{cout}@{size}", count, "Conv", (1, cin, size, size), (cout, cin, 1, 1), {})


MOBILENET_V2 = [
    _depthwise(32, 112, 1, 1),
    _depthwise(96, 112, 2, 1),
    _depthwise(144, 56, 1, 1),
    _depthwise(144, 56, 2, 1),
    _depthwise(192, 28, 1, 2),
    _depthwise(192, 28, 2, 1),
    _depthwise(384, 14, 1, 4),
    _depthwise(576, 14, 1, 2),
    _depthwise(576, 14, 2, 1),
    _depthwise(960, 7, 1, 3),
    _pointwise(16, 96, 112, 1),
    _pointwise(144, 24, 56, 2),
    _pointwise(192, 32, 28, 3),
    _pointwise(384, 64, 14, 4),
    _pointwise(960, 160, 7, 3),
]


def _ort_session(op, x, weight, attributes):
    inputs = ["x"] + (["w"] if weight is not None else [])
    node = helper.make_node(op, inputs, ["y"], **attributes)
    initializers = [numpy_helper.from_array(weight, "w")] if weight is not None else []
    graph = helper.make_graph(
        [node], "bench", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return ort_session(model, THREADS)


def _median_seconds(fn, repeat):
    fn()
    fn()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return float(np.median(samples))


def bench(title, layers, repeat):
    rng = np.random.default_rng(0)
    print(f"\n{title} (batch 1, {THREADS} threads; median of {repeat})")
    print(f"{'layer':<22}{'x':>3}{'numpy ms':>10}{'ORT ms':>9}{'ratio':>8}")
    total_numpy = total_ort = 0.0
    for name, count, op, x_shape, w_shape, attributes in layers:
        x = rng.standard_normal(x_shape).astype(np.float32)
        weight = None if w_shape is None else rng.standard_normal(w_shape).astype(np.float32)
        fn = KERNELS.select(op, "", 13).fn
        inputs = [x] + ([weight] if weight is not None else [])
        ours = _median_seconds(lambda: fn(*inputs, **attributes), repeat)
        session = _ort_session(op, x, weight, attributes)
        expected = session.run(None, {"x": x})[0]
        np.testing.assert_allclose(fn(*inputs, **attributes), expected, rtol=1e-3, atol=1e-3)
        theirs = _median_seconds(lambda: session.run(None, {"x": x}), repeat)
        total_numpy += ours * count
        total_ort += theirs * count
        print(f"{name:<22}{count:>3}{ours * 1e3:>10.3f}{theirs * 1e3:>9.3f}{ours / theirs:>8.2f}")
    print(f"{'weighted total':<25}{total_numpy * 1e3:>10.3f}{total_ort * 1e3:>9.3f}{total_numpy / total_ort:>8.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    bench("ResNet-18 convolutions", RESNET18, args.repeat)
    bench("MobileNetV2 depthwise and pointwise convolutions", MOBILENET_V2, args.repeat)


if __name__ == "__main__":
    main()
