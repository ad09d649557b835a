"""``Model``: the high-level train / eval / predict loop (``mindspore.train.Model``).

``Model(net, loss_fn, optimizer, metrics={"accuracy"}).train(epoch, dataset, callbacks)``
runs, per batch, the functional step ``value_and_grad`` + ``optimizer(grads)`` with the
network in training mode; ``eval`` runs the network in inference mode without a graph and
returns ``{metric name: value}``. ``fit`` alternates the two and hands evaluation results to
the callbacks (``EarlyStopping``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from train.autograd import no_grad
from train.callback import Callback, CallbackList, CallbackParams, ProgressBar, RunContext
from train.errors import TrainError
from train.grad import value_and_grad
from train.metrics import Loss, Metric, get_metrics
from train.tensor import Tensor


def _batches(dataset: Any) -> Iterator[tuple]:
    source = (
        dataset.create_tuple_iterator(num_epochs=1) if hasattr(dataset, "create_tuple_iterator") else dataset
    )
    for item in source:
        if isinstance(item, Mapping):
            item = tuple(item.values())
        yield tuple(v if isinstance(v, Tensor) else Tensor(np.asarray(v)) for v in item)


def _size(dataset: Any) -> int:
    if hasattr(dataset, "get_dataset_size"):
        return int(dataset.get_dataset_size())
    try:
        return len(dataset)
    except TypeError:
        return 0


class Model:
    def __init__(
        self,
        network: Any,
        loss_fn: Any = None,
        optimizer: Any = None,
        metrics: Iterable[str] | Mapping[str, Metric] | None = None,
        eval_network: Any = None,
    ) -> None:
        self.network = network
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.metrics = get_metrics(metrics)
        self.eval_network = eval_network
        self._step_fn = None
        if optimizer is not None:
            self._step_fn = value_and_grad(self._forward_loss, None, optimizer.parameters, has_aux=True)

    def _forward_loss(self, *batch: Tensor) -> tuple[Tensor, Any]:
        if self.loss_fn is None:  # the network computes its own loss (a WithLossCell)
            return self.network(*batch), None
        *inputs, label = batch
        logits = self.network(*inputs)
        return self.loss_fn(logits, label), logits

    # --- training -----------------------------------------------------------------------
    def train(
        self,
        epoch: int,
        train_dataset: Any,
        callbacks: Callback | Sequence[Callback] | None = None,
        dataset_sink_mode: bool = False,
        initial_epoch: int = 0,
        progress_bar: bool = True,
    ) -> None:
        """Train ``epoch - initial_epoch`` epochs over ``train_dataset`` (``dataset_sink_mode``: ignored)."""
        self.fit(
            epoch, train_dataset, None, 1, callbacks, initial_epoch=initial_epoch, progress_bar=progress_bar
        )

    def fit(
        self,
        epoch: int,
        train_dataset: Any,
        valid_dataset: Any = None,
        valid_frequency: int = 1,
        callbacks: Callback | Sequence[Callback] | None = None,
        initial_epoch: int = 0,
        progress_bar: bool = True,
    ) -> None:
        """Train, evaluating on ``valid_dataset`` every ``valid_frequency`` epochs."""
        if self._step_fn is None:
            raise TrainError("Model.train needs an optimizer: Model(net, loss_fn, optimizer)")
        listed = [callbacks] if isinstance(callbacks, Callback) else list(callbacks or [])
        if progress_bar:
            listed.insert(0, ProgressBar())
        hooks = CallbackList(listed)
        params = CallbackParams(
            train_network=self.network,
            optimizer=self.optimizer,
            loss_fn=self.loss_fn,
            epoch_num=epoch,
            batch_num=_size(train_dataset),
            cur_step_num=self.optimizer.global_step,
        )
        context = RunContext(params)
        hooks.on_train_begin(context)
        for epoch_index in range(initial_epoch, epoch):
            params.cur_epoch_num = epoch_index + 1
            params.cur_step_in_epoch = 0
            self._train_epoch(train_dataset, hooks, context)
            if valid_dataset is not None and (epoch_index + 1) % valid_frequency == 0:
                params.eval_results = self.eval(valid_dataset)
                hooks.on_eval_end(context)
            hooks.on_train_epoch_end(context)
            if context.get_stop_requested():
                break
        hooks.on_train_end(context)

    def _train_epoch(self, dataset: Any, hooks: CallbackList, context: RunContext) -> None:
        params = context.original_args()
        self.network.set_train(True)
        hooks.on_train_epoch_begin(context)
        epoch_loss = Loss()
        for metric in self.metrics.values():
            metric.clear()
        for batch in _batches(dataset):
            hooks.on_train_step_begin(context)
            params.learning_rate = self.optimizer.get_lr()
            (loss, logits), grads = self._step_fn(*batch)
            self.optimizer(grads)
            batch_size = batch[0].shape[0]
            epoch_loss.update(loss, batch_size)
            if logits is not None:
                for metric in self.metrics.values():
                    if isinstance(metric, Loss):
                        metric.update(loss, batch_size)
                    else:
                        metric.update(logits, batch[-1])
                params.train_metrics = {name: m.eval() for name, m in self.metrics.items()}
            params.cur_step_num += 1
            params.cur_step_in_epoch += 1
            params.batch_size = batch_size
            params.net_outputs = loss
            hooks.on_train_step_end(context)
            if context.get_stop_requested():
                break
        params.batch_num = params.cur_step_in_epoch
        params.epoch_loss = epoch_loss.eval() if epoch_loss.count else float("nan")
        self.network.set_train(False)

    # --- evaluation ---------------------------------------------------------------------
    def eval(
        self, valid_dataset: Any, callbacks: Any = None, dataset_sink_mode: bool = False
    ) -> dict[str, float]:
        """``{metric name: value}`` over ``valid_dataset`` with the network in inference mode."""
        if not self.metrics:
            raise TrainError("Model.eval needs metrics: Model(net, loss_fn, opt, metrics={'accuracy'})")
        network = self.eval_network or self.network
        network.set_train(False)
        for metric in self.metrics.values():
            metric.clear()
        with no_grad():
            for batch in _batches(valid_dataset):
                *inputs, label = batch
                logits = network(*inputs)
                for metric in self.metrics.values():
                    if isinstance(metric, Loss):
                        if self.loss_fn is None:
                            raise TrainError("the 'loss' metric needs Model(..., loss_fn=...)")
                        metric.update(self.loss_fn(logits, label), inputs[0].shape[0])
                    else:
                        metric.update(logits, label)
        return {name: metric.eval() for name, metric in self.metrics.items()}

    def predict(self, *inputs: Any) -> Tensor:
        self.network.set_train(False)
        with no_grad():
            return self.network(*(x if isinstance(x, Tensor) else Tensor(x) for x in inputs))
