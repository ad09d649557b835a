"""Model.train / eval / fit and callbacks; the two training styles of the issue, as written."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from train import Model, Tensor, TrainError, load_checkpoint, nn, set_seed, value_and_grad
from train.callback import (
    Callback,
    CheckpointConfig,
    EarlyStopping,
    LossMonitor,
    ModelCheckpoint,
    ProgressBar,
    SummaryCollector,
    TimeMonitor,
)
from train.dataset import NumpySlicesDataset
from train.models import LeNet5


def blobs(n=96, seed=0):
    """Three separable 2-D clusters, as a classification toy problem."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n).astype(np.int32)
    centers = np.array([[2.0, 0.0], [-2.0, 1.0], [0.0, -2.5]])
    points = (centers[labels] + rng.standard_normal((n, 2)) * 0.4).astype(np.float32)
    return points, labels


def mlp():
    return nn.SequentialCell([nn.Dense(2, 16), nn.ReLU(), nn.Dense(16, 3)])


def test_functional_style_as_written_in_the_issue():
    set_seed(0)
    rng = np.random.default_rng(0)
    x_batch = rng.random((8, 1, 32, 32)).astype(np.float32)
    y_batch = rng.integers(0, 10, 8).astype(np.int32)
    net = LeNet5()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    grad_fn = value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    losses = []
    for _ in range(40):
        loss, grads = grad_fn(Tensor(x_batch), Tensor(y_batch))
        opt(grads)
        losses.append(float(loss.asnumpy()))
    assert len(grads) == len(opt.parameters) == 8
    assert losses[-1] < losses[0] - 0.5  # the same trajectory as PyTorch: see test_against_torch.py
    logits = net(Tensor(x_batch)).asnumpy()
    assert logits.shape == (8, 10)


def test_high_level_style_as_written_in_the_issue(capsys):
    set_seed(0)
    points, labels = blobs()
    train_ds = NumpySlicesDataset((points, labels), ["data", "label"], shuffle=True).batch(16)
    net = mlp()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    Model(net, loss_fn, opt, metrics={"accuracy"}).train(10, train_ds, callbacks=[LossMonitor()])
    printed = capsys.readouterr()
    assert "epoch: 10 step: 6, loss is" in printed.out
    assert "epoch 10/10 [" in printed.err  # the default progress bar
    model = Model(net, loss_fn, opt, metrics={"accuracy", "loss"})
    result = model.eval(NumpySlicesDataset((points, labels), ["data", "label"]).batch(32))
    assert result["accuracy"] > 0.95 and result["loss"] < 0.3
    assert model.predict(points[:4]).shape == (4, 3)


def test_seeded_runs_are_reproducible_bit_for_bit():
    def run():
        set_seed(42)
        points, labels = blobs()
        ds = NumpySlicesDataset((points, labels), ["data", "label"], shuffle=True).batch(8)
        net = nn.SequentialCell([nn.Dense(2, 8), nn.Dropout(p=0.2), nn.ReLU(), nn.Dense(8, 3)])
        opt = nn.Adam(net.trainable_params(), learning_rate=0.01)
        monitor = LossMonitor(per_print_times=0)
        Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), opt).train(
            3, ds, [monitor], progress_bar=False
        )
        return monitor.losses, [p.data.copy() for p in net.get_parameters()]

    (losses_a, params_a), (losses_b, params_b) = run(), run()
    assert losses_a == losses_b
    assert all(np.array_equal(a, b) for a, b in zip(params_a, params_b))


def test_callbacks_see_the_run_and_can_stop_it():
    class Recorder(Callback):
        def __init__(self):
            self.events = []

        def on_train_begin(self, ctx):
            self.events.append("begin")

        def on_train_step_end(self, ctx):
            params = ctx.original_args()
            self.events.append((params.cur_epoch_num, params.cur_step_in_epoch, params.cur_step_num))
            if params.cur_step_num == 5:
                ctx.request_stop()

        def on_train_end(self, ctx):
            self.events.append("end")

    points, labels = blobs(32)
    recorder = Recorder()
    net = mlp()
    Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.01)).train(
        4,
        NumpySlicesDataset((points, np.eye(3, dtype=np.float32)[labels])).batch(16),
        [recorder],
        progress_bar=False,
    )
    assert recorder.events == ["begin", (1, 1, 1), (1, 2, 2), (2, 1, 3), (2, 2, 4), (3, 1, 5), "end"]


def test_model_checkpoint_names_keep_max_and_saves_optimizer_state(tmp_path):
    set_seed(0)
    points, labels = blobs(64)
    ds = NumpySlicesDataset((points, labels), ["data", "label"]).batch(16)
    net = mlp()
    opt = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    config = CheckpointConfig(
        save_checkpoint_steps=3, keep_checkpoint_max=2, append_info=["epoch_num", "step_num"]
    )
    saver = ModelCheckpoint(prefix="mlp", directory=tmp_path, config=config)
    Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), opt).train(3, ds, [saver], progress_bar=False)
    # 12 steps: saves at global steps 3, 6, 9, 12 -> (1,3) (2,2) (3,1) (3,4); keep the last two
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlp-3_1.ckpt", "mlp-3_4.ckpt"]
    values = load_checkpoint(saver.latest_ckpt_file_name)
    assert {"0.weight", "moments.0.weight", "global_step", "epoch_num", "step_num"} <= set(values)
    assert int(values["step_num"].asnumpy()) == 12 and int(values["global_step"].asnumpy()[0]) == 12
    np.testing.assert_array_equal(values["0.weight"].asnumpy(), net.parameters_dict()["0.weight"].data)
    with pytest.raises(TrainError, match="keep_checkpoint_max"):
        CheckpointConfig(keep_checkpoint_max=0)


def test_fit_with_early_stopping_on_eval_loss():
    set_seed(0)
    points, labels = blobs()
    ds = NumpySlicesDataset((points, labels), ["data", "label"]).batch(32)
    net = mlp()
    stopper = EarlyStopping(monitor="eval_loss", patience=1, min_delta=10.0)  # nothing improves by 10
    model = Model(
        net,
        nn.SoftmaxCrossEntropyWithLogits(True, "mean"),
        nn.SGD(net.trainable_params(), 0.01),
        metrics={"loss"},
    )
    model.fit(20, ds, ds, callbacks=[stopper], progress_bar=False)
    assert stopper.stopped_epoch == 3
    with pytest.raises(TrainError, match="monitor"):
        bad = EarlyStopping(monitor="nope")
        Model(
            net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), nn.SGD(net.trainable_params(), 0.01)
        ).train(1, ds, [bad], progress_bar=False)


def test_early_stopping_restores_best_weights_on_training_loss():
    set_seed(0)
    points, labels = blobs()
    ds = NumpySlicesDataset((points, labels), ["data", "label"]).batch(32)
    net = mlp()
    stopper = EarlyStopping(monitor="loss", patience=0, restore_best_weights=True)
    # a huge learning rate makes the loss blow up after the first epoch
    Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), nn.SGD(net.trainable_params(), 50.0)).train(
        10, ds, [stopper], progress_bar=False
    )
    assert stopper.stopped_epoch > 0
    assert all(np.array_equal(p.data, stopper.best_weights[p.name]) for p in net.get_parameters())


def test_summary_collector_writes_csv_and_json(tmp_path):
    set_seed(0)
    points, labels = blobs(64)
    ds = NumpySlicesDataset((points, labels), ["data", "label"]).batch(16)
    net = mlp()
    opt = nn.SGD(net.trainable_params(), learning_rate=nn.StepDecayLR(0.1, 2, 0.5))
    summary = SummaryCollector(tmp_path / "summary")
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), opt, metrics={"accuracy"})
    model.fit(2, ds, ds, callbacks=[summary], progress_bar=False)
    lines = (tmp_path / "summary" / "summary.csv").read_text().splitlines()
    assert lines[0].split(",")[:4] == ["epoch", "step", "loss", "learning_rate"]
    assert len(lines) == 1 + 8
    rows = json.loads((tmp_path / "summary" / "summary.json").read_text())["rows"]
    assert [r["learning_rate"] for r in rows[:4]] == [0.1, 0.1, 0.05, 0.05]
    assert "train_accuracy" in rows[0] and "eval_accuracy" in rows[3]


def test_summary_collector_draws_a_png_with_matplotlib(tmp_path):
    pytest.importorskip("matplotlib", reason="the PNG is drawn only when matplotlib is installed")
    summary = SummaryCollector(tmp_path)
    summary.rows = [{"epoch": 1, "step": 1, "loss": 1.0, "learning_rate": 0.1}]
    summary.write()
    assert (tmp_path / "summary.png").read_bytes()[:4] == b"\x89PNG"


def test_time_monitor_and_progress_bar_output():
    points, labels = blobs(32)
    ds = NumpySlicesDataset((points, labels), ["data", "label"]).batch(8)
    out, err = io.StringIO(), io.StringIO()
    net = mlp()
    timer = TimeMonitor(stream=out)
    Model(net, nn.SoftmaxCrossEntropyWithLogits(True, "mean"), nn.SGD(net.trainable_params(), 0.01)).train(
        2, ds, [timer, ProgressBar(stream=err)], progress_bar=False
    )
    assert out.getvalue().count("per step time") == 2 and len(timer.epoch_times) == 2
    assert err.getvalue().splitlines()[-1].startswith("epoch 2/2 [" + "#" * 30 + "] 4/4 loss")


def test_loss_monitor_stops_on_nan():
    net = nn.Dense(2, 1)
    ds = NumpySlicesDataset((np.full((4, 2), np.nan, np.float32), np.zeros((4, 1), np.float32))).batch(2)
    with pytest.raises(TrainError, match="loss is nan"):
        Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), 0.1)).train(
            1, ds, [LossMonitor(per_print_times=0)], progress_bar=False
        )


def test_model_argument_errors():
    net = mlp()
    with pytest.raises(TrainError, match="optimizer"):
        Model(net, nn.MSELoss()).train(1, [])
    with pytest.raises(TrainError, match="metrics"):
        Model(net, nn.MSELoss()).eval([])
