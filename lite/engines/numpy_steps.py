"""The numpy engine's planned nodes (:class:`_Step`), how a kernel's failure is reported, and the
nodes computed from tensor shapes alone, whose results a run looks up instead of computing
(:func:`_plan_shape_memos`); :mod:`lite.engines.numpy_engine` plans and runs them."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lite.errors import KernelError, LiteError
from lite.format import ir
from lite.ops.registry import SMALL_ARRAY_BYTES, normalize_domain
from lite.plan_cache import PlanCache

# Load-time constant folding runs deterministic ONNX ops only.
_FOLDABLE_DOMAINS = {"", "ai.onnx.ml"}
_NOT_FOLDABLE = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Bernoulli",
                 "Multinomial", "Dropout"}


@dataclass
class _Step:
    node: ir.Node
    fn: Callable
    inputs: list[int]
    outputs: list[int]
    attributes: dict[str, Any]
    graph_attributes: dict[str, Any]  # name -> graph index or list of indices
    output_count: int | None
    activation: tuple[str, tuple[float, ...]] | None
    # True when the kernel applies ``activation`` itself (keyword-only ``fused_activation``).
    kernel_applies_activation: bool = False
    wants_allocate: bool = False
    custom: bool = False  # a user's kernel (lite.CustomOps): never run at load time
    release: list[int] = field(default_factory=list)
    # The kernel's load-time work on constant inputs and its result (lite.ops.registry).
    prepare: Callable | None = None
    prepared: Any = None
    # The keyword arguments of every call but ``allocate`` and subgraph bodies, built when the
    # step is planned and again once prepared: a small model's run is mostly per-node overhead.
    keywords: dict[str, Any] = field(default_factory=dict)
    # Input positions in a run's value list, an omitted input reading its last slot (always
    # None); and whether the run loop may call the kernel inline (one output, no subgraph, no
    # activation left to the engine).
    slots: list[int] = field(default_factory=list)
    inline: bool = False
    # A node computed from tensor shapes alone (see _plan_shape_memos): the Shape/Size outputs it
    # depends on, and its results by their values.
    memo_sources: list[int] = field(default_factory=list)
    memo: PlanCache[np.ndarray] | None = None

    def __post_init__(self) -> None:
        self.finish()
        self.inline = (not self.graph_attributes and len(self.outputs) == 1 and self.outputs[0] >= 0
                       and (self.activation is None or self.kernel_applies_activation))

    def finish(self) -> None:
        keywords = dict(self.attributes)
        if self.output_count is not None:
            keywords["output_count"] = self.output_count
        if self.kernel_applies_activation:
            keywords["fused_activation"] = self.activation
        if self.prepared is not None:
            keywords["prepared"] = self.prepared
        self.keywords = keywords



def _plan_shape_memos(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> None:
    """Mark the nodes computed from tensor shapes alone, so runs reuse their results.

    Exported transformers recompute masks, positions and target shapes from ``Shape`` on every
    call: Shape -> Gather -> Unsqueeze -> Concat -> Reshape's shape input, Range -> Expand for
    position ids, a causal mask from the sequence length. A deterministic node whose inputs are
    constants or such values gives the same result for the same values of the Shape (and Size)
    outputs it depends on, so a run looks its result up by those (a few int64 each) instead of
    running it: a quarter of the nodes of a small BERT or GPT-2. Graph outputs are never
    remembered (the caller may write into them), nor results above SMALL_ARRAY_BYTES.
    """
    sources: dict[int, frozenset[int]] = {}  # tensor -> the Shape/Size outputs it is computed from
    for step in steps:
        if (step.custom or step.graph_attributes or normalize_domain(step.node.domain) not in _FOLDABLE_DOMAINS
                or step.node.op_type in _NOT_FOLDABLE):
            continue
        if step.node.op_type in ("Shape", "Size"):
            sources.update((index, frozenset([index])) for index in step.outputs if index >= 0)
            continue
        computed = [index for index in step.inputs if index >= 0 and index not in constants]
        if not step.inline or not computed or not all(index in sources for index in computed):
            continue
        if step.outputs[0] in graph_outputs:
            continue
        depends = frozenset().union(*(sources[index] for index in computed))
        step.memo_sources = sorted(depends)
        step.memo = PlanCache()
        sources[step.outputs[0]] = depends
    steps[:] = _fold_shapes(_group_memos(steps), graph_outputs)
    _share_memos(steps, constants)


def _group_memos(steps: list[_Step]) -> list[_Step]:
    """``steps`` with each remembered step moved up to just after the last step computing one
    of its inputs (they read Shape outputs, constants and each other's results alone), and
    each run of two or more of them then made one step (:class:`_MemoGroup`) that looks its
    results up together: a BERT's 25 remembered nodes become three steps, each one lookup."""
    # Each remembered step follows the last other step it reads from (-1: none, the start).
    anchor_of: dict[int, int] = {}  # tensor -> the position (in steps) of that anchor
    after: dict[int, list[_Step]] = {}
    for position, step in enumerate(steps):
        anchor = position
        if step.memo is not None:
            anchor = max([anchor_of[index] for index in step.inputs if index in anchor_of], default=-1)
            after.setdefault(anchor, []).append(step)
        for index in step.outputs:
            if index >= 0:
                anchor_of[index] = anchor
    ordered = list(after.get(-1, []))
    for position, step in enumerate(steps):
        if step.memo is None:
            ordered.append(step)
            ordered.extend(after.get(position, []))
    grouped: list[_Step] = []
    run: list[_Step] = []
    for step in [*ordered, None]:
        if step is not None and step.memo is not None:
            run.append(step)
            continue
        if len(run) > 1:
            grouped.append(_MemoGroup.step(run))
        else:
            grouped.extend(run)
        run = []
        if step is not None:
            grouped.append(step)
    return grouped


def _fold_shapes(steps: list[_Step], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` without the Shape nodes that only groups of remembered steps read: each such
    group reads the Shape's input instead and looks its results up by that input's shape (a
    tuple numpy keeps, not an int64 array made and turned into bytes on every run), computing the
    Shape's output itself when it looks them up in vain. A small BERT's three Shape nodes."""
    readers: dict[int, list[_Step]] = {}
    for step in steps:
        for index in {*step.inputs, *step.memo_sources}:
            readers.setdefault(index, []).append(step)
    kept = []
    for step in steps:
        output = step.outputs[0] if len(step.outputs) == 1 else -1
        if (step.node.op_type == "Shape" and not step.node.domain and not step.custom and step.inline
                and step.activation is None and len(step.inputs) == 1 and step.inputs[0] >= 0 and output >= 0
                and output not in graph_outputs and readers.get(output)
                and all(type(reader.fn) is _MemoGroup for reader in readers[output])):
            for reader in readers[output]:
                reader.fn.read_shape(step)
                reader.inputs = reader.slots = reader.fn.inputs
            continue
        kept.append(step)
    return kept


def _share_memos(steps: list[_Step], constants: dict[int, Any]) -> None:
    """Give groups that compute the same results from the same key one memo: a transformer's
    layers each work out the same reshape targets from their own Shape nodes (a small BERT's 21
    groups are 11 computations), so a new input shape is computed once per computation, not once
    per layer."""
    shared: dict[tuple, PlanCache] = {}
    made_by: dict[int, tuple[tuple, int, list[int]]] = {}  # tensor -> (its group's signature, place, key)
    for step in steps:
        if type(step.fn) is not _MemoGroup:
            continue
        signature = step.fn.signature(constants, made_by)
        if signature is None:
            continue
        step.fn.memo = shared.setdefault(signature, step.fn.memo)
        key = [step.fn.inputs[position] for position in step.fn.keys]
        made_by.update((output, (signature, place, key)) for place, output in enumerate(step.outputs) if output >= 0)


class _MemoGroup:
    """The kernel of consecutive remembered steps: their results looked up at once by the values
    of the Shape outputs they depend on, or computed one after the other and remembered (as
    :func:`_remember` does for one step; a result it would not keep is computed on every run)."""

    def __init__(self, steps: list[_Step], inputs: list[int], sources: list[int]) -> None:
        self.steps = steps
        self.inputs = inputs
        self.keys = [inputs.index(index) for index in sources]  # argument positions of the sources
        # Shape nodes folded into the group (_fold_shapes): argument position -> (the Shape's
        # step, its output); the argument is the Shape's input, its key part that input's shape.
        self.shapes: dict[int, tuple[_Step, int]] = {}
        # key -> (whether every result is kept, the results kept or None)
        self.memo: PlanCache[tuple[bool, tuple[Any, ...]]] = PlanCache()

    @staticmethod
    def step(run: list[_Step]) -> _Step:
        produced = {index for step in run for index in step.outputs}
        inputs = sorted({index for step in run for index in step.inputs if index >= 0 and index not in produced}
                        | {index for step in run for index in step.memo_sources})
        sources = sorted({index for step in run for index in step.memo_sources})
        group = _MemoGroup(run, inputs, sources)
        outputs = [step.outputs[0] for step in run]
        return _Step(run[-1].node, group, inputs, outputs, {}, {}, None, None, slots=inputs)

    def read_shape(self, shape: _Step) -> None:
        """Read the input of ``shape`` (a Shape step whose output this group reads) in place of
        its output, and key by that input's shape."""
        output = shape.outputs[0]
        position = self.inputs.index(output)
        self.inputs = [shape.inputs[0] if index == output else index for index in self.inputs]
        self.shapes[position] = (shape, output)

    def signature(self, constants: dict[int, Any], made_by: dict[int, tuple[tuple, int, list[int]]]) -> tuple | None:
        """What the group computes from its key, the same for groups that give the same results
        for the same key: each step's kernel, keywords and operands (a constant by its value, a
        part of the key by its place, a step's result by the step's place, an earlier group's
        result (``made_by``) by that group's signature and where its key is in this one's);
        None where an operand is none of these."""
        produced = {index: (position, slot) for position, step in enumerate(self.steps)
                    for slot, index in enumerate(step.outputs) if index >= 0}
        key = [self.inputs[position] for position in self.keys]  # a folded Shape's input (read_shape)
        sources = {index: ("source", place) for place, index in enumerate(key) if self.keys[place] not in self.shapes}
        for place, position in enumerate(self.keys):
            if position in self.shapes:
                shape, output = self.shapes[position]
                sources[output] = ("shape", place, _frozen(shape.keywords))
        signature = []
        for step in self.steps:
            operands = []
            for index in step.inputs:
                if index < 0:
                    operands.append(None)
                elif index in produced:
                    operands.append(("result", produced[index]))
                elif index in sources:
                    operands.append(sources[index])
                elif type(constants.get(index)) is np.ndarray and constants[index].nbytes <= SMALL_ARRAY_BYTES:
                    operands.append(("constant", _frozen(constants[index])))
                elif index in made_by and set(made_by[index][2]) <= set(key):
                    group, place, its_key = made_by[index]
                    operands.append(("group", group, place, tuple(key.index(part) for part in its_key)))
                else:
                    return None
            signature.append((step.fn, _frozen(step.keywords), tuple(operands), len(step.outputs)))
        return tuple(signature)

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        if self.shapes:
            key = tuple([np.shape(args[position]) if position in self.shapes else args[position].tobytes()
                         for position in self.keys])
        else:
            key = tuple([args[position].tobytes() for position in self.keys])
        entry = self.memo.get(key)
        if entry is not None and entry[0]:
            return entry[1]
        known = None if entry is None else entry[1]
        values = dict(zip(self.inputs, args))
        for position, (shape, output) in self.shapes.items():
            try:
                values[output] = shape.fn(args[position], **shape.keywords)
            except Exception as err:
                raise _failure(shape, [args[position]], err) from err
        results = []
        for position, step in enumerate(self.steps):
            if known is not None and known[position] is not None:
                result = known[position]
            else:
                step_args = [values[i] if i >= 0 else None for i in step.inputs]
                try:
                    result = step.fn(*step_args, **step.keywords)
                except Exception as err:
                    raise _failure(step, step_args, err) from err
                result = result[0] if type(result) is tuple else result
            values[step.outputs[0]] = result
            results.append(result)
        if known is None:
            kept = tuple([_kept(result) for result in results])
            self.memo.put(key, (all(value is not None for value in kept), kept),
                          sum(value.nbytes for value in kept if value is not None))
        return tuple(results)


def _frozen(value: Any) -> Hashable:
    """``value`` (keywords, a constant) as a key that is equal for equal values; an object of
    another kind by its identity."""
    if isinstance(value, dict):
        return tuple(sorted((name, _frozen(item)) for name, item in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *map(_frozen, value))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if value is None or isinstance(value, (bool, int, float, str, bytes, np.generic)):
        return (type(value).__name__, value)
    return ("object", id(value))


def _remember(step: _Step, key: tuple[bytes, ...], result: Any) -> None:
    memo = step.memo
    kept = _kept(result)
    if kept is None or memo is None:
        return
    memo.put(key, kept, kept.nbytes)


def _kept(result: Any) -> np.ndarray | None:
    """A read-only copy of ``result`` to remember (the result may live in the arena, reused by
    later runs), or None if it is not a small array."""
    if not isinstance(result, np.ndarray) or result.nbytes > SMALL_ARRAY_BYTES:
        return None
    kept = np.array(result)
    kept.flags.writeable = False
    return kept


def _failure(step: _Step, args: list[Any], err: Exception) -> LiteError:
    """The error to raise from ``err``, a kernel's failure: a LiteError of the same type naming
    the node, or a KernelError naming the node and its inputs' types and shapes (the cause kept
    by ``raise ... from err``)."""
    if isinstance(err, LiteError):
        named = type(err)(f"node {step.node.name!r} ({step.node.op_type}): {err}")
        if isinstance(named, KernelError):
            named.node = step.node
        return named
    shapes = ", ".join("-" if a is None else f"{getattr(a, 'dtype', type(a).__name__)}{list(np.shape(a))}"
                       for a in args)
    failed = KernelError(
        f"node {step.node.name!r} ({step.node.op_type}) failed on inputs [{shapes}]: {type(err).__name__}: {err}"
    )
    failed.node = step.node
    return failed


def run_program(steps: list[_Step], allocate: Callable) -> list[tuple[Any, ...]]:
    """The run loop's view of ``steps``: for each, (its kernel, or None where the loop must look
    at the step: a remembered result, a group of them, or a call through the engine's _execute; its input slots; its keyword
    arguments, ``allocate`` among them where it takes it; its output; the values it releases;
    the step), so that a step costs the loop one tuple unpacking instead of a dozen attribute
    reads."""
    program = []
    for step in steps:
        keywords = {**step.keywords, "allocate": allocate} if step.wants_allocate else step.keywords
        plain = step.inline and step.memo is None
        program.append((step.fn if plain else None, step.slots, keywords,
                        step.outputs[0] if step.inline else None, tuple(step.release), step))
    return program


def prepare(step: _Step, constants: dict[int, Any], graph: ir.Graph) -> Any:
    """The kernel's load-time work for this node (see lite.ops.registry), None if it has none."""
    values = [constants.get(index) if index >= 0 else None for index in step.inputs]
    shapes = [None if index < 0 or graph.tensors[index].shape is None else tuple(graph.tensors[index].shape)
              for index in step.inputs]
    try:
        return step.prepare(values, shapes, **step.attributes)
    except (LiteError, TypeError, ValueError, IndexError, ArithmeticError):
        # Preparing only saves time: the kernel runs without it, and there reports malformed
        # attributes (a fuzzed kernel_shape of 3 instead of [3, 3]) as the typed error they are.
        return None


def bind_prepared(step: _Step) -> None:
    """Call the kernel's prepared value bound to the step's keywords where it offers that (see
    lite.ops.registry): a prepared Conv then runs without its nine keywords passed and checked
    on every call (a 64x64 MobileNet's run is about fifty of them)."""
    bind = getattr(step.prepared, "bind", None)
    if bind is None or not step.inline or step.custom or step.output_count is not None:
        return
    bound = bind(dict(step.attributes), step.activation if step.kernel_applies_activation else None)
    if bound is not None:
        step.fn = bound
        step.keywords = {}
