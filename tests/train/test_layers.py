"""Layers: finite-difference gradients (float64), reference forward passes, MindSpore names and layouts."""

from __future__ import annotations

import numpy as np
import pytest

from tests.train.gradcheck import check_cell, to_float64
from train import ShapeError, Tensor, grad, nn, set_seed, value_and_grad
from train.models import LeNet5, resnet18, resnet50

rng = np.random.default_rng(0)


def naive_conv(x, w, b, stride, pads, dilation, group):
    """Direct loops: the definition of a grouped, dilated NCHW convolution."""
    top, bottom, left, right = pads
    x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - (kh - 1) * dilation[0] - 1) // stride[0] + 1
    ow = (wd - (kw - 1) * dilation[1] - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    og = o // group
    for oc in range(o):
        g = oc // og
        for i in range(oh):
            for j in range(ow):
                patch = x[
                    :,
                    g * cg : (g + 1) * cg,
                    i * stride[0] : i * stride[0] + (kh - 1) * dilation[0] + 1 : dilation[0],
                    j * stride[1] : j * stride[1] + (kw - 1) * dilation[1] + 1 : dilation[1],
                ]
                out[:, oc, i, j] = (patch * w[oc]).sum(axis=(1, 2, 3))
    if b is not None:
        out += b[None, :, None, None]
    return out


CONV_CASES = [
    {"in_channels": 2, "out_channels": 3, "kernel_size": 3, "pad_mode": "same"},
    {"in_channels": 2, "out_channels": 3, "kernel_size": 3, "pad_mode": "valid", "has_bias": True},
    {
        "in_channels": 2,
        "out_channels": 2,
        "kernel_size": (3, 2),
        "pad_mode": "pad",
        "padding": (1, 0, 2, 1),
        "stride": 2,
    },
    {
        "in_channels": 2,
        "out_channels": 4,
        "kernel_size": 3,
        "pad_mode": "same",
        "stride": 2,
        "has_bias": True,
    },
    {"in_channels": 2, "out_channels": 2, "kernel_size": 3, "pad_mode": "pad", "padding": 2, "dilation": 2},
    {
        "in_channels": 4,
        "out_channels": 6,
        "kernel_size": 3,
        "pad_mode": "pad",
        "padding": 1,
        "group": 2,
        "has_bias": True,
    },
    {"in_channels": 3, "out_channels": 3, "kernel_size": 3, "pad_mode": "same", "group": 3},
    {"in_channels": 2, "out_channels": 3, "kernel_size": 1, "pad_mode": "valid", "stride": 2},
]


@pytest.mark.parametrize("kwargs", CONV_CASES)
def test_conv2d_gradients(kwargs):
    check_cell(nn.Conv2d(**kwargs), [rng.standard_normal((2, kwargs["in_channels"], 7, 6))])


@pytest.mark.parametrize("kwargs", CONV_CASES)
def test_conv2d_matches_direct_loops(kwargs):
    conv = to_float64(nn.Conv2d(**kwargs))
    x = rng.standard_normal((2, kwargs["in_channels"], 7, 6))
    from train import ops

    pads = ops.resolve_pads(
        conv.pad_mode, conv.padding, x.shape[2:], conv.kernel_size, conv.stride, conv.dilation
    )
    bias = conv.bias.data if conv.has_bias else None
    expected = naive_conv(x, conv.weight.data, bias, conv.stride, pads, conv.dilation, conv.group)
    np.testing.assert_allclose(conv(Tensor(x)).asnumpy(), expected, rtol=1e-10, atol=1e-12)


def test_conv2d_same_padding_keeps_ceil_size_and_weight_layout():
    conv = nn.Conv2d(3, 8, 3, stride=2, group=1)
    assert conv.weight.shape == (8, 3, 3, 3)
    assert conv(Tensor(np.zeros((1, 3, 9, 8), np.float32))).shape == (1, 8, 5, 4)
    assert nn.Conv2d(4, 8, 3, group=2).weight.shape == (8, 2, 3, 3)


def test_conv2d_rejects_bad_arguments():
    with pytest.raises(ShapeError, match="divisible by group"):
        nn.Conv2d(3, 4, 3, group=2)
    with pytest.raises(ShapeError, match="pad_mode='pad'"):
        nn.Conv2d(3, 4, 3, padding=1)
    with pytest.raises(ShapeError, match="channels"):
        nn.Conv2d(3, 4, 3)(Tensor(np.zeros((1, 2, 5, 5), np.float32)))


def test_dense_gradients_layout_and_activation():
    dense = nn.Dense(5, 3)
    assert dense.weight.shape == (3, 5) and dense.bias.shape == (3,)
    check_cell(dense, [rng.standard_normal((4, 5))])
    check_cell(nn.Dense(5, 3, has_bias=False, activation="tanh"), [rng.standard_normal((4, 5))])
    with pytest.raises(ShapeError, match="Flatten"):
        dense(Tensor(np.zeros((2, 1, 5), np.float32)))


@pytest.mark.parametrize(
    "cell", [nn.ReLU(), nn.ReLU6(), nn.Sigmoid(), nn.Tanh(), nn.GELU(), nn.GELU(False), nn.Flatten()]
)
def test_activation_gradients(cell):
    x = rng.standard_normal((3, 2, 2, 2)) * 4
    x[np.abs(x) < 1e-3] = 0.5  # keep clear of the kinks of ReLU/ReLU6
    x[np.abs(x - 6) < 1e-3] = 5.0
    check_cell(cell, [x])


def test_gelu_values():
    x = np.linspace(-3, 3, 7)
    from math import erf, sqrt

    exact = np.array([0.5 * v * (1 + erf(v / sqrt(2))) for v in x])
    np.testing.assert_allclose(nn.GELU(False)(Tensor(x)).asnumpy(), exact, rtol=1e-12)
    np.testing.assert_allclose(nn.GELU()(Tensor(x)).asnumpy(), exact, atol=1e-3)


@pytest.mark.parametrize(
    "cell, shape",
    [
        (nn.MaxPool2d(2, 2), (2, 3, 6, 6)),
        (nn.MaxPool2d(3, 2, pad_mode="same"), (2, 2, 7, 6)),
        (nn.MaxPool2d(3, 1), (1, 2, 5, 5)),
        (nn.AvgPool2d(2, 2), (2, 3, 6, 6)),
        (nn.AvgPool2d(3, 2, pad_mode="same"), (2, 2, 7, 6)),
        (nn.GlobalAvgPool2d(), (2, 3, 4, 5)),
        (nn.GlobalAvgPool2d(keep_dims=False), (2, 3, 4, 5)),
    ],
)
def test_pooling_gradients(cell, shape):
    check_cell(cell, [rng.standard_normal(shape)])


def test_max_pool_values_and_first_tap_wins_ties():
    x = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)
    assert nn.MaxPool2d(2, 2)(Tensor(x)).asnumpy().ravel().tolist() == [5, 7, 13, 15]
    ties = Tensor(np.ones((1, 1, 2, 2)))
    g = grad(lambda a: nn.MaxPool2d(2, 2)(a).sum())(ties)
    assert g.asnumpy().ravel().tolist() == [1, 0, 0, 0]
    same = nn.MaxPool2d(3, 2, pad_mode="same")(Tensor(-np.ones((1, 1, 5, 5))))
    assert same.shape == (1, 1, 3, 3) and np.all(same.asnumpy() == -1)  # padding never wins


def test_avg_pool_excludes_padding_from_the_divisor():
    out = nn.AvgPool2d(3, 1, pad_mode="same")(Tensor(np.ones((1, 1, 4, 4))))
    np.testing.assert_allclose(out.asnumpy(), 1.0)


@pytest.mark.parametrize("training", [True, False])
def test_batchnorm_gradients(training):
    for cell, shape in ((nn.BatchNorm2d(3), (4, 3, 2, 3)), (nn.BatchNorm1d(3), (5, 3))):
        cell.gamma.set_data(rng.standard_normal(3) + 1)
        cell.beta.set_data(rng.standard_normal(3))
        cell.moving_mean.set_data(rng.standard_normal(3))
        cell.moving_variance.set_data(rng.random(3) + 0.5)
        cell.set_train(training)
        check_cell(cell, [rng.standard_normal(shape)], rtol=1e-4, atol=1e-6)


def test_batchnorm1d_equals_batchnorm2d_on_1x1_maps():
    x = rng.standard_normal((6, 4))
    bn1, bn2 = to_float64(nn.BatchNorm1d(4)), to_float64(nn.BatchNorm2d(4))
    for bn in (bn1, bn2):
        bn.gamma.set_data(np.linspace(0.5, 2, 4))
        bn.beta.set_data(np.linspace(-1, 1, 4))
    projection = rng.standard_normal((6, 4))
    for training in (True, False):
        bn1.set_train(training)
        bn2.set_train(training)
        f1 = value_and_grad(lambda a: (bn1(a) * Tensor(projection)).sum(), 0, bn1.trainable_params())
        f2 = value_and_grad(
            lambda a: (bn2(a).reshape(6, 4) * Tensor(projection)).sum(), 0, bn2.trainable_params()
        )
        (v1, (gx1, gw1)), (v2, (gx2, gw2)) = f1(Tensor(x)), f2(Tensor(x.reshape(6, 4, 1, 1)))
        np.testing.assert_allclose(v1.asnumpy(), v2.asnumpy(), rtol=1e-12)
        np.testing.assert_allclose(gx1.asnumpy(), gx2.asnumpy().reshape(6, 4), rtol=1e-10, atol=1e-12)
        for a, b in zip(gw1, gw2):
            np.testing.assert_allclose(a.asnumpy(), b.asnumpy(), rtol=1e-10)
        np.testing.assert_allclose(bn1.moving_mean.data, bn2.moving_mean.data, rtol=1e-12)
        np.testing.assert_allclose(bn1.moving_variance.data, bn2.moving_variance.data, rtol=1e-12)


def test_batchnorm_moving_statistics_follow_mindspore_momentum():
    bn = to_float64(nn.BatchNorm1d(2, momentum=0.9)).set_train(True)
    x = rng.standard_normal((8, 2)) * 3 + 1
    bn(Tensor(x))
    np.testing.assert_allclose(bn.moving_mean.data, 0.9 * 0 + 0.1 * x.mean(axis=0))
    np.testing.assert_allclose(bn.moving_variance.data, 0.9 * 1 + 0.1 * x.var(axis=0, ddof=1))
    bn.set_train(False)
    out = bn(Tensor(x)).asnumpy()
    np.testing.assert_allclose(out, (x - bn.moving_mean.data) / np.sqrt(bn.moving_variance.data + 1e-5))
    with pytest.raises(ShapeError, match="2-D"):
        bn(Tensor(np.zeros((2, 2, 1, 1))))


def test_dropout_scales_survivors_and_is_identity_in_eval():
    set_seed(3)
    drop = nn.Dropout(p=0.25)
    x = Tensor(np.ones((200, 50)))
    assert drop(x) is x
    drop.set_train(True)
    out = drop(x).asnumpy()
    assert set(np.unique(out)) <= {0.0, 1 / 0.75}
    assert abs((out == 0).mean() - 0.25) < 0.02
    g = grad(lambda a: drop(a).sum())(x).asnumpy()
    assert set(np.unique(g)) <= {0.0, 1 / 0.75}
    assert nn.Dropout(keep_prob=0.9).p == pytest.approx(0.1)


def test_sequential_cell_names_and_order():
    seq = nn.SequentialCell([nn.Dense(2, 3), nn.ReLU(), nn.Dense(3, 1)])
    assert list(seq.parameters_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert seq(Tensor(np.ones((4, 2), np.float32))).shape == (4, 1)
    assert len(seq) == 3 and isinstance(seq[1], nn.ReLU)


def test_lenet_and_resnet_use_mindspore_names():
    assert list(LeNet5().parameters_dict()) == [
        "conv1.weight",
        "conv2.weight",
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
        "fc3.weight",
        "fc3.bias",
    ]
    names = list(resnet18(num_classes=10).parameters_dict())
    assert names[:5] == ["conv1.weight", "bn1.gamma", "bn1.beta", "bn1.moving_mean", "bn1.moving_variance"]
    assert (
        "layer2.0.down_sample_layer.0.weight" in names and "layer2.0.down_sample_layer.1.moving_mean" in names
    )
    assert names[-2:] == ["end_point.weight", "end_point.bias"]
    net50 = resnet50(num_classes=10, width=8)
    assert "layer1.0.conv3.weight" in net50.parameters_dict()
    assert net50(Tensor(np.zeros((1, 3, 32, 32), np.float32))).shape == (1, 10)
    trainable = {p.name for p in LeNet5().trainable_params()}
    assert "bn1.moving_mean" not in {p.name for p in resnet18().trainable_params()} and len(trainable) == 8


def test_cells_and_names_and_set_train_recurse():
    net = resnet18(width=4, small_input=True)
    names = [n for n, _ in net.cells_and_names()]
    assert names[0] == "" and "layer1.0.conv1" in names
    net.set_train(True)
    assert all(cell.training for _, cell in net.cells_and_names())


def test_small_resnet_gradients_against_finite_differences():
    set_seed(0)
    net = resnet18(num_classes=3, in_channels=1, width=2, small_input=True).set_train(True)
    to_float64(net)
    x = rng.standard_normal((2, 1, 4, 4))
    params = net.trainable_params()
    _, grads = value_and_grad(lambda a: net(a).sum(), None, params)(Tensor(x))
    # spot-check a few parameters element by element (the whole network would be slow)
    for param, analytic in list(zip(params, grads))[::9]:
        index = tuple(0 for _ in param.shape)
        original = param.data[index]
        param.data[index] = original + 1e-6
        plus = float(net(Tensor(x)).sum().asnumpy())
        param.data[index] = original - 1e-6
        minus = float(net(Tensor(x)).sum().asnumpy())
        param.data[index] = original
        assert analytic.asnumpy()[index] == pytest.approx((plus - minus) / 2e-6, rel=1e-4, abs=1e-7), (
            param.name
        )
