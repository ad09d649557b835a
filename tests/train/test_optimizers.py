"""Optimizers against their update formulas; schedules; checkpointable state."""

from __future__ import annotations

import math

import numpy as np
import pytest

from train import Parameter, Tensor, load_checkpoint, nn, save_checkpoint


def make_params():
    return [Parameter(np.array([1.0, -2.0]), "fc.weight"), Parameter(np.array([0.5]), "bn.gamma")]


GRADS = [[np.array([0.1, 0.2]), np.array([0.3])], [np.array([-0.4, 0.5]), np.array([0.1])]]


def test_momentum_formula_weight_decay_filter_and_loss_scale():
    params = make_params()
    opt = nn.Momentum(params, learning_rate=0.1, momentum=0.9, weight_decay=0.01, loss_scale=2.0)
    w, g_ = params[0].data.copy(), params[1].data.copy()
    acc_w, acc_g = np.zeros(2), np.zeros(1)
    for step in GRADS:
        opt([Tensor(a * 2.0) for a in step])  # scaled by loss_scale
        acc_w = 0.9 * acc_w + (step[0] + 0.01 * w)
        w = w - 0.1 * acc_w
        acc_g = 0.9 * acc_g + step[1]  # gamma: no weight decay
        g_ = g_ - 0.1 * acc_g
    np.testing.assert_allclose(params[0].data, w)
    np.testing.assert_allclose(params[1].data, g_)
    assert opt.global_step == 2


def test_momentum_nesterov():
    params = make_params()
    opt = nn.Momentum(params, learning_rate=0.1, momentum=0.9, use_nesterov=True)
    w, acc = params[0].data.copy(), np.zeros(2)
    for step in GRADS:
        opt(step)
        acc = 0.9 * acc + step[0]
        w = w - 0.1 * (step[0] + 0.9 * acc)
    np.testing.assert_allclose(params[0].data, w)


def test_sgd_plain_and_with_momentum():
    params = make_params()
    nn.SGD(params, learning_rate=0.5)(GRADS[0])
    np.testing.assert_allclose(params[0].data, [1.0 - 0.05, -2.0 - 0.1])
    params = make_params()
    opt = nn.SGD(params, learning_rate=0.5, momentum=0.5, dampening=0.1)
    acc, w = np.zeros(2), params[0].data.copy()
    for step in GRADS:
        opt(step)
        acc = 0.5 * acc + 0.9 * step[0]
        w = w - 0.5 * acc
    np.testing.assert_allclose(params[0].data, w)


@pytest.mark.parametrize("cls", [nn.Adam, nn.AdamW])
def test_adam_and_adamw(cls):
    params = make_params()
    opt = cls(params, learning_rate=0.01, weight_decay=0.1)
    w, m, v = params[0].data.copy(), np.zeros(2), np.zeros(2)
    for t, step in enumerate(GRADS, start=1):
        opt(step)
        g = step[0] if cls is nn.AdamW else step[0] + 0.1 * w
        if cls is nn.AdamW:
            w = w - 0.01 * 0.1 * w
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        w = w - 0.01 * math.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(params[0].data, w, rtol=1e-12)


def test_gradient_count_and_shape_are_checked():
    opt = nn.SGD(make_params(), learning_rate=0.1)
    with pytest.raises(nn.OptimizerError, match="2 parameters"):
        opt([np.zeros(2)])
    with pytest.raises(nn.OptimizerError, match=r"fc\.weight"):
        opt([np.zeros(3), np.zeros(1)])
    with pytest.raises(nn.OptimizerError, match="trainable_params"):
        nn.SGD([], learning_rate=0.1)


def test_learning_rate_schedules():
    step = nn.StepDecayLR(1.0, step_size=2, gamma=0.5)
    assert [step(i) for i in range(5)] == [1.0, 1.0, 0.5, 0.5, 0.25]
    cosine = nn.CosineDecayLR(0.0, 1.0, 10)
    assert cosine(0) == 1.0 and cosine(5) == pytest.approx(0.5) and cosine(10) == pytest.approx(0.0)
    warm = nn.WarmUpLR(0.4, 4, after=nn.CosineDecayLR(0.0, 0.4, 8))
    assert [warm(i) for i in range(4)] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert warm(4) == pytest.approx(0.4) and warm(12) == pytest.approx(0.0)
    assert nn.piecewise_constant_lr([2, 5], [0.1, 0.05]) == [0.1, 0.1, 0.05, 0.05, 0.05]
    assert nn.warmup_lr(0.3, 6, 2, 3) == pytest.approx([0.1, 0.1, 0.2, 0.2, 0.3, 0.3])
    assert nn.cosine_decay_lr(0.0, 1.0, 4, 2, 2)[:2] == [1.0, 1.0]
    assert nn.step_lr(1.0, 4, 2, 0.1) == pytest.approx([1.0, 1.0, 0.1, 0.1])


def test_optimizer_follows_list_and_schedule_rates():
    params = make_params()
    opt = nn.SGD(params, learning_rate=[0.1, 0.2])
    assert opt.get_lr() == 0.1
    opt(GRADS[0])
    assert opt.get_lr() == 0.2
    opt(GRADS[0])
    assert opt.get_lr() == 0.2  # the last rate stays
    sched = nn.SGD(make_params(), learning_rate=nn.StepDecayLR(1.0, 1, 0.5))
    sched(GRADS[0])
    assert sched.get_lr() == 0.5


def test_state_is_a_plain_dict_that_checkpoints(tmp_path):
    params = make_params()
    opt = nn.Momentum(params, learning_rate=0.1, momentum=0.9)
    opt(GRADS[0])
    state = opt.state_dict()
    assert set(state) == {"moments.fc.weight", "moments.bn.gamma", "learning_rate", "global_step"}
    assert state["global_step"].dtype == np.int32 and state["global_step"].tolist() == [1]
    path = save_checkpoint(state, tmp_path / "opt")
    fresh = nn.Momentum(make_params(), learning_rate=0.1, momentum=0.9)
    fresh.load_state_dict(load_checkpoint(path))
    assert fresh.global_step == 1
    np.testing.assert_array_equal(fresh.state["moments.fc.weight"], opt.state["moments.fc.weight"])
    with pytest.raises(nn.OptimizerError, match="missing"):
        fresh.load_state_dict({})
