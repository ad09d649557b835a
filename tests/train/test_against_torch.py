"""Side by side with PyTorch (optional): same weights, same batch, same gradients and loss trajectory."""

from __future__ import annotations

import numpy as np
import pytest

from train import Tensor, nn, set_seed, value_and_grad
from train.models import LeNet5

torch = pytest.importorskip("torch", reason="PyTorch is only a reference: pip install torch")


def torch_lenet(net: LeNet5):
    layers = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, bias=False),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2, 2),
        torch.nn.Conv2d(6, 16, 5, bias=False),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2, 2),
        torch.nn.Flatten(),
        torch.nn.Linear(400, 120),
        torch.nn.ReLU(),
        torch.nn.Linear(120, 84),
        torch.nn.ReLU(),
        torch.nn.Linear(84, 10),
    )
    params = net.parameters_dict()
    with torch.no_grad():
        layers[0].weight.copy_(torch.from_numpy(params["conv1.weight"].data))
        layers[3].weight.copy_(torch.from_numpy(params["conv2.weight"].data))
        for index, name in ((7, "fc1"), (9, "fc2"), (11, "fc3")):
            layers[index].weight.copy_(torch.from_numpy(params[f"{name}.weight"].data))
            layers[index].bias.copy_(torch.from_numpy(params[f"{name}.bias"].data))
    return layers


def test_lenet5_momentum_training_matches_pytorch():
    set_seed(0)
    rng = np.random.default_rng(0)
    x = rng.random((16, 1, 32, 32)).astype(np.float32)
    y = rng.integers(0, 10, 16)
    net = LeNet5()
    reference = torch_lenet(net)
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    grad_fn = value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for step in range(10):
        loss, grads = grad_fn(Tensor(x), Tensor(y))
        opt(grads)
        reference_opt.zero_grad()
        reference_loss = torch.nn.functional.cross_entropy(
            reference(torch.from_numpy(x)), torch.from_numpy(y)
        )
        reference_loss.backward()
        for ours, theirs in zip(grads, reference.parameters()):
            np.testing.assert_allclose(ours.asnumpy(), theirs.grad.numpy(), rtol=1e-3, atol=1e-6)
        reference_opt.step()
        assert float(loss.asnumpy()) == pytest.approx(reference_loss.item(), rel=1e-5), step


def test_batchnorm_training_matches_pytorch_with_opposite_momentum():
    set_seed(0)
    x = np.random.default_rng(0).standard_normal((8, 3, 4, 4)).astype(np.float32)
    ours = nn.BatchNorm2d(3, momentum=0.9).set_train(True)
    theirs = torch.nn.BatchNorm2d(3, momentum=0.1)  # PyTorch weights the batch by its momentum
    out = ours(Tensor(x)).asnumpy()
    expected = theirs(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours.moving_mean.data, theirs.running_mean.numpy(), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ours.moving_variance.data, theirs.running_var.numpy(), rtol=1e-5)
