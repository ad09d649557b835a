"""Inputs for verifying a conversion: ones the original model accepts, read from the graph.

Random data with every unknown dimension set to 1 is rejected by most real models (a reflect
Pad needs two elements, a strided Conv front end hundreds of samples, a Gather of token type ids
indices below the table's two rows). So the inputs are planned from the graph:

- **sizes**: a dimension fixed by the model stays; one named by the caller (``input_shapes``)
  takes that size, on every input sharing its name (a declared 0 stays 0: ONNX Runtime holds
  inputs to their declared sizes); one shared by name takes one size everywhere; a leading batch dimension is 1
  (2 for ``batch``, the name ``--dynamic-batch`` gives; 2 in a last round, for graphs that squeeze
  it away at 1); the others get sizes by their role,
  in rounds of growing size (images 64, then 224, then 640 pixels; token sequences 8, 32, 128;
  audio 512, 4000, then 16000 samples: 512 is the one chunk size streaming voice models such as
  Silero VAD take), so a model that rejects small inputs is retried with larger; the unknown axis
  1 of a float ``[fixed, ?, fixed]`` input is the batch of a recurrent state (ONNX LSTM/GRU
  ``initial_h`` is ``[directions, batch, hidden]``) and takes the batch's size;
- **names and the graph over position**: a dimension named as a sum (Hugging Face optimum's
  ``past_sequence_length + sequence_length`` mask axis) is the sum of its parts; a name that says
  sequence is a sequence length on any input but a float waveform (optimum's cache ``[batch, heads,
  past_sequence_length, head_size]`` is no image), one starting with ``past`` a cached length, 0
  in the last rounds (a decoder's first step); an image's channels and a patch embedding's side
  are what the Conv reading it takes (:mod:`converter.verification_axes`), channels 3 when only
  the name says so; a feature axis left unknown is what the first LSTM, GRU, RNN, MatMul, Gemm
  or Conv's weights take, followed through Unsqueeze, Squeeze, Transpose and element-wise ops
  (:mod:`converter.verification_features`), and a first axis a Conv convolves over is a length
  or an image side, not a batch;
- **values**: what the graph says of them (:mod:`converter.verification_values`: indices below
  the rows they index, positive divisors and sizes, masks of ones, lengths equal to the
  sequence's size, a compared constant); other integers lie in [0, 4), floats are standard
  normal, booleans random, strings short words.

:func:`plans` yields the rounds; :func:`feeds` makes one round's arrays.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx

from converter.verification_axes import axis_sizes
from converter.verification_features import LENGTH, SIDE, feature_sizes
from converter.verification_values import ValueHint, value_hints

_WORDS = ("the", "model", "reads", "short", "words", "and", "numbers", "like", "these")
_SIZES = (  # per round: image side, sequence length, cached (past) length, audio samples, anything else
    {"image": 64, "sequence": 8, "past": 5, "audio": 512, "other": 8},
    {"image": 64, "sequence": 8, "past": 5, "audio": 4000, "other": 8},
    {"image": 224, "sequence": 32, "past": 24, "audio": 16000, "other": 16},
    {"image": 640, "sequence": 128, "past": 96, "audio": 16000, "other": 32},
)
# Then the same with nothing cached yet, a decoder's first step (Hugging Face optimum feeds a past of
# length 0): a model may take no other.
_SIZES += tuple({**sizes, "past": 0} for sizes in _SIZES)
# Last, the smallest sizes with a batch of 2: a graph may squeeze its batch axis at 1 (hummingbird's
# tree ensembles as products do, then fail in a Transpose), so no round at batch 1 runs.
_SIZES += ({**_SIZES[0], "batch": 2},)
_SEQUENCE_NAME = re.compile(r"(^|_)seq(uence)?(_?len(gth)?)?(_|$)")  # sequence_length, encoder_seq_len, seq
_PAST_NAME = re.compile(r"^past(_|$)")  # past_sequence_length, past_decoder_sequence_length
_CHANNELS_NAME = re.compile(r"(^|_)channels?(_|$)")  # num_channels, channels
_SUM_TERM = re.compile(r"[A-Za-z_][\w.]*|\d+")


class UnsynthesizableInputError(ValueError):
    """An input of a type random data cannot stand for (bfloat16, float8, 4-bit, ...)."""


@dataclass
class InputPlan:
    """Shapes (with sizes) for every input, and what their values must satisfy."""

    shapes: dict[str, list[int]]
    dtypes: dict[str, np.dtype]
    values: dict[str, ValueHint] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # symbolic dimension -> size
    description: str = ""


def plans(proto: onnx.ModelProto, input_shapes: dict[str, list[int | str]] | None = None) -> Iterator[InputPlan]:
    """Rounds of input plans, smallest first; raises :class:`UnsynthesizableInputError` when an
    input has a type no random data can stand for."""
    graph = proto.graph
    initializers = {init.name for init in graph.initializer}
    inputs = [value for value in graph.input if value.name not in initializers]
    dtypes = {value.name: _dtype(value) for value in inputs}
    names = [value.name for value in inputs]
    values = value_hints(proto, names)
    given = _given_sizes(inputs, input_shapes or {})
    # The image side read from a patch embedding's position table first, then the sizes by role.
    # Axes a layer's weights fix (a feature axis left unknown) under those.
    weighed = feature_sizes(proto, names)
    readings = tuple({name: {**weighed.get(name, {}), **found.get(name, {})} for name in {*weighed, *found}}
                     for found in (axis_sizes(proto, names), axis_sizes(proto, names, patch_sides=False)))
    seen: set[tuple] = set()
    for round_sizes, fixed in itertools.product(_SIZES, readings):
        sizes: dict[str, int] = dict(given)
        shapes = {value.name: _shape(value, dtypes[value.name], round_sizes, sizes,
                                     (input_shapes or {}).get(value.name), fixed.get(value.name, {}))
                  for value in inputs}
        key = tuple(tuple(shape) for shape in shapes.values())
        if key in seen:
            continue
        seen.add(key)
        shown = ", ".join(f"{name}{shape}" for name, shape in shapes.items())
        yield InputPlan(shapes, dtypes, values, sizes, shown)


def _given_sizes(inputs: list[onnx.ValueInfoProto], input_shapes: dict[str, list[int | str]]) -> dict[str, int]:
    """The sizes the caller's shapes give the original's named dimensions, which other inputs
    share: ``input[batch, sequence]`` given as 1,576 puts a state ``[2, batch, 128]`` at batch 1."""
    sizes = {}
    for value in inputs:
        given = input_shapes.get(value.name)
        dims = value.type.tensor_type.shape.dim
        if given is not None and len(given) == len(dims):
            for dim, size in zip(dims, given):
                if dim.HasField("dim_param") and dim.dim_param and isinstance(size, int):
                    sizes.setdefault(dim.dim_param, size)
    return sizes


def feeds(plan: InputPlan, seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays following ``plan``."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for name, shape in plan.shapes.items():
        dtype, hint = plan.dtypes[name], plan.values.get(name, ValueHint())
        arrays[name] = _array(rng, dtype, shape, hint, plan.sizes)
    return arrays


def _dtype(value: onnx.ValueInfoProto) -> np.dtype:
    kind = value.type.WhichOneof("value")
    if kind != "tensor_type":
        raise UnsynthesizableInputError(f"input {value.name!r} is a {kind or 'value of unknown type'}, not a tensor")
    elem_type = value.type.tensor_type.elem_type
    if elem_type == onnx.TensorProto.STRING:
        return np.dtype(object)
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError) as err:
        raise UnsynthesizableInputError(f"input {value.name!r} has element type {elem_type}") from err
    if dtype.kind not in "fiub" or dtype.itemsize == 0 or dtype.name not in np.sctypeDict:
        name = onnx.TensorProto.DataType.Name(elem_type).lower()
        raise UnsynthesizableInputError(f"input {value.name!r} is {name}, for which no random data can be made")
    return dtype


def _shape(value: onnx.ValueInfoProto, dtype: np.dtype, round_sizes: dict[str, int], sizes: dict[str, int],
           given: list[int | str] | None, fixed: dict[int, int]) -> list[int]:
    """``value``'s shape in this round; ``sizes`` (symbolic dimension -> size) is read and extended,
    so that a name gets one size on every input; ``fixed``: sizes the graph fixes by axis."""
    dims = list(value.type.tensor_type.shape.dim)
    if given is not None and len(given) == len(dims):
        dims = [onnx.TensorShapeProto.Dimension(dim_value=g) if isinstance(g, int) else
                onnx.TensorShapeProto.Dimension(dim_param=g) for g in given]
    shape = []
    for axis, dim in enumerate(dims):
        if dim.HasField("dim_value") and dim.dim_value >= 0:  # ONNX Runtime holds inputs to declared sizes, 0 too
            shape.append(dim.dim_value)
            continue
        param = dim.dim_param if dim.HasField("dim_param") else ""
        if param in sizes:
            size = sizes[param]
        elif axis == 0 and fixed.get(axis) in (LENGTH, SIDE):  # convolved over: no batch, though first
            size = round_sizes["audio"] if fixed[axis] == LENGTH else round_sizes["image"]
        elif fixed.get(axis, 0) > 0:
            size = fixed[axis]
        elif _recurrent_state_batch(dims, axis, dtype):
            size = round_sizes.get("batch", 1)  # the batch, as on the leading axis of the other inputs
        elif _sum_terms(param):
            size = sum(_term_size(term, axis, len(dims), dtype, round_sizes, sizes) for term in _sum_terms(param))
        elif axis > 0 and _BATCH_NAME.fullmatch(dims[0].dim_param.lower()) and _SHORT_NAME.fullmatch(param.lower()):
            # [batch_size, N]: with the batch named on the first axis, a short name after it is a
            # length (onnx-asr's waveforms), not a second batch.
            size = _size("length", axis, len(dims), dtype, round_sizes)
        elif _image_side(dims, axis, param):
            size = round_sizes["image"]
        else:
            size = _size(param, axis, len(dims), dtype, round_sizes)
        if param:
            sizes[param] = size
        shape.append(size)
    return shape


_SIDE_NAME = re.compile(r"(image_?|img_?|input_?)?(height|width|h|w)")


def _image_side(dims: list, axis: int, param: str) -> bool:
    """Whether ``axis`` is an image's height or width whatever the element type (uint8 pixels
    too): named so (``height``, ``width``, ``img_h``), or an unnamed axis 1 or 2 of a
    channels-last ``[N, ?, ?, 1|3|4]`` input (TFLite's and Keras' layout). Such a model took 8x8
    images, the size of a short sequence, and ``lite bench`` then timed 8x8 images."""
    if param and _SIDE_NAME.fullmatch(param.lower()):
        return True
    last = dims[-1] if dims else None
    return (len(dims) == 4 and axis in (1, 2) and last is not None and last.HasField("dim_value")
            and last.dim_value in (1, 3, 4) and not (dims[1].HasField("dim_value") and dims[1].dim_value in (1, 3, 4)))


def _sum_terms(param: str) -> list[str]:
    """The terms of a dimension named as a sum, such as optimum's attention mask axis
    ``past_sequence_length + sequence_length``; [] for any other name."""
    terms = [term.strip() for term in param.split("+")]
    if len(terms) < 2 or not all(_SUM_TERM.fullmatch(term) for term in terms):
        return []
    return terms


def _term_size(term: str, axis: int, rank: int, dtype: np.dtype, round_sizes: dict[str, int],
               sizes: dict[str, int]) -> int:
    """One term's size: a number, a name's size (sized here by its own name when no input has
    sized it yet, then kept for the inputs that use it)."""
    if term.isdigit():
        return int(term)
    if term not in sizes:
        sizes[term] = _size(term, axis, rank, dtype, round_sizes)
    return sizes[term]


def _recurrent_state_batch(dims: list, axis: int, dtype: np.dtype) -> bool:
    """Whether ``axis`` is the unnamed middle of a float ``[fixed, ?, fixed]`` shape, the layout of
    an LSTM or GRU state (``[directions, batch, hidden]``)."""
    if dtype.kind != "f" or len(dims) != 3 or axis != 1 or dims[1].HasField("dim_param"):
        return False
    return all(dims[other].HasField("dim_value") and dims[other].dim_value > 0 for other in (0, 2))


_BATCH_NAME = re.compile(r"batch.*|num_?batch.*")
_SHORT_NAME = re.compile(r"n|b|bs")  # a batch where nothing else names one


def _size(param: str, axis: int, rank: int, dtype: np.dtype, round_sizes: dict[str, int]) -> int:
    """A size for an unknown dimension, by its name and position."""
    lowered = param.lower()
    if lowered == "batch":
        return 2
    if (axis == 0 and rank >= 2) or _BATCH_NAME.fullmatch(lowered) or _SHORT_NAME.fullmatch(lowered):
        return round_sizes.get("batch", 1)
    if _PAST_NAME.search(lowered):
        return round_sizes["past"]
    if _CHANNELS_NAME.search(lowered):
        return 3
    if dtype.kind == "f" and rank <= 2:  # a waveform, whatever its name (optimum's wav2vec2: sequence_length)
        return round_sizes["audio"]
    if _SEQUENCE_NAME.search(lowered):  # a [batch, heads, past, head_size] cache's too, not an image side
        return round_sizes["sequence"]
    if dtype.kind == "f" and rank >= 3 and axis >= rank - 2:
        return round_sizes["image"] if rank == 4 else round_sizes["audio"] // 10
    if dtype.kind in "iu" or re.search(r"seq|len|token|time", lowered):
        return round_sizes["sequence"]
    return round_sizes["other"]


def _array(rng: np.random.Generator, dtype: np.dtype, shape: list[int], hint: ValueHint,
           sizes: dict[str, int]) -> np.ndarray:
    if dtype.kind == "O":
        return rng.choice(np.array(_WORDS, dtype=object), size=shape)
    if dtype.kind == "b":
        return np.ones(shape, bool) if hint.ones else rng.integers(0, 2, size=shape).astype(bool)
    if hint.ones:
        return np.ones(shape, dtype)
    if hint.length_of is not None and hint.length_of in sizes:
        return np.full(shape, sizes[hint.length_of], dtype)
    if hint.equals is not None:
        return np.full(shape, hint.equals, dtype)
    if dtype.kind == "f" and not hint.whole:
        if hint.positive:
            return rng.uniform(1.0, 2.0, size=shape).astype(dtype)
        return rng.standard_normal(shape).astype(dtype)
    low = max(hint.low, 1 if hint.positive else 0)
    high = hint.high if hint.high is not None else 4
    high = max(high, low + 1)
    if dtype.kind == "u":
        low = max(low, 0)
    return rng.integers(low, high, size=shape).astype(dtype)
