"""A batch of 0 through the numpy engine: every kernel path that reshapes by the batch returns the
empty result ONNX Runtime returns (a detector that keeps no boxes feeds its second stage nothing).

numpy cannot infer a -1 in a reshape of a zero-size array, so a path that writes
``y.reshape(batch, channels, -1)`` fails on exactly this input. Each case is a one-node (or small)
graph converted by the converter, so the engine's fusions (Conv + activation, bias, residual Add)
run as they would on a real model. The expected shape is ONNX Runtime's on the same graph; where
ONNX Runtime refuses a batch of 0 (see ``_ORT_REFUSES``) it is ONNX Runtime's shape for a batch of
1 with the batch axis emptied.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import lite  # noqa: E402
from converter import convert_model  # noqa: E402
from lite.format import to_bytes  # noqa: E402

_RNG = np.random.default_rng(0)
node = helper.make_node


def weights(*shape: int) -> np.ndarray:
    return (_RNG.standard_normal(shape) * 0.3).astype(np.float32)


@dataclass
class Case:
    """A graph reading ``x`` (its axis ``batch_axis`` of size 0) and writing ``y``."""

    nodes: list
    x_shape: list[int]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 17
    batch_axis: int = 0
    out_batch_axis: int = 0

    def model(self) -> onnx.ModelProto:
        x_shape: list[int | str] = list(self.x_shape)
        x_shape[self.batch_axis] = "N"
        graph = helper.make_graph(
            self.nodes, "empty_batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(value, name) for name, value in self.constants.items()])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)])
        model.ir_version = 10
        return model

    def x(self, batch: int) -> np.ndarray:
        shape = list(self.x_shape)
        shape[self.batch_axis] = batch
        return np.zeros(shape, np.float32)


def _conv_cases(rank: int) -> dict[str, Case]:
    spatial, kernel, pads = [9, 8, 7][:rank], [3] * rank, [1] * 2 * rank
    x_shape = [0, 8, *spatial]
    bias_relu = [node("Conv", ["x", "w", "b"], ["c"], pads=pads), node("Relu", ["c"], ["y"])]
    return {
        f"conv{rank}d": Case(bias_relu, x_shape, {"w": weights(16, 8, *kernel), "b": weights(16)}),
        f"conv{rank}d_stride2": Case([node("Conv", ["x", "w", "b"], ["c"], pads=pads, strides=[2] * rank),
                                      node("Relu", ["c"], ["y"])], x_shape, {"w": weights(16, 8, *kernel), "b": weights(16)}),
        f"conv{rank}d_grouped": Case([node("Conv", ["x", "w"], ["y"], pads=pads, group=2)], x_shape,
                                     {"w": weights(16, 4, *kernel)}),
        f"conv{rank}d_depthwise_clip": Case([node("Conv", ["x", "w", "b"], ["c"], pads=pads, group=8),
                                             node("Clip", ["c", "low", "high"], ["y"])], x_shape,
                                            {"w": weights(8, 1, *kernel), "b": weights(8),
                                             "low": np.float32(0), "high": np.float32(6)}),
        f"conv{rank}d_depthwise_stride2": Case([node("Conv", ["x", "w"], ["y"], pads=pads, group=8, strides=[2] * rank)],
                                               x_shape, {"w": weights(8, 1, *kernel)}),
        f"conv{rank}d_pointwise_stride2": Case([node("Conv", ["x", "w"], ["y"], strides=[2] * rank)], x_shape,
                                               {"w": weights(16, 8, *[1] * rank)}),
        f"conv{rank}d_residual": Case([node("Conv", ["x", "w", "b"], ["c"], pads=pads), node("Add", ["c", "x"], ["s"]),
                                       node("Relu", ["s"], ["y"])], x_shape, {"w": weights(8, 8, *kernel), "b": weights(8)}),
        f"conv{rank}d_transpose": Case([node("ConvTranspose", ["x", "w", "b"], ["y"], strides=[2] * rank)], x_shape,
                                       {"w": weights(8, 4, *kernel), "b": weights(4)}),
        f"max_pool{rank}d": Case([node("MaxPool", ["x"], ["y"], kernel_shape=[3] * rank, pads=pads, strides=[2] * rank)],
                                 x_shape),
        f"average_pool{rank}d": Case([node("AveragePool", ["x"], ["y"], kernel_shape=[3] * rank, pads=pads,
                                           strides=[2] * rank)], x_shape),
        f"max_pool{rank}d_indices": Case([node("MaxPool", ["x"], ["pooled", "indices"], kernel_shape=[3] * rank, pads=pads),
                                          node("Cast", ["indices"], ["y"], to=TensorProto.FLOAT)], x_shape),
        f"global_average_pool{rank}d": Case([node("GlobalAveragePool", ["x"], ["y"])], x_shape),
        f"global_max_pool{rank}d": Case([node("GlobalMaxPool", ["x"], ["y"])], x_shape),
        f"batch_norm{rank}d": Case([node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], x_shape,
                                   {"s": weights(8), "b": weights(8), "m": weights(8), "v": np.abs(weights(8)) + 1}),
        f"instance_norm{rank}d": Case([node("InstanceNormalization", ["x", "s", "b"], ["y"])], x_shape,
                                      {"s": weights(8), "b": weights(8)}),
    }


def _recurrent_cases() -> dict[str, Case]:
    hidden, cases = 6, {}
    for op, gates in (("LSTM", 4), ("GRU", 3), ("RNN", 1)):
        for direction, count in (("forward", 1), ("bidirectional", 2)):
            constants = {"W": weights(count, gates * hidden, 8), "R": weights(count, gates * hidden, hidden),
                         "B": weights(count, 2 * gates * hidden)}
            cases[f"{op.lower()}_{direction}"] = Case(
                [node(op, ["x", "W", "R", "B"], ["y"], hidden_size=hidden, direction=direction)], [5, 0, 8],
                constants, batch_axis=1, out_batch_axis=2)
            cases[f"{op.lower()}_{direction}_last_state"] = Case(
                [node(op, ["x", "W", "R", "B"], ["", "y"], hidden_size=hidden, direction=direction)], [5, 0, 8],
                constants, batch_axis=1, out_batch_axis=1)
    return cases


def _sequence_cases() -> dict[str, Case]:
    heads_shape = {"shape": np.array([0, 5, 2, 4], np.int64), "merged": np.array([0, 5, 8], np.int64)}
    return {
        "matmul": Case([node("MatMul", ["x", "w"], ["y"])], [0, 5, 8], {"w": weights(8, 6)}),
        "matmul_bias": Case([node("MatMul", ["x", "w"], ["m"]), node("Add", ["m", "b"], ["y"])], [0, 5, 8],
                            {"w": weights(8, 6), "b": weights(6)}),
        "matmul_wide": Case([node("MatMul", ["x", "w"], ["y"])], [0, 128, 512], {"w": weights(512, 512)}),
        "gemm": Case([node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [0, 8], {"w": weights(6, 8), "b": weights(6)}),
        "gemm_relu": Case([node("Gemm", ["x", "w", "b"], ["g"]), node("Relu", ["g"], ["y"])], [0, 8],
                          {"w": weights(8, 6), "b": weights(6)}),
        "layer_norm": Case([node("LayerNormalization", ["x", "s", "b"], ["y"], axis=-1)], [0, 5, 8],
                           {"s": weights(8), "b": weights(8)}),
        "layer_norm_two_axes": Case([node("LayerNormalization", ["x", "s", "b"], ["y"], axis=1)], [0, 5, 8],
                                    {"s": weights(5, 8), "b": weights(5, 8)}),
        "group_norm": Case([node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=2)], [0, 8, 4, 4],
                           {"s": weights(8), "b": weights(8)}, opset=21),
        "softmax": Case([node("Softmax", ["x"], ["y"], axis=-1)], [0, 5, 8]),
        "softmax_axis1": Case([node("Softmax", ["x"], ["y"], axis=1)], [0, 5, 8]),
        "softmax_opset11": Case([node("Softmax", ["x"], ["y"], axis=1)], [0, 5, 8], opset=11),
        "log_softmax": Case([node("LogSoftmax", ["x"], ["y"], axis=-1)], [0, 5, 8]),
        "attention_3d": Case([node("Attention", ["x", "x", "x"], ["y"], q_num_heads=2, kv_num_heads=2)], [0, 5, 8],
                             opset=23),
        "attention_4d": Case([node("Attention", ["x", "x", "x"], ["y"])], [0, 2, 5, 4], opset=23),
        "attention_from_matmuls": Case(
            [node("MatMul", ["x", "wq"], ["q"]), node("Reshape", ["q", "shape"], ["q4"]),
             node("Transpose", ["q4"], ["qh"], perm=[0, 2, 1, 3]), node("Transpose", ["q4"], ["kh"], perm=[0, 2, 3, 1]),
             node("MatMul", ["qh", "kh"], ["s"]), node("Softmax", ["s"], ["p"], axis=-1), node("MatMul", ["p", "qh"], ["o"]),
             node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]), node("Reshape", ["ot", "merged"], ["y"])],
            [0, 5, 8], {"wq": weights(8, 8), **heads_shape}),
    }


def _resize_cases() -> dict[str, Case]:
    doubled = {"scales": np.array([1, 1, 2, 2], np.float32)}
    return {
        "resize_nearest": Case([node("Resize", ["x", "", "scales"], ["y"], mode="nearest")], [0, 3, 4, 4], doubled),
        "resize_linear": Case([node("Resize", ["x", "", "scales"], ["y"], mode="linear")], [0, 3, 4, 4], doubled),
        "resize_cubic": Case([node("Resize", ["x", "", "scales"], ["y"], mode="cubic")], [0, 3, 4, 4], doubled),
        "resize_linear_to_sizes": Case([node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear")], [0, 3, 4, 4],
                                       {"sizes": np.array([0, 3, 7, 9], np.int64)}),
    }


CASES = {**_conv_cases(1), **_conv_cases(2), **_conv_cases(3), **_recurrent_cases(), **_sequence_cases(),
         **_resize_cases()}

# ONNX Runtime 1.32 refuses these on a batch of 0 (its Attention: "Batch size must be greater than
# 0"; GroupNormalization's function body reshapes with -1) or aborts the process (LSTM, GRU).
_ORT_REFUSES = {"attention_3d", "attention_4d", "group_norm", "lstm_forward", "lstm_bidirectional",
                "lstm_forward_last_state", "lstm_bidirectional_last_state", "gru_forward", "gru_bidirectional",
                "gru_forward_last_state", "gru_bidirectional_last_state"}


def expected_shape(case: Case, name: str) -> tuple[int, ...]:
    session = ort.InferenceSession(case.model().SerializeToString(), providers=["CPUExecutionProvider"])
    if name not in _ORT_REFUSES:
        return session.run(None, {"x": case.x(0)})[0].shape
    shape = list(session.run(None, {"x": case.x(1)})[0].shape)
    shape[case.out_batch_axis] = 0
    return tuple(shape)


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_empty_batch_gives_the_empty_result(name):
    case = CASES[name]
    model = lite.Model.load(to_bytes(convert_model(case.model())), device="numpy")
    y = model.predict({"x": case.x(0)})["y"]
    assert y.dtype == np.float32
    assert y.shape == expected_shape(case, name)


def test_a_reshape_that_cannot_infer_its_free_axis_is_a_typed_error():
    """Reshape to [0, -1] of an empty batch has no answer (any width fits); ONNX Runtime refuses it too."""
    case = Case([node("Reshape", ["x", "shape"], ["y"])], [0, 8, 4], {"shape": np.array([0, -1], np.int64)})
    model = lite.Model.load(to_bytes(convert_model(case.model())), device="numpy")
    with pytest.raises(lite.errors.KernelError, match="cannot infer -1"):
        model.predict({"x": case.x(0)})


def _small_cnn(torch):
    """A zoo-style classifier: strided stem, a residual block, a depthwise-separable block, a head."""
    nn = torch.nn

    class Residual(nn.Module):
        def __init__(self, channels: int) -> None:
            super().__init__()
            self.body = nn.Sequential(nn.Conv2d(channels, channels, 3, 1, 1, bias=False), nn.BatchNorm2d(channels),
                                      nn.ReLU(), nn.Conv2d(channels, channels, 3, 1, 1))

        def forward(self, x):
            return torch.relu(x + self.body(x))

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), Residual(16),
        nn.Conv2d(16, 16, 3, 1, 1, groups=16), nn.Conv2d(16, 32, 1), nn.ReLU6(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10), nn.Softmax(-1)).eval()


@pytest.mark.slow
@pytest.mark.parametrize("device", ["numpy", "cpu"])
def test_an_exported_cnn_runs_an_empty_batch(device, tmp_path):
    torch = pytest.importorskip("torch")
    import converter

    source, target = tmp_path / "cnn.onnx", tmp_path / "cnn.lite"
    torch.onnx.export(_small_cnn(torch), (torch.randn(1, 3, 32, 32),), source, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
    converter.convert(source, target, verify=False)
    empty = np.zeros((0, 3, 32, 32), np.float32)
    expected = ort.InferenceSession(str(source), providers=["CPUExecutionProvider"]).run(None, {"x": empty})[0]
    y = lite.Model.load(target, device=device).predict({"x": empty})["y"]
    assert (y.shape, y.dtype) == (expected.shape, expected.dtype) == ((0, 10), np.float32)
