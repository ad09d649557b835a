"""The compact training core: tensors with autodiff, Cells, losses, optimizers, ``Model.train``,
datasets, MindSpore ``.ckpt`` checkpoints and export to ONNX and MINDIR.

The API uses MindSpore's vocabulary::

    from train import nn, Model, Tensor, value_and_grad
    from train.models import LeNet5
    net = LeNet5()
    loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.05, momentum=0.9)
    grad_fn = value_and_grad(lambda x, y: loss_fn(net(x), y), None, opt.parameters)
    loss, grads = grad_fn(Tensor(x_batch), Tensor(y_batch)); opt(grads)

Submodules: ``train.dataset`` (pipelines, loaders, vision transforms), ``train.callback``,
``train.models`` (LeNet5, ResNet), ``train.ops`` (differentiable ops).
"""

from train import nn
from train.autograd import no_grad
from train.checkpoint import load_checkpoint, load_param_into_net, save_checkpoint
from train.errors import (
    CheckpointError,
    ConfigurationError,
    DatasetError,
    ExportError,
    GradientError,
    MissingDependencyError,
    ShapeError,
    TrainError,
)
from train.export import export
from train.grad import grad, value_and_grad
from train.model import Model
from train.random import set_seed
from train.tensor import Parameter, Tensor
from train.threads import get_num_threads, num_threads, set_num_threads

__all__ = [
    "CheckpointError",
    "ConfigurationError",
    "DatasetError",
    "ExportError",
    "GradientError",
    "MissingDependencyError",
    "Model",
    "Parameter",
    "ShapeError",
    "Tensor",
    "TrainError",
    "export",
    "get_num_threads",
    "grad",
    "load_checkpoint",
    "load_param_into_net",
    "nn",
    "no_grad",
    "num_threads",
    "save_checkpoint",
    "set_num_threads",
    "set_seed",
    "value_and_grad",
]
