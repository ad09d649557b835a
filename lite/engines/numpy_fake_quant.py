"""A QuantizeLinear whose one reader is a DequantizeLinear of the same scale and zero point, as
one step of float arithmetic.

Every activation of a QDQ model (lite's own ``--quant int8`` files, ONNX Runtime's quantizer,
tf2onnx's conversions of TFLite int8 models) passes through such a pair. Run as two kernels, the
quantization divides, rounds, adds the zero point, saturates and casts to 8 bits, and the
dequantization casts back, subtracts the zero point and multiplies: two calls and three
conversions per activation, 38 % and 15 % of a TFLite int8 MobileNetV2's time on the numpy
engine. The pair's value is ``clip(round(x / s), low - z, high - z) * s``: the same float32
operations on the same integers (below 2**24 every step is exact, and quotients beyond the
range saturate alike), without the 8-bit array::

    x ──► QuantizeLinear(s, z) ──► DequantizeLinear(s, z) ──► y      becomes      x ──► fake quant ──► y

Only per-tensor float32 scales and 8- or 16-bit zero points match; inputs that are not float32
arrays run the two kernels in turn.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from lite.engines.numpy_patterns import Graph, is_kernel, plain, run_in_turn

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

_QUANTIZE = {"QuantizeLinear_10", "QuantizeLinear_13", "QuantizeLinear_19", "QuantizeLinear_21", "QuantizeLinear"}
_DEQUANTIZE = {"DequantizeLinear_10", "DequantizeLinear_13", "DequantizeLinear_21", "DequantizeLinear"}
_RANGES = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127),
           np.dtype(np.uint16): (0, 65535), np.dtype(np.int16): (-32768, 32767)}


def fuse_quantize_dequantize(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each matching QuantizeLinear + DequantizeLinear pair as one step (see the
    module docstring)."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}  # id(DequantizeLinear step) -> the fused step, which takes its place
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "QuantizeLinear" or not _kernel_of(step, "quantize_linear", _QUANTIZE):
            continue
        parameters = _parameters(step, constants)
        if parameters is None or not graph.single(step.outputs[0]):
            continue
        reader = graph.readers_of[step.outputs[0]][0]
        if (reader.node.op_type != "DequantizeLinear" or not _kernel_of(reader, "dequantize_linear", _DEQUANTIZE)
                or reader.inputs[0] != step.outputs[0] or not _same(_parameters(reader, constants), parameters)):
            continue
        fn = _FakeQuant([step, reader], step.inputs[0], constants, *parameters)
        fused[id(reader)] = replace(reader, fn=fn, inputs=[step.inputs[0]], attributes={}, keywords={},
                                    output_count=None, activation=None, kernel_applies_activation=False,
                                    wants_allocate=True, prepare=None, prepared=None, memo=None,
                                    memo_sources=[], release=[])
        dropped.add(id(step))
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _kernel_of(step: _Step, module: str, names: set[str]) -> bool:
    return (plain(step, len(step.inputs)) and len(step.inputs) in (2, 3)
            and any(is_kernel(step.fn, module, name) for name in names))


def _parameters(step: _Step, constants: dict[int, Any]) -> tuple[np.float32, int, int, int] | None:
    """(scale, zero point, low, high) of a per-tensor step with float32 scale and an 8- or
    16-bit zero point, no block size and no other output type; else None."""
    attributes = step.attributes
    if attributes.get("block_size", 0) or attributes.get("output_dtype", 0) not in (0, 1) or attributes.get("precision", 0):
        return None
    scale = constants.get(step.inputs[1])
    zero_point = constants.get(step.inputs[2]) if len(step.inputs) == 3 else np.zeros((), np.uint8)
    if (not isinstance(scale, np.ndarray) or scale.size != 1 or scale.dtype != np.float32
            or not isinstance(zero_point, np.ndarray) or zero_point.size != 1 or zero_point.dtype not in _RANGES):
        return None
    scale_value = np.float32(scale.reshape(()))
    if not np.isfinite(scale_value) or scale_value == 0:
        return None
    low, high = _RANGES[zero_point.dtype]
    return scale_value, int(zero_point.reshape(())), low, high


def _same(found: tuple | None, wanted: tuple) -> bool:
    return found is not None and all(a == b for a, b in zip(found, wanted))


class _FakeQuant:
    """The pair's value in float32: round(x / s) saturated to the range less the zero point,
    times s. Not a float32 array: the two kernels in turn."""

    def __init__(self, block: list[_Step], x_index: int, constants: dict[int, Any], scale: np.float32,
                 zero_point: int, low: int, high: int) -> None:
        self.block, self.x_index, self.constants = block, x_index, constants
        self.scale = scale
        self.low, self.high = np.float32(low - zero_point), np.float32(high - zero_point)

    def __call__(self, x: Any, allocate: Callable) -> Any:
        if type(x) is not np.ndarray or x.dtype != np.float32:
            return run_in_turn(self.block, self.x_index, x, self.constants, allocate)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            values = np.divide(x, self.scale)
        np.rint(values, out=values)
        np.maximum(values, self.low, out=values)
        np.minimum(values, self.high, out=values)
        values *= self.scale
        return values
