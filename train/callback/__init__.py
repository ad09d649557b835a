"""Training callbacks (``mindspore.train.callback``)."""

from train.callback._callback import Callback, CallbackList, CallbackParams, RunContext
from train.callback.checkpoint import CheckpointConfig, ModelCheckpoint
from train.callback.early_stopping import EarlyStopping
from train.callback.monitors import LossMonitor, ProgressBar, TimeMonitor
from train.callback.summary import SummaryCollector

__all__ = [
    "Callback",
    "CallbackList",
    "CallbackParams",
    "CheckpointConfig",
    "EarlyStopping",
    "LossMonitor",
    "ModelCheckpoint",
    "ProgressBar",
    "RunContext",
    "SummaryCollector",
    "TimeMonitor",
]
