"""com.microsoft DynamicQuantizeLSTM against ONNX Runtime, which defines it: one-node graphs built
with onnx.helper, weights quantized as ONNX Runtime's dynamic quantizer writes them (int8
symmetric, or uint8 with a zero point; per tensor or per output column)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import converter
import lite
from lite.errors import ModelFormatError
from lite.ops.registry import KERNELS

rng = np.random.default_rng(5)
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}
INPUT_NAMES = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P",
               "W_scale", "W_zero_point", "R_scale", "R_zero_point"]


def quantize(weights: np.ndarray, dtype, per_channel: bool):
    """``weights`` (directions, rows, columns) to ``dtype`` with scales and zero points of shape
    (directions,) or (directions, columns): int8 symmetric (zero point 0), uint8 around a zero
    point of 131 (one per direction, as ONNX Runtime requires)."""
    axes = (1,) if per_channel else (1, 2)
    peak = np.abs(weights).max(axis=axes)
    if dtype == np.int8:
        scale, zero = peak / 127, np.zeros(peak.shape, np.int8)
    else:
        scale, zero = peak / 124, np.full(peak.shape, 131, np.uint8)
    expand = scale[:, None, :] if per_channel else scale[:, None, None]
    zero_expand = zero[:, None, :] if per_channel else zero[:, None, None]
    info = np.iinfo(dtype)
    quantized = np.clip(np.rint(weights / expand) + zero_expand.astype(np.float32), info.min, info.max)
    return quantized.astype(dtype), scale.astype(np.float32), zero


def layer_inputs(*, direction="forward", per_channel=False, dtype=np.int8, seq=6, batch=2, size=5, hidden=8,
                 states=True, lengths=None):
    """The node's 12 inputs (None where omitted), weights of moderate gain so the states vary."""
    directions = DIRECTIONS[direction]
    W, W_scale, W_zero = quantize(rng.standard_normal((directions, size, 4 * hidden)) * 0.6, dtype, per_channel)
    R, R_scale, R_zero = quantize(rng.standard_normal((directions, hidden, 4 * hidden)) * 0.4, dtype, per_channel)
    state = (directions, batch, hidden)
    return [
        rng.standard_normal((seq, batch, size)).astype(np.float32),
        W, R,
        (rng.standard_normal((directions, 8 * hidden)) * 0.3).astype(np.float32),
        None if lengths is None else np.array(lengths, np.int32),
        (rng.standard_normal(state) * 0.5).astype(np.float32) if states else None,
        (rng.standard_normal(state) * 0.5).astype(np.float32) if states else None,
        None,
        W_scale, W_zero, R_scale, R_zero,
    ]


CONSTANT = {1, 2, 3, 8, 9, 10, 11}  # weights, bias and quantization parameters: initializers


def layer_model(values, attributes) -> onnx.ModelProto:
    names = [name if value is not None else "" for name, value in zip(INPUT_NAMES, values)]
    node = helper.make_node("DynamicQuantizeLSTM", names, ["Y", "Y_h", "Y_c"], domain="com.microsoft", **attributes)
    graph = helper.make_graph(
        [node], "dynamic_quantize_lstm",
        [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
         for index, (name, value) in enumerate(zip(INPUT_NAMES, values)) if value is not None and index not in CONSTANT],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in ("Y", "Y_h", "Y_c")],
        [numpy_helper.from_array(value, name) for index, (name, value) in enumerate(zip(INPUT_NAMES, values))
         if value is not None and index in CONSTANT],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def feeds(values) -> dict[str, np.ndarray]:
    return {name: value for index, (name, value) in enumerate(zip(INPUT_NAMES, values))
            if value is not None and index not in CONSTANT}


def onnxruntime_outputs(values, attributes) -> list[np.ndarray]:
    """ONNX Runtime with a thread per batch row: where it splits the batch between threads, each
    row's state is quantized apart, as the kernel does."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = values[0].shape[1]
    session = onnxruntime.InferenceSession(layer_model(values, attributes).SerializeToString(), options,
                                           providers=["CPUExecutionProvider"])
    return session.run(None, feeds(values))


def kernel_outputs(values, attributes, *, prepared: bool) -> list[np.ndarray]:
    chosen = KERNELS.select("DynamicQuantizeLSTM", "com.microsoft", 1)
    extra = {}
    if prepared:
        constants = [value if index in CONSTANT else None for index, value in enumerate(values)]
        extra["prepared"] = chosen.prepare(constants, [None] * len(values), **attributes)
        assert extra["prepared"] is not None
    return list(chosen.fn(*values, **attributes, **extra))


def float_lstm_outputs(values, attributes) -> list[np.ndarray]:
    """ONNX's float LSTM on the dequantized weights: what the layer computes without quantizing its
    activations (onnx.reference)."""
    from onnx.reference import ReferenceEvaluator

    X, W, R, B, lengths, h, c, _, W_scale, W_zero, R_scale, R_zero = values

    def dequantized(q, scale, zero):
        scale = scale[:, None, :] if scale.ndim == 2 else scale[:, None, None]
        zero = zero[:, None, :] if zero.ndim == 2 else zero[:, None, None]
        return np.swapaxes((q.astype(np.float32) - zero.astype(np.float32)) * scale, 1, 2)

    float_values = [X, dequantized(W, W_scale, W_zero), dequantized(R, R_scale, R_zero), B, lengths, h, c]
    names = [f"in{index}" if value is not None else "" for index, value in enumerate(float_values)]
    node = helper.make_node("LSTM", names, ["Y", "Y_h", "Y_c"], **attributes)
    graph = helper.make_graph([node], "lstm", [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                                               for n in names if n], [helper.make_tensor_value_info(n, 1, None)
                                                                      for n in ("Y", "Y_h", "Y_c")])
    evaluator = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]))
    return evaluator.run(None, {n: v for n, v in zip(names, float_values) if n})


def largest_difference(actual, expected) -> float:
    return max(float(np.abs(np.asarray(a, np.float64) - b).max()) for a, b in zip(actual, expected))


@pytest.mark.parametrize("direction", list(DIRECTIONS))
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8], ids=["int8", "uint8"])
def test_agrees_with_onnxruntime(direction, per_channel, dtype):
    values = layer_inputs(direction=direction, per_channel=per_channel, dtype=dtype)
    attributes = {"hidden_size": 8, "direction": direction}
    expected = onnxruntime_outputs(values, attributes)
    for prepared in (False, True):
        got = kernel_outputs(values, attributes, prepared=prepared)
        assert [a.shape for a in got] == [e.shape for e in expected]
        assert all(a.dtype == np.float32 for a in got)
        assert largest_difference(got, expected) < 2e-5, (prepared, largest_difference(got, expected))
    # The check can tell: the float LSTM on the dequantized weights is far off.
    assert largest_difference(float_lstm_outputs(values, attributes), expected) > 1e-3


@pytest.mark.parametrize(("batch", "hidden"), [(2, 260), (5, 8), (1, 8)],
                         ids=["rows-together", "rows-apart", "one-row"])
def test_rows_share_a_range_unless_onnxruntime_splits_the_batch(batch, hidden):
    values = layer_inputs(direction="bidirectional", per_channel=True, batch=batch, hidden=hidden, seq=4)
    attributes = {"hidden_size": hidden, "direction": "bidirectional"}
    got = kernel_outputs(values, attributes, prepared=True)
    assert largest_difference(got, onnxruntime_outputs(values, attributes)) < 2e-5


def test_sequence_lens_quantize_the_inputs_of_the_evaluated_steps_only():
    """A single row shorter than X: ONNX Runtime takes the inputs' range over its steps only (the
    padding here is large, and would coarsen every step's input)."""
    values = layer_inputs(direction="bidirectional", batch=1, seq=7, lengths=[4])
    values[0][4:] *= 50
    attributes = {"hidden_size": 8, "direction": "bidirectional"}
    got = kernel_outputs(values, attributes, prepared=True)
    assert largest_difference(got, onnxruntime_outputs(values, attributes)) < 2e-5


def test_other_activations_clip_and_coupled_gates_use_the_general_cell():
    values = layer_inputs(direction="forward", per_channel=True)
    attributes = {"hidden_size": 8, "direction": "forward", "clip": 0.8, "input_forget": 1,
                  "activations": ["HardSigmoid", "Tanh", "Softsign"]}
    got = kernel_outputs(values, attributes, prepared=True)
    assert largest_difference(got, onnxruntime_outputs(values, attributes)) < 2e-5


@pytest.mark.parametrize("fp16", [False, True], ids=["float", "fp16"])
def test_the_numpy_engine_runs_a_converted_model(tmp_path, fp16):
    """Registered for the com.microsoft domain: the converter keeps the node, verifies the file on
    the numpy engine (with --fp16 too: the layer's bias and scales stay float32), and lite.Model
    runs it there."""
    values = layer_inputs(direction="bidirectional", per_channel=True)
    attributes = {"hidden_size": 8, "direction": "bidirectional"}
    onnx.save(layer_model(values, attributes), tmp_path / "layer.onnx")
    report = converter.convert(tmp_path / "layer.onnx", tmp_path / "layer.lite", fp16=fp16)
    assert report.verification.status == "passed" and "numpy" in report.verification.engine
    model = lite.Model.load(tmp_path / "layer.lite", device="numpy")
    outputs = model.predict(feeds(values))
    assert largest_difference([outputs[n] for n in ("Y", "Y_h", "Y_c")], onnxruntime_outputs(values, attributes)) < 2e-5


@pytest.mark.parametrize(("change", "message"), [
    (lambda v: v.__setitem__(9, np.full((1, 32), 3, np.int8)), "per-column W_zero_point must be all 0"),
    (lambda v: v.__setitem__(11, np.arange(32, dtype=np.uint8)[None]), "one value per direction"),
    (lambda v: v.__setitem__(8, np.ones((1, 5), np.float32)), r"W_scale must have shape \(1,\) per tensor"),
    (lambda v: v.__setitem__(2, v[2].astype(np.int32)), "R must be int8 or uint8"),
])
def test_quantization_parameters_onnxruntime_refuses_are_named(change, message):
    values = layer_inputs(per_channel=True, dtype=np.uint8 if "direction" in message else np.int8)
    change(values)
    with pytest.raises(ModelFormatError, match=message):
        kernel_outputs(values, {"hidden_size": 8}, prepared=False)
