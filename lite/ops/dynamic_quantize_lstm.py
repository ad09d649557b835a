"""DynamicQuantizeLSTM (com.microsoft): an LSTM whose weights are 8-bit integers, as ONNX Runtime's
dynamic quantizer writes it.

https://github.com/microsoft/onnxruntime/blob/main/docs/ContribOperators.md#com.microsoft.DynamicQuantizeLSTM

Inputs are those of ONNX's LSTM (:mod:`lite.ops.lstm`) with the weights transposed and quantized,
then their quantization parameters::

    X, W, R, B, sequence_lens, initial_h, initial_c, P, W_scale, W_zero_point, R_scale, R_zero_point
    W (directions, input, 4 * hidden) and R (directions, hidden, 4 * hidden): int8 or uint8, gates i, o, f, c
    scales and zero points: (directions,) per tensor, or (directions, 4 * hidden) per output column

ONNX Runtime computes each of the layer's two products as an integer GEMM: the float operand (all
the steps' inputs at once; then each step's ``Ht-1``) is quantized to uint8 with a scale and zero
point from its own range, as DynamicQuantizeLinear does, multiplied by the integer weights, and
the int32 sums scaled back by ``operand scale * weight scale``. The operand's rounding is part of
what the model computes: an LSTM run on the dequantized weights in float moved a speaker
embedder's output by half its peak. This kernel computes the same products: the weights are
centered on their zero points once, at load (float32 holding the integers exactly), the operands
are quantized as ONNX Runtime quantizes them, and the integer products are summed by BLAS in
float32, exact while the partial sums stay below 2**24 (a product of two centered 8-bit values is
at most 65,025; on the VoiceFilter-Lite models the largest sum is 3.6e5, 46 times below). The cell around them is the general LSTM cell (:func:`lite.ops.lstm.lstm_step`).

How ONNX Runtime shares ranges between rows, this kernel follows: every row of X over the steps
up to the longest ``sequence_lens``; each step's ``Ht-1`` rows together, unless it splits the
batch between its threads (more than 4 rows, or 2 or more with hidden <= 256), where each
thread's share is quantized apart: here each row, as with at least as many threads as rows. Two
departures remain: with fewer threads than rows ONNX Runtime's shares hold several rows; and past
a row's ``sequence_lens`` its ``Ht-1`` enters the range as that row's last output where ONNX
Runtime has zeros.

An LSTM's h lies in (-1, 1) and saturates, so its range is often nearly symmetric: ``-min /
scale`` lands on 127.5, a tie for the zero point that the last bit of the extremes decides (the
tanh and sigmoid here and ONNX Runtime's approximations differ in that bit). A model that
amplifies such flips moves under a 1e-6 nudge of its inputs by as much: verification measures
that spread (:mod:`converter.verify_spread`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lite.errors import ModelFormatError
from lite.ops._rnn_common import activation_functions, clipper, direction_count, run_directions, time_major
from lite.ops.lstm import direction_peepholes, lstm_step, summed_bias
from lite.ops.registry import kernel

_OP = "DynamicQuantizeLSTM"


@dataclass(frozen=True)
class QuantizedWeights:
    """One weight input (W or R) centered on its zero point, per direction, and its scales."""

    centered: np.ndarray  # (directions, rows, 4 * hidden) float32, integers
    scales: np.ndarray  # (directions, 4 * hidden) float32

    def __post_init__(self) -> None:
        # Prepared at load and shared by every thread's calls: read-only, so none can change it.
        self.centered.flags.writeable = False
        self.scales.flags.writeable = False

    def product(self, operand: np.ndarray, direction: int, quantized_on: np.ndarray | None = None, *,
                rows_apart: bool = False) -> np.ndarray:
        """``operand @ dequantized weights`` as ONNX Runtime's integer GEMM computes it: the operand
        quantized to uint8 on the range of ``quantized_on`` (default: itself), or of each of its
        rows with ``rows_apart``."""
        scale, zero_point = _uint8_parameters(operand if quantized_on is None else quantized_on, rows_apart)
        quantized = np.clip(np.rint(operand / scale) + zero_point, 0, 255)
        integer_sums = (quantized - zero_point) @ self.centered[direction]
        return integer_sums * (scale * self.scales[direction])


def _uint8_parameters(values: np.ndarray, rows_apart: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point (float32) of ONNX Runtime's dynamic uint8 quantization (its
    GetQuantizationParameter, DynamicQuantizeLinear's formula): the range always includes 0. One
    pair for all of ``values``, or with ``rows_apart`` one per row of a 2-D array (shape (rows, 1))."""
    axis, keepdims = (-1, True) if rows_apart else (None, False)
    if values.size:
        low = np.minimum(values.min(axis=axis, keepdims=keepdims), 0).astype(np.float32)
        high = np.maximum(values.max(axis=axis, keepdims=keepdims), 0).astype(np.float32)
    else:
        low = high = np.zeros((values.shape[0], 1) if rows_apart else (), np.float32)
    scale = np.where(high == low, np.float32(1), (high - low) / np.float32(255)).astype(np.float32)
    zero_point = np.rint(np.clip(np.float32(0) - low / scale, 0, 255)).astype(np.float32)
    return scale, zero_point


def quantized_weights(name: str, weights, scale, zero_point, directions: int, hidden: int) -> QuantizedWeights:
    """``weights`` (W or R) centered and its scales broadcast per column, after the checks ONNX
    Runtime makes: shapes (directions,) or (directions, 4 * hidden); zero points given per column
    all 0 for int8 weights and all equal for uint8 (its integer GEMM takes one per direction)."""
    weights = np.asarray(weights)
    columns = 4 * hidden
    if weights.dtype not in (np.int8, np.uint8) or weights.ndim != 3 or weights.shape[::2] != (directions, columns):
        raise ModelFormatError(
            f"{_OP}: {name} must be int8 or uint8 of shape ({directions}, rows, {columns}) "
            f"(directions, input or hidden, 4 * hidden_size); got {weights.dtype} {weights.shape}"
        )
    scales = _per_column(f"{name}_scale", scale, directions, columns).astype(np.float32)
    zero_points = _per_column(f"{name}_zero_point", zero_point, directions, columns)
    if np.asarray(zero_point).dtype != weights.dtype:
        raise ModelFormatError(
            f"{_OP}: {name}_zero_point is {np.asarray(zero_point).dtype}, {name} is {weights.dtype}: they must match"
        )
    per_column = np.ndim(zero_point) == 2
    if per_column and ((zero_points != zero_points[:, :1]).any() or (weights.dtype == np.int8 and zero_points.any())):
        wanted = "all 0" if weights.dtype == np.int8 else "one value per direction"
        raise ModelFormatError(
            f"{_OP}: a per-column {name}_zero_point must be {wanted} for {weights.dtype} weights (ONNX Runtime's "
            f"integer GEMM takes one zero point per direction); got {np.unique(zero_points).tolist()[:8]}"
        )
    centered = weights.astype(np.float32) - zero_points[:, None, :1].astype(np.float32)
    return QuantizedWeights(np.ascontiguousarray(centered), np.ascontiguousarray(scales))


def _per_column(name: str, value, directions: int, columns: int) -> np.ndarray:
    value = np.asarray(value)
    if value.shape == (directions,):
        return np.repeat(value[:, None], columns, axis=1)
    if value.shape == (directions, columns):
        return value
    raise ModelFormatError(
        f"{_OP}: {name} must have shape ({directions},) per tensor or ({directions}, {columns}) per column "
        f"(4 * hidden_size); got {value.shape}"
    )


@dataclass(frozen=True)
class PreparedLSTM:
    """Both weight inputs, prepared once at load (the registry's ``prepare`` hook)."""

    W: QuantizedWeights
    R: QuantizedWeights


def _hidden(R, hidden_size) -> int:
    return int(hidden_size) if hidden_size else np.shape(R)[1]


def _prepared(W, R, W_scale, W_zero_point, R_scale, R_zero_point, direction, hidden) -> PreparedLSTM:
    directions = direction_count(_OP, direction)
    return PreparedLSTM(quantized_weights("W", W, W_scale, W_zero_point, directions, hidden),
                        quantized_weights("R", R, R_scale, R_zero_point, directions, hidden))


def prepare_dynamic_quantize_lstm(constants, shapes, *, direction="forward", hidden_size=None, **_):
    """Load-time work: W and R centered, with their scales, when all six are constants."""
    _, W, R, _, _, _, _, _, W_scale, W_zero_point, R_scale, R_zero_point = (list(constants) + [None] * 12)[:12]
    if any(value is None for value in (W, R, W_scale, W_zero_point, R_scale, R_zero_point)):
        return None
    return _prepared(W, R, W_scale, W_zero_point, R_scale, R_zero_point, direction, _hidden(R, hidden_size))


def _splits_the_batch(batch: int, hidden: int) -> bool:
    """Whether ONNX Runtime splits the batch between its threads (its UniDirectionalLstm's rule),
    quantizing each share of ``Ht-1`` on its own range: here each row, as with a thread per row."""
    return batch > 4 or (batch >= 2 and hidden <= 256)


@kernel(_OP, since=1, domain="com.microsoft", prepare=prepare_dynamic_quantize_lstm)
def DynamicQuantizeLSTM(
    X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
    W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None, *,
    activation_alpha=None, activation_beta=None, activations=None, clip=None, direction="forward",
    hidden_size=None, input_forget=0, prepared=None,
):
    hidden = _hidden(R, hidden_size)
    weights = prepared or _prepared(W, R, W_scale, W_zero_point, R_scale, R_zero_point, direction, hidden)
    inputs = time_major(_OP, X, sequence_lens, [initial_h, initial_c], direction, 0, hidden)
    functions = activation_functions(
        _OP, activations, activation_alpha, activation_beta, ("Sigmoid", "Tanh", "Tanh"), len(inputs.backwards)
    )
    bound = clipper(clip)
    # ONNX Runtime quantizes the inputs of the steps up to the longest sequence, every row of them.
    steps = inputs.X.shape[0] if sequence_lens is None else int(np.max(sequence_lens, initial=0))
    evaluated = inputs.X[:steps]
    rows_apart = _splits_the_batch(inputs.X.shape[1], hidden)

    def factory(d):
        bias = summed_bias(B, d, hidden, inputs.dtype)

        def project(x):
            return weights.W.product(x, d, quantized_on=evaluated) + bias

        step = lstm_step(hidden, functions[d], bound, direction_peepholes(P, d, hidden, inputs.dtype), input_forget,
                         lambda h: weights.R.product(h, d, rows_apart=rows_apart))
        return step, project

    return run_directions(_OP, inputs, 2, factory)
