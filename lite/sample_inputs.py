"""Random inputs that run a model, planned from its graph where the file records no samples.

A signature alone says too little: every open size 1 makes ``[batch, num_channels, height,
width]`` a one-pixel, one-channel image that a patch embedding rejects, and integers in [0, 10)
overflow BERT's two-row token type table. So, as the converter's verification plans its inputs
from the ONNX graph (``converter/verification_inputs.py``), these are read from the .lite graph:

- **sizes**: a size the model fixes stays; an input's shape the caller gives (``given``) is used
  whole, else the one the converter recorded (:func:`lite.signature.sample_shapes`); the leading
  dimension, and any named like it, is the batch; dimensions sharing a name share one size; one
  named by an expression of others (GPT-2's ``past_sequence_length + sequence_length``) is
  computed from them; an image's channels (the axis that reaches a Conv as its channels) are the
  weight's. The rest are tried in rounds (:data:`_ROUNDS`): first 224-pixel images, 8-token
  sequences and 1 elsewhere, then other sizes (a test-sized ViT takes 32 pixels only), and
  :func:`runnable_feeds` keeps the first round that runs;
- **values**: integers that reach a Gather's indices (through Cast, Unsqueeze, Reshape...) lie
  within the rows of the table they index; integer and boolean masks are ones; one-element
  inputs the converter recorded a value of (:func:`lite.signature.sample_values`) hold it; other
  integers lie in [0, 10), floats are standard normal, booleans random.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from lite.errors import InvalidInputError, LiteError, SampleInputError
from lite.format import ir
from lite.signature import TensorSpec, batch_names, concrete_shape, sample_shapes, sample_values

# Ops whose output carries the values of their first input (possibly reshaped, some picked): an
# index that passes through them still indexes the same table. The converter's verification
# plans its index ranges through the same ops.
INDEX_CARRYING_OPS = frozenset({"Cast", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Flatten", "Expand",
                                "Transpose", "Slice", "Gather", "Tile", "Concat", "Clip", "Add"})
# Ops that keep a tensor's axes where they are (elementwise: an image's normalization).
_AXIS_KEEPING_OPS = frozenset({"Cast", "Identity", "Add", "Sub", "Mul", "Div", "QuantizeLinear", "DequantizeLinear"})
_ROUNDS = (  # per round: image side, sequence length, any other open size
    {"image": 224, "sequence": 8, "other": 1},
    {"image": 32, "sequence": 8, "other": 8},
    {"image": 64, "sequence": 32, "other": 16},
    {"image": 640, "sequence": 128, "other": 32},
)
_SEQUENCE_NAME = re.compile(r"seq|len|token|time|past|step", re.IGNORECASE)
_INTEGER_HIGH = 10  # integers that index nothing the graph shows lie in [0, 10)
_UNKNOWN_TABLE_ROWS = 2  # a gathered table of unknown size: its smallest plausible one
_WALK_LIMIT = 64  # values followed from one input


@dataclass(frozen=True)
class _Hint:
    """What the graph says about one input: its integers' bound, its image axes."""

    high: int | None = None  # integers below this: the rows of a table they index
    ones: bool = False  # a mask
    channels: dict[int, int] | None = None  # {axis: channels} where its axis reaches a Conv's channels
    image_axes: frozenset[int] = frozenset()  # axes that reach a Conv's spatial axes


def random_feeds(model: ir.Model, batch: int = 1, given: Mapping[str, tuple[int, ...]] | None = None,
                 seed: int = 0) -> dict[str, np.ndarray]:
    """The first round's random inputs (see the module docstring), without running the model."""
    plan = _Plan(model, given or {})
    return plan.arrays(next(plan.rounds(batch)), seed)


def command_line_hint(names: list[str]) -> str:
    """How ``lite bench`` is given the shapes of inputs ``names``."""
    return " ".join(f"--shape {name}:D1,D2,..." for name in names)


def runnable_feeds(model: ir.Model, batch: int, run: Callable[[dict[str, np.ndarray]], Any],
                   given: Mapping[str, tuple[int, ...]] | None = None, seed: int = 0,
                   hint: Callable[[list[str]], str] = command_line_hint) -> tuple[dict[str, np.ndarray], Any]:
    """Random inputs that ``run`` accepts, and what it returned: the rounds are tried in turn.

    Raises :class:`SampleInputError` when none runs: it names the inputs whose sizes were chosen
    (``hint`` says how to give them) and the first round's failure. ``run``'s
    :class:`LiteError` is a round that failed; anything else is raised.
    """
    plan = _Plan(model, given or {})
    failures: list[tuple[dict[str, tuple[int, ...]], LiteError]] = []
    for shapes in plan.rounds(batch):
        feeds = plan.arrays(shapes, seed)
        try:
            return feeds, run(feeds)
        except LiteError as err:
            failures.append((shapes, err))
    error = SampleInputError(plan.explain(failures, hint))
    error.inputs = tuple(plan.chosen)
    raise error from failures[0][1]


class _Plan:
    """One model's inputs as its graph describes them; :meth:`rounds` sizes them."""

    def __init__(self, model: ir.Model, given: Mapping[str, tuple[int, ...]]) -> None:
        graph = model.main
        self.graph = graph
        self.specs = [TensorSpec.of(graph.tensors[index]) for index in graph.inputs]
        self.given = {name: tuple(shape) for name, shape in given.items()}
        self.samples = sample_shapes(model)
        self.values = sample_values(model)
        self.batch_dims = batch_names(self.specs)
        readers: dict[int, list[tuple[ir.Node, int]]] = {}
        for node in graph.nodes:
            for slot, index in enumerate(node.inputs):
                if index >= 0:
                    readers.setdefault(index, []).append((node, slot))
        self.hints = {spec.name: _hint(graph, readers, index, spec)
                      for spec, index in zip(self.specs, graph.inputs)}
        # Inputs with open sizes beyond the batch that neither the caller nor the file gives.
        self.chosen = [spec.name for spec in self.specs if self._fixed(spec) is None and spec.shape is not None
                       and any(not isinstance(dim, int) and dim not in self.batch_dims for dim in spec.shape[1:])]

    def _fixed(self, spec: TensorSpec, batch: int = 1) -> tuple[int, ...] | None:
        """The shape the caller gives, else the recorded one when it fits the signature."""
        if spec.name in self.given:
            return self.given[spec.name]
        sample = self.samples.get(spec.name)
        if sample is None or spec.shape is None or len(sample) != len(spec.shape) or any(
                isinstance(d, int) and d != s for d, s in zip(spec.shape, sample)):
            return None
        return concrete_shape(spec, batch, sample, self.batch_dims)

    def rounds(self, batch: int) -> Iterator[dict[str, tuple[int, ...]]]:
        """Input name -> shape, per round of :data:`_ROUNDS`; a round that repeats one is skipped."""
        seen = set()
        for sizes in _ROUNDS:
            shapes = self._shapes(batch, sizes)
            key = tuple(shapes.values())
            if key not in seen:
                seen.add(key)
                yield shapes

    def _shapes(self, batch: int, sizes: dict[str, int]) -> dict[str, tuple[int, ...]]:
        named: dict[str, int] = {}  # symbolic dimension -> size, shared by every input naming it
        fixed = {spec.name: self._fixed(spec, batch) for spec in self.specs}
        for spec in self.specs:  # given and recorded sizes first: the others follow their names
            if fixed[spec.name] is not None and spec.shape is not None:
                for dim, size in zip(spec.shape, fixed[spec.name]):
                    if isinstance(dim, str) and dim not in self.batch_dims:
                        named.setdefault(dim, size)
        shapes: dict[str, list[int | str]] = {}
        for spec in self.specs:
            if fixed[spec.name] is not None:
                shapes[spec.name] = list(fixed[spec.name])
                continue
            if spec.shape is None:
                raise InvalidInputError(f"input {spec.name!r} has unknown rank; give its shape with "
                                        f"--shape {spec.name}:D1,D2,...")
            shapes[spec.name] = [self._size(spec, axis, dim, batch, sizes, named)
                                 for axis, dim in enumerate(spec.shape)]
        return {name: tuple(size if isinstance(size, int) else _evaluate(size, named, sizes) for size in shape)
                for name, shape in shapes.items()}

    def _size(self, spec: TensorSpec, axis: int, dim: ir.Dim, batch: int, sizes: dict[str, int],
              named: dict[str, int]) -> int | str:
        """A size for one axis, or the expression naming it (evaluated once every name is sized)."""
        if isinstance(dim, int):
            return dim
        if axis == 0 or dim in self.batch_dims:
            return batch
        if dim in named:
            return named[dim]
        if isinstance(dim, str) and _names_of(dim):
            return dim
        hint = self.hints[spec.name]
        if hint.channels and axis in hint.channels:
            size = hint.channels[axis]
        elif isinstance(dim, str) and _SEQUENCE_NAME.search(dim):
            size = sizes["sequence"]
        elif axis in hint.image_axes or (spec.dtype is not None and spec.dtype.kind == "f"
                                         and len(spec.shape) == 4 and axis >= 2):
            size = sizes["image"]
        elif spec.dtype is not None and spec.dtype.kind in "iu":
            size = sizes["sequence"]
        else:
            size = sizes["other"]
        if isinstance(dim, str):
            named[dim] = size
        return size

    def arrays(self, shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        return {spec.name: _array(spec, shapes[spec.name], rng, self.hints[spec.name], self.values.get(spec.name))
                for spec in self.specs}

    def explain(self, failures: list[tuple[dict[str, tuple[int, ...]], LiteError]],
                hint: Callable[[list[str]], str]) -> str:
        """One line: what was tried, the first failure, and which sizes to give."""
        first = str(failures[0][1]).splitlines()[0][:300] if str(failures[0][1]) else type(failures[0][1]).__name__
        if not self.chosen:
            return (f"random inputs do not run the model ({first}); its inputs leave no sizes open to choose, "
                    f"so their values do not suit it: give real inputs (lite bench --input NAME=FILE)")
        tried = ", then ".join(" ".join(f"{name}{list(shapes[name])}" for name in self.chosen)
                               for shapes, _ in failures)
        return (f"random inputs do not run the model: input{'s' if len(self.chosen) > 1 else ''} "
                f"{', '.join(repr(name) for name in self.chosen)} took sizes the graph does not fix ({tried}), "
                f"and the first failed: {first}; give the sizes it runs on with {hint(self.chosen)}")


def _hint(graph: ir.Graph, readers: dict[int, list[tuple[ir.Node, int]]], index: int, spec: TensorSpec) -> _Hint:
    integer = spec.dtype is not None and spec.dtype.kind in "iub"
    high = None
    for node, slot in _uses(index, readers, INDEX_CARRYING_OPS):
        if node.op_type in ("Gather", "GatherElements") and slot == 1:
            rows = _rows(graph, node)
            high = rows if high is None else min(high, rows)
    channels, image_axes = _conv_axes(graph, readers, index, len(spec.shape or ()))
    return _Hint(high, integer and "mask" in spec.name.lower(), channels, image_axes)


def _uses(index: int, readers: dict[int, list[tuple[ir.Node, int]]],
          passing: frozenset[str]) -> Iterator[tuple[ir.Node, int]]:
    """The nodes that read tensor ``index``'s values, looking through the ``passing`` ops (their
    first input)."""
    pending, visited = [index], {index}
    while pending:
        for node, slot in readers.get(pending.pop(), []):
            yield node, slot
            if node.op_type in passing and slot == 0 and node.domain in ("", "ai.onnx"):
                for output in node.outputs:
                    if output >= 0 and output not in visited and len(visited) < _WALK_LIMIT:
                        visited.add(output)
                        pending.append(output)


def _rows(graph: ir.Graph, node: ir.Node) -> int:
    """The size of the axis a Gather indexes, of its data input; :data:`_UNKNOWN_TABLE_ROWS` if unknown."""
    axis = node.attributes["axis"].value if "axis" in node.attributes else 0
    shape = _shape_of(graph.tensors[node.inputs[0]])
    if shape is not None and -len(shape) <= axis < len(shape) and isinstance(shape[axis], int) and shape[axis] > 0:
        return shape[axis]
    return _UNKNOWN_TABLE_ROWS


def _shape_of(tensor: ir.Tensor) -> tuple[ir.Dim, ...] | None:
    return tuple(tensor.data.shape) if tensor.data is not None else tensor.shape


def _conv_axes(graph: ir.Graph, readers: dict[int, list[tuple[ir.Node, int]]], index: int,
               rank: int) -> tuple[dict[int, int] | None, frozenset[int]]:
    """Where a Conv reads input ``index`` (through elementwise ops and Transposes): {the input's
    axis that is its channels: the channels its weight expects}, and the input's axes that are
    its spatial ones."""
    pending, visited = [(index, tuple(range(rank)))], {index}
    while pending:
        current, axes = pending.pop()  # axes[a]: where the input's axis a is in ``current``
        for node, slot in readers.get(current, []):
            if slot != 0 or node.domain not in ("", "ai.onnx") or not node.outputs or node.outputs[0] < 0:
                continue
            if node.op_type in ("Conv", "ConvTranspose"):
                channels = _conv_channels(graph, node)
                channel_axes = {a: channels for a, at in enumerate(axes) if at == 1 and channels is not None}
                return channel_axes, frozenset(a for a, at in enumerate(axes) if at >= 2)
            moved = _moved_axes(node, axes)
            if moved is not None and node.outputs[0] not in visited and len(visited) < _WALK_LIMIT:
                visited.add(node.outputs[0])
                pending.append((node.outputs[0], moved))
    return None, frozenset()


def _moved_axes(node: ir.Node, axes: tuple[int, ...]) -> tuple[int, ...] | None:
    """Where the input's axes are in ``node``'s output, for ops that keep or permute them."""
    if node.op_type in _AXIS_KEEPING_OPS:
        return axes
    if node.op_type == "Transpose" and "perm" in node.attributes:
        perm = list(node.attributes["perm"].value)
        if sorted(perm) == list(range(len(axes))):
            return tuple(perm.index(at) for at in axes)
    return None


def _conv_channels(graph: ir.Graph, node: ir.Node) -> int | None:
    """The input channels ``node``'s weight expects; None when its shape is unknown."""
    weight = _shape_of(graph.tensors[node.inputs[1]]) if len(node.inputs) > 1 and node.inputs[1] >= 0 else None
    if weight is None or len(weight) < 2:
        return None
    if node.op_type == "ConvTranspose":  # weight [C, M/group, ...]
        return weight[0] if isinstance(weight[0], int) else None
    group = node.attributes["group"].value if "group" in node.attributes else 1
    return weight[1] * group if isinstance(weight[1], int) else None  # weight [M, C/group, ...]


def _names_of(expression: str) -> list[str]:
    """The dimension names an arithmetic expression of them reads (``a + b``); [] for a plain name
    or anything that is not such an expression."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        return []
    if isinstance(tree.body, ast.Name):
        return []
    allowed = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.Add, ast.Sub,
               ast.Mult, ast.FloorDiv, ast.Div, ast.USub)
    nodes = list(ast.walk(tree))
    if not all(isinstance(node, allowed) for node in nodes):
        return []
    if any(isinstance(node, ast.Constant) and type(node.value) is not int for node in nodes):
        return []
    return [node.id for node in nodes if isinstance(node, ast.Name)]


def _evaluate(expression: str, named: dict[str, int], sizes: dict[str, int]) -> int:
    """An expression dimension's size from its names' sizes; a name nothing else sizes gets one
    by its role, as an axis named so would."""
    for name in _names_of(expression):
        if name not in named:
            named[name] = sizes["sequence"] if _SEQUENCE_NAME.search(name) else sizes["other"]
    return max(1, _arithmetic(ast.parse(expression, mode="eval").body, named))


def _arithmetic(node: ast.AST, named: dict[str, int]) -> int:
    if isinstance(node, ast.Name):
        return named[node.id]
    if isinstance(node, ast.Constant):
        return int(node.value)
    if isinstance(node, ast.UnaryOp):
        return -_arithmetic(node.operand, named)
    left, right = _arithmetic(node.left, named), _arithmetic(node.right, named)
    if isinstance(node.op, ast.Add):
        return left + right
    if isinstance(node.op, ast.Sub):
        return left - right
    if isinstance(node.op, ast.Mult):
        return left * right
    return left // right if right else 1


def _array(spec: TensorSpec, shape: tuple[int, ...], rng: np.random.Generator, hint: _Hint,
           value: int | bool | None) -> np.ndarray:
    """Random values of ``spec``'s type as ``hint`` bounds them; ``value`` everywhere where recorded."""
    dtype = spec.dtype or np.dtype(np.float32)
    if value is not None and dtype.kind in "iub":
        return np.full(shape, value, dtype)
    if hint.ones and dtype.kind in "iub":
        return np.ones(shape, dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        return rng.integers(0, hint.high or _INTEGER_HIGH, shape).astype(dtype)
    raise InvalidInputError(f"cannot make random data for input {spec.name!r} of dtype {dtype}; pass it with --input")
