"""The numpy engine's product epilogue fusion: a MatMul and the reshapes and elementwise updates
that only its result goes through, as one step.

Exporters follow a linear layer with nodes that each make one pass over its small output: a
batch norm folded to a per-channel Mul and Add between two Reshapes (LeViT), the residual Add
of a pre-norm transformer (GPT-2, ViT)::

    x ─► MatMul(·, W) [+ bias] ─► Reshape ─► Mul(·, s) ─► Add(·, t) ─► Reshape ─► Add(·, r) ─► y

becomes one step: the product (the MatMul's or Gemm's own kernel, with its fused bias), then each node's
operation on it: Reshape and Transpose as views, and Add, Sub, Mul or Div by a constant or by
another tensor written into the product in place when the other operand has the element type
and does not enlarge the shape (the same numpy operation as the node's kernel, into a buffer
nobody else reads), through the node's own kernel otherwise.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lite.engines.numpy_patterns import (
    MATMUL,
    RESHAPE,
    TRANSPOSE,
    Graph,
    ReshapeTargets,
    broadcasts_to,
    is_kernel,
    plain,
)
from lite.plan_cache import PlanCache

if TYPE_CHECKING:
    from lite.engines.numpy_steps import _Step

_UFUNCS = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}
# broadcasts_to of the shapes a run sees (a few per model), looked up instead of compared again.
_broadcasts_to = functools.lru_cache(maxsize=1024)(broadcasts_to)


def _is_matmul_add(fn: Any) -> bool:
    """Whether ``fn`` is a MatMul with its bias fused (lite.engines.numpy_fusions._MatMulAdd), told
    by its class's names: numpy_fusions imports this module, not the other way round."""
    kind = type(fn)
    return kind.__module__ == "lite.engines.numpy_fusions" and kind.__qualname__ == "_MatMulAdd"


def fuse_product_epilogues(steps: list[_Step], constants: dict[int, Any], graph_outputs: set[int]) -> list[_Step]:
    """``steps`` with each MatMul (its bias fused or not) or Gemm and the chain of nodes reading
    its result alone (module docstring) replaced by one step. A fused step whose kernel declares
    ``fresh_product`` (ConvNeXt V2's GRN with its linear layer, lite.engines.numpy_grn) counts as
    a MatMul: its result is a new array nobody else reads."""
    graph = Graph(steps, graph_outputs)
    fused: dict[int, _Step] = {}
    dropped: set[int] = set()
    for step in steps:
        if (step.node.op_type not in ("MatMul", "Gemm")
                or not (is_kernel(step.fn, *MATMUL) or is_kernel(step.fn, "gemm", "Gemm") or _is_matmul_add(step.fn)
                        or getattr(step.fn, "fresh_product", False))
                or not plain(step, len(step.inputs), any_kernel=True) or len(step.inputs) < 2 or id(step) in dropped):
            continue
        chain, operations, extra = _epilogue(step, graph, constants)
        if all(kind in ("Reshape", "Transpose") for kind, _ in operations):
            continue  # reshapes alone are views already: nothing to gain
        if any(id(s) in dropped or id(s) in fused for s in chain):
            continue  # an Add of two products: the first product's chain has it
        last = chain[-1]
        fused[id(last)] = replace(
            step, fn=ProductEpilogue(step, operations, len(step.inputs)), inputs=step.inputs + extra,
            outputs=[last.outputs[0]], attributes={}, output_count=None, wants_allocate=True, prepare=None,
            prepared=None, memo=None, memo_sources=[])
        dropped.update(id(s) for s in [step, *chain[:-1]])
    return [fused.get(id(step), step) for step in steps if id(step) not in dropped]


def _epilogue(product: _Step, graph: Graph, constants: dict[int, Any]):
    """(the steps after ``product`` that its result alone goes through, their operations, the
    extra inputs they read). An operation is (op type, its input's position among the fused
    step's inputs, or a perm for Transpose); "AddSwapped" and "MulSwapped" have the product second."""
    chain: list[_Step] = []
    operations: list[tuple[str, Any]] = []
    extra: list[int] = []
    first_extra = len(product.inputs)
    current = product.outputs[0]
    while True:
        readers = graph.readers_of.get(current, [])
        if len(readers) != 1 or current in graph.graph_outputs:
            break
        step = readers[0]
        kind = step.node.op_type
        if kind == "Reshape" and is_kernel(step.fn, *RESHAPE) and plain(step, 2) and step.inputs[0] == current != step.inputs[1]:
            operations.append((kind, first_extra + len(extra)))
            extra.append(step.inputs[1])
        elif kind == "Transpose" and is_kernel(step.fn, *TRANSPOSE) and plain(step, 1) and step.attributes.get("perm"):
            operations.append((kind, list(step.attributes["perm"])))
        elif (kind in _UFUNCS and is_kernel(step.fn, "arithmetic", kind) and plain(step, 2)
              and step.inputs.count(current) == 1):
            if kind in ("Sub", "Div") and step.inputs[0] != current:
                break  # x - y and x / y: only with the product on the left
            other = step.inputs[1] if step.inputs[0] == current else step.inputs[0]
            # Add and Mul keep the node's operand order for the kernel (it returns the first one's type).
            operations.append((kind if step.inputs[0] == current else kind + "Swapped", first_extra + len(extra)))
            extra.append(other)
        else:
            break
        chain.append(step)
        current = step.outputs[0]
    # The fused step runs where the last of them ran: every extra input must be there by then.
    while chain:
        last = graph.position[id(chain[-1])]
        late = [index for index in extra if index in graph.producer_of
                and graph.position[id(graph.producer_of[index])] > last]
        if not late:
            break
        chain.pop()
        kind, argument = operations.pop()
        if kind != "Transpose":
            extra.pop()
    return chain, operations, extra


class ProductEpilogue:
    """The fused step's kernel: the product's own kernel, then the chain's operations.

    Everything but the arithmetic depends only on the input's shape and type and on the
    constant inputs (weights, shape tensors, a folded batch norm's scale and shift), so the
    first call for a shape records an :class:`_EpiloguePlan`: the Reshape targets resolved, the
    constant operands broadcast to the shape they update (the same values, a ufunc over operands
    of one shape skipping the broadcast's second loop), the checks made. LeViT runs 22 such
    steps on 1 to 16 rows, where those checks cost as much as the arithmetic."""

    def __init__(self, product: _Step, operations: list[tuple[str, Any]], product_inputs: int) -> None:
        from lite.ops import arithmetic
        from lite.ops.mat_mul import MatMul
        from lite.ops.transpose import Transpose

        self.arithmetic = arithmetic
        self.transpose = Transpose
        self.product = product.fn
        self.keywords = product.keywords
        self.product_allocates = product.wants_allocate
        self.matmul = product.fn is MatMul and not product.keywords  # the kernel's product may be numpy's
        self.operations = operations
        # Each operation as the run reads it: (op type, argument, the ufunc or None, whether the
        # product is the second operand).
        self.steps = [(kind.removesuffix("Swapped"), argument, _UFUNCS.get(kind.removesuffix("Swapped")),
                       kind.endswith("Swapped")) for kind, argument in operations]
        self.product_inputs = product_inputs
        self.targets = ReshapeTargets()
        self.plans: PlanCache[_EpiloguePlan | None] = PlanCache()

    def __call__(self, *args: Any, allocate: Callable = np.empty) -> Any:
        x = args[0]
        if type(x) is np.ndarray:
            plan = self.plans.get(x.shape, _UNPLANNED)
            if plan is _UNPLANNED:
                plan = self._plan(args)
                self.plans.put(x.shape, plan, 0 if plan is None else plan.nbytes)
            if plan is not None and plan.accepts(args):
                return plan.run(args, allocate)
        return self._in_turn(args, allocate)

    def _in_turn(self, args: tuple[Any, ...], allocate: Callable, record: list[Any] | None = None) -> Any:
        """The product and each operation with every check made on this call (``record``: the
        actions of a plan, appended as they are taken; None in it where one cannot be planned)."""
        if self.product_allocates:
            y = self.product(*args[: self.product_inputs], allocate=allocate, **self.keywords)
        else:
            y = self.product(*args[: self.product_inputs], **self.keywords)
        owned = type(y) is np.ndarray  # a fresh array: operations may write into it
        if record is not None and not (owned and y.flags.writeable):
            record.append(None)
        for kind, argument, ufunc, swapped in self.steps:
            if kind == "Reshape":
                target = self.targets(y.shape, args[argument])
                y = y.reshape(target) if target is not None else self.targets.reshape(y, args[argument])
                if record is not None:  # a computed shape tensor may hold other values on another run
                    fixed = target is not None and not args[argument].flags.writeable
                    record.append((_RESHAPE, y.shape, None) if fixed else None)
            elif kind == "Transpose":
                y = self.transpose(y, perm=argument)
                if record is not None:
                    record.append((_TRANSPOSE, argument, None))
            else:
                other = args[argument]
                if (owned and type(other) is np.ndarray and other.dtype == y.dtype and y.dtype.kind == "f"
                        and y.flags.writeable and _broadcasts_to(other.shape, y.shape)):
                    if record is not None:
                        record.append((_CONSTANT if not other.flags.writeable else _COMPUTED, ufunc, argument,
                                       y.shape))
                    ufunc(y, other, out=y)
                else:
                    operands = (other, y) if swapped else (y, other)
                    y = getattr(self.arithmetic, kind)(*operands, allocate=allocate)
                    owned = type(y) is np.ndarray and y.flags.writeable
                    if record is not None:
                        record.append(None)
        return y

    def _plan(self, args: tuple[Any, ...]) -> _EpiloguePlan | None:
        """The plan for inputs like ``args``, worked out on copies of them (this call's result
        comes from the plan or the checked path, never from the recording), or None where an
        operation takes its kernel or a computed input could change more than its values."""
        fixed, checked = [], []
        for position, value in enumerate(args):
            if type(value) is not np.ndarray:
                return None
            if value.flags.writeable:  # computed on each run: its type and shape are checked
                if position:
                    checked.append((position, value.dtype, value.shape))
            else:  # a constant, or a value the engine remembers from shapes: known by identity
                fixed.append((position, value))
        x = args[0]
        record: list[Any] = []
        self._in_turn(tuple(value.copy() if value.flags.writeable else value for value in args), np.empty, record)
        if any(action is None for action in record):
            return None
        actions, nbytes = [], 0
        for action in record:
            if action[0] == _CONSTANT:  # the operand as a whole array of the shape it updates
                kind, ufunc, argument, shape = action
                full, made = _full(args[argument], shape, self.plans, nbytes)
                nbytes += made
                actions.append((kind, ufunc, full))
            else:
                actions.append(action[:3] if action[0] == _COMPUTED else action)
        direct = (self.matmul and len(args) >= 2 and not args[1].flags.writeable and x.dtype is args[1].dtype
                  and x.ndim >= 2 and args[1].ndim == 2 and x.dtype.kind == "f" and x.dtype.itemsize >= 4
                  and x.size * args[1].shape[1] < _SPLIT_MULTIPLY_ADDS)
        # What the MatMul kernel calls for these shapes: numpy's matmul, or the product in blocks
        # where numpy's is slow (lite.ops._gemm_blocks).
        multiply = None
        if direct:
            from lite.ops import _gemm_blocks  # a kernels module: loaded by models with products only

            multiply = _gemm_blocks.product if x.size * args[1].shape[1] > _gemm_blocks.BLOCK_MULTIPLY_ADDS else np.matmul
        return _EpiloguePlan(self, x.dtype, fixed, checked, actions, multiply, nbytes)


class _EpiloguePlan:
    """A ProductEpilogue's work for one input shape (see ProductEpilogue)."""

    def __init__(self, epilogue: ProductEpilogue, dtype: np.dtype, fixed: list[tuple[int, np.ndarray]],
                 checked: list[tuple[int, np.dtype, tuple[int, ...]]], actions: list[tuple[Any, ...]],
                 multiply: Callable | None, nbytes: int) -> None:
        self.epilogue = epilogue
        self.dtype = dtype
        self.fixed = fixed
        self.checked = checked
        self.actions = actions
        # The product straight from ``multiply`` (None: the product's kernel).
        self.weights = fixed[0][1] if multiply is not None and fixed and fixed[0][0] == 1 else None
        self.multiply = multiply
        self.nbytes = nbytes  # of the operands made for the plan (lite.plan_cache counts them)

    def accepts(self, args: tuple[Any, ...]) -> bool:
        """Whether ``args`` (whose first has the plan's shape) are inputs it was made for."""
        if args[0].dtype is not self.dtype:
            return False
        for position, value in self.fixed:
            if args[position] is not value:
                return False
        for position, dtype, shape in self.checked:
            value = args[position]
            if type(value) is not np.ndarray or value.dtype != dtype or value.shape != shape:
                return False
        return True

    def run(self, args: tuple[Any, ...], allocate: Callable) -> Any:
        epilogue = self.epilogue
        if self.weights is not None:
            y = self.multiply(args[0], self.weights)
        elif epilogue.product_allocates:
            y = epilogue.product(*args[: epilogue.product_inputs], allocate=allocate, **epilogue.keywords)
        else:
            y = epilogue.product(*args[: epilogue.product_inputs], **epilogue.keywords)
        for kind, first, second in self.actions:
            if kind == _RESHAPE:
                y = y.reshape(first)
            elif kind == _CONSTANT:
                first(y, second, out=y)
            elif kind == _COMPUTED:
                first(y, args[second], out=y)
            else:
                y = epilogue.transpose(y, perm=first)
        return y


def _full(operand: np.ndarray, shape: tuple[int, ...], plans: PlanCache, pending: int) -> tuple[np.ndarray, int]:
    from lite.ops._helpers import full_operand_within

    return full_operand_within(operand, shape, plans, pending)


_RESHAPE, _TRANSPOSE, _CONSTANT, _COMPUTED = range(4)  # the kinds of a plan's actions
_UNPLANNED = object()  # a plans entry not worked out yet
_SPLIT_MULTIPLY_ADDS = 1 << 24  # lite.ops._parallel's: products from this size are split between threads
