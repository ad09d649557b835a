"""Acceptance: digits accuracy and time, checkpoint and ONNX parity, step time vs PyTorch."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from train import Model, Tensor, export, load_checkpoint, nn, num_threads, set_seed, value_and_grad
from train.dataset import DigitsDataset
from train.models import LeNet5, ResidualBlockBase, ResNet

pytest.importorskip("sklearn", reason="the digits dataset comes from scikit-learn")


@pytest.fixture(autouse=True)
def one_blas_thread():
    """Small networks on shared cores: one BLAS thread (see train.threads); restored afterwards."""
    with num_threads(1):
        yield


def train_on_digits(net, image_size: int, epochs: int, max_lr: float):
    train_ds = DigitsDataset("train", image_size=image_size, shuffle=True).batch(32)
    test_ds = DigitsDataset("test", image_size=image_size).batch(256)
    schedule = nn.CosineDecayLR(0.0, max_lr, train_ds.get_dataset_size() * epochs)
    opt = nn.Momentum(net.trainable_params(), learning_rate=schedule, momentum=0.9, weight_decay=1e-4)
    model = Model(
        net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), opt, metrics={"accuracy"}
    )
    start = time.perf_counter()
    model.train(epochs, train_ds, progress_bar=False)
    elapsed = time.perf_counter() - start
    return model.eval(test_ds)["accuracy"], elapsed


@pytest.mark.slow
def test_lenet5_digits_accuracy_time_checkpoint_and_onnx(tmp_path):
    set_seed(2)
    net = LeNet5()
    accuracy, seconds = train_on_digits(net, 32, epochs=15, max_lr=0.05)
    print(f"LeNet5 on digits: {accuracy:.4f} test accuracy in {seconds:.1f} s")
    assert accuracy >= 0.97
    assert seconds <= 60.0

    x = DigitsDataset("test").batch(64).create_tuple_iterator().__next__()[0]
    expected = net(Tensor(x)).asnumpy()
    fresh = LeNet5()
    load_checkpoint(save_checkpoint_path(net, tmp_path), net=fresh, strict_load=True)
    np.testing.assert_array_equal(fresh(Tensor(x)).asnumpy(), expected)

    ort = pytest.importorskip("onnxruntime")
    path = export(net, Tensor(x[:1]), file_name=tmp_path / "lenet", file_format="ONNX")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"input": x})[0], expected, rtol=1e-5, atol=1e-5)


def save_checkpoint_path(net, folder):
    from train import save_checkpoint

    return save_checkpoint(net, folder / "lenet")


@pytest.mark.slow
def test_small_resnet_digits_accuracy():
    set_seed(1)
    net = ResNet(ResidualBlockBase, [1, 1, 1], num_classes=10, in_channels=1, width=8, small_input=True)
    accuracy, seconds = train_on_digits(net, 16, epochs=6, max_lr=0.1)
    print(f"small ResNet on digits: {accuracy:.4f} test accuracy in {seconds:.1f} s")
    assert accuracy >= 0.97


@pytest.mark.slow
def test_lenet5_step_within_3x_of_pytorch():
    torch = pytest.importorskip("torch", reason="PyTorch is the benchmark reference: pip install torch")
    torch.set_num_threads(2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 1, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    net = LeNet5()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
    grad_fn = value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)
    from tests.train.test_against_torch import torch_lenet

    reference = torch_lenet(net)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.01, momentum=0.9)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)

    def ours():
        _, grads = grad_fn(Tensor(x), Tensor(y))
        opt(grads)

    def theirs():
        reference_opt.zero_grad()
        torch.nn.functional.cross_entropy(reference(tx), ty).backward()
        reference_opt.step()

    times: dict[str, list[float]] = {"ours": [], "theirs": []}
    # alternate blocks, dropping each block's first steps: after a switch, the other library's
    # idle worker threads still spin for a while on our 2 cores
    for _ in range(3):
        for name, step in (("ours", ours), ("theirs", theirs)):
            for index in range(25):
                start = time.perf_counter()
                step()
                if index >= 5:
                    times[name].append(time.perf_counter() - start)
    ratio = statistics.median(times["ours"]) / statistics.median(times["theirs"])
    print(f"LeNet5 step at batch 64: {ratio:.2f}x PyTorch")
    assert ratio <= 3.0
