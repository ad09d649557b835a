"""The numpy engine's attention fusion: a scaled dot-product attention block as one step.

Exporters write a transformer's attention as a dozen small nodes (torch.export: BERT, GPT-2,
T5, Llama, the vision transformers), each run on a few thousand values, where a node's fixed
cost outweighs its arithmetic::

    q ─► [Reshape ─► Transpose] ─────────┐
    k ─► [Reshape ─► Transpose] ─► MatMul(q, kᵀ) ─► [Mul | Div by a scalar] ─► [Add m₁] ─► [Add m₂]
                                                                                  │
    v ─► [Reshape ─► Transpose] ───────────────────────────────┐                  ▼
                                          y ◄─ [Reshape ◄─ Transpose] ◄─ MatMul(p, v) ◄─ Softmax(-1)

becomes one step computing ``softmax(q kᵀ · s + m₁ + m₂) v`` with the same numpy operations in
the same order (the products, the scale and the masks added in place into the scores, the
softmax of :mod:`lite.ops.softmax` in place), the head reshapes and transposes as views.
Bracketed nodes are optional; every node of the block but the last must have a single reader
and not be a graph output. At run time, inputs the fused step does not handle (an integer or
mixed element type, a rank other than 4 after the head split, masks that broadcast the scores
to a larger shape) run the original kernels one after the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_attention_operands import parts_of_split, split_heads
from lite.engines.numpy_attention_plan import AttentionPlan, apply_operations, plan_attention, shape_after
from lite.engines.numpy_patterns import (
    FLOATS,
    MATMUL,
    RESHAPE,
    TRANSPOSE,
    Graph,
    ReshapeTargets,
    broadcasts_to,
    float_scalar,
    is_kernel,
    plain,
    run_block,
)
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step


def fuse_attention(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with every attention block (module docstring) replaced by one step."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if step.node.op_type != "Softmax" or not plain(step, 1):
            continue
        block, _reason = match_attention(step, graph, constants)
        if block is None or any(id(s) in dropped or id(s) in fused for s in block.steps):
            continue
        last = block.steps[-1]
        fused[id(last)] = replace(
            last, fn=FusedAttention(block, constants), inputs=block.inputs, outputs=[block.output],
            attributes={}, output_count=None, activation=None, kernel_applies_activation=False,
            wants_allocate=True, prepare=None, prepared=None, memo=None, memo_sources=[])
        dropped.update(id(s) for s in block.steps[:-1])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


@dataclass
class AttentionBlock:
    """The matched steps (in graph order, the last computing the output) and how to compute them."""

    steps: list[_Step]
    inputs: list[int]  # tensor indices: the q, k, v sources, then the masks, then the shapes reshapes read
    output: int
    # For q, k and v, from its source: ("Reshape", shape input position), ("Transpose", perm),
    # ("Mul", constant scalar), each a node of the block.
    heads: list[list[tuple[str, Any]]] = field(default_factory=list)
    scale: np.ndarray | None = None
    divide: bool = False  # the scale divides (Div) instead of multiplying
    masks: list[int] = field(default_factory=list)  # input positions of the added masks
    merge: tuple[list[int], int] | None = None  # the output Transpose's perm, the Reshape's shape position
    # Where(IsNaN(p), fill, p) after the softmax (torch's decomposed scaled_dot_product_attention): fill.
    nan_fill: np.ndarray | None = None


_SCORE_STEPS = ("MatMul", "Mul", "Div", "Add")


def match_attention(softmax: _Step, graph: Graph, constants: dict[int, Any]) -> tuple[AttentionBlock | None, str]:
    """The attention block around ``softmax``, or None and the reason it is not one."""
    if not is_kernel(softmax.fn, "softmax", "Softmax") or softmax.attributes.get("axis", -1) != -1:
        return None, "not a Softmax over the last axis (opset 13 on)"
    # Backwards from the softmax: up to two adds, a scale, the scores' product.
    chain: list[_Step] = []
    masks: list[int] = []
    current = softmax.inputs[0]
    for _ in range(2):
        add = graph.producer(current, "Add", 2)
        if add is None:
            break
        scored = [p for p in (0, 1) if _scores_side(add.inputs[p], graph) and not _scores_side(add.inputs[1 - p], graph)]
        if len(scored) != 1 or add.inputs[0] == add.inputs[1]:
            return None, "an Add before the softmax adds no mask to the scores"
        current, mask = add.inputs[scored[0]], add.inputs[1 - scored[0]]
        chain.append(add)
        masks.append(mask)
    scale, divide = None, False
    for op_type, positions in (("Mul", (1, 0)), ("Div", (1,))):
        step = graph.producer(current, op_type, 2)
        if step is None:
            continue
        for position in positions:
            value = constants.get(step.inputs[position])
            # A scalar, or a per-head scale (SwinV2's logit scale) checked against the scores' shape when run.
            if isinstance(value, np.ndarray) and value.dtype in FLOATS and step.inputs[1 - position] not in constants:
                scale, divide = value, op_type == "Div"
                current = step.inputs[1 - position]
                chain.append(step)
                break
        if scale is None:
            return None, f"the scores' {op_type} is not by a float constant"
    scores = graph.producer(current, "MatMul", 2, MATMUL)
    if scores is None:
        return None, "the softmax's input is not a product of two tensors (MatMul, scale, mask adds)"
    chain.append(scores)
    probabilities, guard, nan_fill = softmax.outputs[0], [], None
    nan_guard = _nan_guard(softmax, graph, constants)
    if nan_guard is not None:
        guard, nan_fill = nan_guard
        probabilities = guard[-1].outputs[0]
    context = graph.only_reader(probabilities, "MatMul", 2, MATMUL)
    if context is None:
        return None, "the softmax's output is not read by one product, as its left operand"
    steps = chain[::-1] + [softmax, *guard, context]
    inputs: list[int] = []
    chains = []
    for source in (scores.inputs[0], scores.inputs[1], context.inputs[1]):
        head_steps, origin, operations = split_heads(source, graph, constants)
        steps += head_steps
        inputs.append(origin)
        chains.append(operations)
    split = parts_of_split(inputs, graph, constants)
    if split is not None:  # q, k or v cut from one tensor by a Split: views of that tensor
        step, windows = split
        steps.append(step)
        for position, origin in enumerate(inputs):
            if origin in windows:
                chains[position] = [windows[origin], *chains[position]]
                inputs[position] = step.inputs[0]
    mask_positions = list(range(3, 3 + len(masks)))
    inputs += masks[::-1]  # in the order they are added
    heads = []
    for operations in chains:
        resolved = []
        for kind, argument in operations:
            if kind == "Reshape":  # the shape tensor becomes an input of the fused step
                resolved.append((kind, len(inputs)))
                inputs.append(argument)
            else:
                resolved.append((kind, argument))
        heads.append(resolved)
    merge = None
    output = context.outputs[0]
    transpose = graph.only_reader(output, "Transpose", 1, TRANSPOSE)
    if transpose is not None and transpose.attributes.get("perm"):
        reshape = graph.only_reader(transpose.outputs[0], "Reshape", 2, RESHAPE)
        if reshape is not None:
            merge = (list(transpose.attributes["perm"]), len(inputs))
            inputs.append(reshape.inputs[1])
            steps += [transpose, reshape]
            output = reshape.outputs[0]
    steps.sort(key=lambda step: graph.position[id(step)])
    last = steps[-1]
    if output not in last.outputs:
        return None, "the block's output is not computed by its last node"
    # Every input must be there when the fused step runs, where the block's last node ran.
    for index in inputs:
        producer = graph.producer_of.get(index)
        if producer is not None and graph.position[id(producer)] > graph.position[id(last)]:
            return None, "an input of the block is computed after it"
    return AttentionBlock(steps, inputs, output, heads, scale, divide, mask_positions, merge, nan_fill), ""


def _scores_side(index: int, graph: Graph, depth: int = 3) -> bool:
    """Whether ``index`` is computed, through at most ``depth`` single-reader Mul, Div or Add
    nodes, from a MatMul (the scores, not a mask computed beside them)."""
    step = graph.producer_of.get(index)
    if step is None or not graph.single(index) or step.memo is not None:
        return False
    if step.node.op_type == "MatMul":
        return True
    if step.node.op_type not in _SCORE_STEPS or depth == 0:
        return False
    return any(_scores_side(i, graph, depth - 1) for i in step.inputs if i >= 0)


def _nan_guard(softmax: _Step, graph: Graph, constants: dict[int, Any]):
    """(IsNaN, Where) steps computing ``Where(IsNaN(p), fill, p)`` from the softmax's output p,
    and the constant scalar fill; None if the softmax is not read so."""
    p = softmax.outputs[0]
    readers = graph.readers_of.get(p, [])
    if len(readers) != 2 or p in graph.graph_outputs:
        return None
    isnan = next((r for r in readers if r.node.op_type == "IsNaN"), None)
    where = next((r for r in readers if r.node.op_type == "Where"), None)
    if isnan is None or where is None or not plain(isnan, 1) or not plain(where, 3):
        return None
    fill = constants.get(where.inputs[1])
    if (where.inputs[0] != isnan.outputs[0] or where.inputs[2] != p or not graph.single(isnan.outputs[0])
            or not float_scalar(fill) or not graph.single(where.outputs[0])):
        return None
    return [isnan, where], fill


class FusedAttention:
    """The fused step's kernel (see the module docstring)."""

    def __init__(self, block: AttentionBlock, constants: dict[int, Any]) -> None:
        from lite.ops.softmax import softmax_last_axis

        self.softmax = softmax_last_axis
        self.block = block
        self.constants = constants
        self.scale = block.scale
        self.targets = ReshapeTargets()
        # The shape tensors the block's reshapes read (argument positions).
        self.shape_positions = sorted({argument for operations in block.heads for kind, argument in operations
                                       if kind == "Reshape"} | ({block.merge[1]} if block.merge else set()))
        # Per q, k and v shapes and q's type: the computation checked once (None: declined).
        self.plans: PlanCache[AttentionPlan | None] = PlanCache()

    def __call__(self, *args: Any, allocate: Callable = np.empty) -> np.ndarray:
        q, k, v = args[0], args[1], args[2]
        if type(q) is np.ndarray and type(k) is np.ndarray and type(v) is np.ndarray:
            key = (q.shape, k.shape, v.shape, q.dtype)
            plan = self.plans.get(key, _UNPLANNED)
            if plan is _UNPLANNED:
                plan = self.plans.put(key, plan_attention(self, args))
            if plan is not None and plan.accepts(args):
                return plan.run(args)
        return self._unplanned(args, allocate)

    def _unplanned(self, args: tuple[Any, ...], allocate: Callable) -> np.ndarray:
        """The fused computation with every check made on this call."""
        block = self.block
        q, k, v = self._split(args, 0), self._split(args, 1), self._split(args, 2)
        if (q is None or k is None or v is None or q.ndim != 4 or k.ndim != 4 or v.ndim != 4
                or q.dtype not in FLOATS or k.dtype != q.dtype or v.dtype != q.dtype
                or (self.scale is not None and self.scale.dtype != q.dtype) or not (q.size and k.size and v.size)):
            return self._in_turn(args, allocate)
        scores = np.matmul(q, k)
        if self.scale is not None:
            if not broadcasts_to(self.scale.shape, scores.shape):
                return self._in_turn(args, allocate)
            if block.divide:
                np.divide(scores, self.scale, out=scores)
            else:
                np.multiply(scores, self.scale, out=scores)
        for position in block.masks:
            mask = args[position]
            if type(mask) is not np.ndarray or mask.dtype != scores.dtype or not broadcasts_to(mask.shape, scores.shape):
                return self._in_turn(args, allocate)
            np.add(scores, mask, out=scores)
        probabilities = self.softmax(scores)
        if block.nan_fill is not None:
            if block.nan_fill.dtype != probabilities.dtype or block.nan_fill.ndim > probabilities.ndim:
                return self._in_turn(args, allocate)
            nan = np.isnan(probabilities)
            if nan.any():
                probabilities = np.where(nan, block.nan_fill, probabilities)
        if block.merge is None:
            return np.matmul(probabilities, v)
        perm, shape_position = block.merge
        context = np.matmul(probabilities, v)
        target = self.targets(context.shape, args[shape_position], perm)
        if target is None:
            return self._in_turn(args, allocate)
        return context.transpose(perm).reshape(target)

    def resolve(self, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """For q, k and v, the operations of _split with each Reshape's target resolved, then
        the merge's reshape target (None where it fails), its perm's inverse and the product's
        shape it was resolved for; None where an operation would fail."""
        q, v = args[0], args[2]
        operations = [self._head_operations(args, position) for position in (0, 1, 2)]
        if any(resolved is None for resolved in operations):
            return None
        merged, inverse, context = None, None, None
        if self.block.merge is not None:
            perm, shape_position = self.block.merge
            rows, columns = shape_after(q.shape, operations[0]), shape_after(v.shape, operations[2])
            context = rows[:-2] + rows[-2:-1] + columns[-1:]  # checked against the product's shape when run
            if sorted(perm) == list(range(len(context))):
                merged = self.targets(context, args[shape_position], perm)
                inverse = tuple(int(axis) for axis in np.argsort(perm))
        return operations, merged, inverse, context

    def _split(self, args: tuple[Any, ...], position: int) -> np.ndarray | None:
        """q, k or v after the nodes between its source and the product (Reshape and Transpose
        as views); None where they would fail."""
        value = args[position]
        if type(value) is not np.ndarray:
            return None
        operations = self._head_operations(args, position)
        return None if operations is None else apply_operations(value, operations)

    def _head_operations(self, args: tuple[Any, ...], position: int) -> list[tuple[str, Any]] | None:
        """The nodes between q, k or v and the product with each Reshape's target resolved for
        this call's shapes (see _apply); None where a Reshape or Transpose would fail."""
        shape = args[position].shape
        resolved: list[tuple[str, Any]] = []
        for kind, argument in self.block.heads[position]:
            if kind == "Reshape":
                target = self.targets(shape, args[argument])
                if target is None:
                    return None
                resolved.append((kind, target))
                shape = target
            elif kind == "Transpose":
                if len(argument) != len(shape):
                    return None
                resolved.append((kind, tuple(argument)))
                shape = tuple(shape[axis] for axis in argument)
            elif kind in ("Part", "Chunk"):
                axis = argument[0]
                if not -len(shape) <= axis < len(shape):
                    return None
                axis %= len(shape)
                if kind == "Part":
                    _, start, stop, total = argument
                    if shape[axis] != total:
                        return None
                else:  # the Split kernel's num_outputs parts: ceil(length / count), the last one smaller
                    _, part, count = argument
                    chunk = -(-shape[axis] // count)
                    start, stop = part * chunk, (part + 1) * chunk if part < count - 1 else shape[axis]
                    if shape[axis] - chunk * (count - 1) < 0:
                        return None
                resolved.append(("Part", (slice(None),) * axis + (slice(start, stop),)))
                shape = shape[:axis] + (stop - start,) + shape[axis + 1:]
            else:
                resolved.append((kind, argument))
        return resolved

    def _in_turn(self, args: tuple[Any, ...], allocate: Callable) -> np.ndarray:
        """The block's own kernels one after the other."""
        return run_block(self.block.steps, dict(zip(self.block.inputs, args)), self.constants, allocate)


_UNPLANNED = object()  # a plans entry not worked out yet
