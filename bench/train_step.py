#!/usr/bin/env python3
"""LeNet-5 training step (forward, backward, Momentum update) at batch 64: train vs PyTorch CPU.

    python bench/train_step.py [--batch 64] [--steps 200] [--threads 2]

PyTorch is only the reference (``pip install torch``); without it, only our time is printed.
Both networks get the same weights and the same batch; medians of per-step wall times.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from train import Tensor, nn, set_num_threads, value_and_grad
from train.models import LeNet5


def time_ours(x: np.ndarray, y: np.ndarray, steps: int) -> tuple[float, LeNet5]:
    net = LeNet5()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    grad_fn = value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        _, grads = grad_fn(Tensor(x), Tensor(y))
        opt(grads)
        times.append(time.perf_counter() - start)
    return statistics.median(times[steps // 10 :]), net


def time_torch(net: LeNet5, x: np.ndarray, y: np.ndarray, steps: int, threads: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    tnet = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2, 2),
        torch.nn.Conv2d(6, 16, 5),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2, 2),
        torch.nn.Flatten(),
        torch.nn.Linear(400, 120),
        torch.nn.ReLU(),
        torch.nn.Linear(120, 84),
        torch.nn.ReLU(),
        torch.nn.Linear(84, 10),
    )
    with torch.no_grad():  # same weights; LeNet5's convolutions have no bias
        for layer, name in ((0, "conv1"), (3, "conv2"), (7, "fc1"), (9, "fc2"), (11, "fc3")):
            tnet[layer].weight.copy_(torch.from_numpy(net.parameters_dict()[f"{name}.weight"].data))
            bias = net.parameters_dict().get(f"{name}.bias")
            if bias is None:
                tnet[layer].bias.zero_()
            else:
                tnet[layer].bias.copy_(torch.from_numpy(bias.data))
    opt = torch.optim.SGD(tnet.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        loss_fn(tnet(tx), ty).backward()
        opt.step()
        times.append(time.perf_counter() - start)
    return statistics.median(times[steps // 10 :])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2, help="PyTorch's intra-op threads")
    parser.add_argument(
        "--blas-threads",
        type=int,
        default=1,
        help="numpy BLAS threads for train (1 suits small networks on shared cores)",
    )
    args = parser.parse_args()
    set_num_threads(args.blas_threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 1, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, args.batch).astype(np.int64)
    ours, net = time_ours(x, y, args.steps)
    print(f"train  LeNet5 step, batch {args.batch}: {ours * 1e3:.2f} ms ({args.blas_threads} BLAS threads)")
    theirs = time_torch(net, x, y, args.steps, args.threads)
    if theirs is None:
        print("torch not installed: pip install torch to compare")
        return 0
    print(f"torch  LeNet5 step, batch {args.batch}: {theirs * 1e3:.2f} ms ({args.threads} threads)")
    print(f"ratio train/torch: {ours / theirs:.2f}x (target <= 3x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
