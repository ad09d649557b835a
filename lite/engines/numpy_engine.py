"""The numpy engine: runs a .lite graph node by node with the kernels of :mod:`lite.ops`.

Planning happens once, at load: each node gets its kernel (newest version not above the model's
opset for the node's domain) and its attributes converted to the Python values kernels take
(:mod:`lite.engines.numpy_binding`), and the list of tensors whose last reader it is. Running is then a flat loop. Intermediate values
are dropped right after their last use, so the live set at any moment is what the dataflow
needs (the lifetime bound that ``lite bench --memory`` reports against).

Large arrays come from a per-thread :class:`BufferPool`: kernels that take the keyword-only
``allocate`` parameter build their outputs and temporaries in one arena laid out from the
lifetimes seen in the previous run, so a run neither page-faults fresh memory in for every
activation nor holds much more than the lifetime bound. Arrays handed back to the caller never
come from the arena, and they are C-contiguous: kernels may pass channels-last views between
them (:mod:`lite.ops._layout`), which are copied into the usual layout on the way out.

The engine holds no per-call state beyond that per-thread pool: concurrent ``run`` calls from
several threads are safe.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from lite.engines import numpy_float16, numpy_fusions
from lite.engines.arena import BufferPool
from lite.engines.numpy_binding import KernelBinder
from lite.engines.numpy_scopes import OuterConstants, Scope
from lite.engines.numpy_steps import (
    _FOLDABLE_DOMAINS,
    _NOT_FOLDABLE,
    _failure,
    _MemoGroup,
    _plan_shape_memos,
    _remember,
    _Step,
    bind_prepared,
    prepare,
    run_program,
)
from lite.errors import LiteError, ModelFormatError
from lite.format import ir
from lite.format.values import tensor_value
from lite.ops import KernelRegistry, fused_activation
from lite.ops._blas import ONE_BLAS_THREAD
from lite.ops.registry import normalize_domain

# observer(node, seconds, values alive while the node ran): see NumpyEngine.run.
Observer = Callable[[ir.Node, float, list[Any]], None]


class _GraphPlan:
    def __init__(self, graph: ir.Graph, steps: list[_Step], constants: dict[int, np.ndarray],
                 index_of: dict[str, int]) -> None:
        self.graph = graph
        self.steps = steps
        self.constants = constants
        self.index_of = index_of
        # What the run loop reads of each step, built on the first run (see run_program).
        self.program: list[tuple[Any, ...]] | None = None


class NumpyEngine:
    """Executes an :class:`ir.Model` with numpy kernels."""

    name = "numpy"
    kind = "numpy"
    placement = "cpu"
    on_gpu = False

    def __init__(self, model: ir.Model, custom_ops: KernelRegistry | None = None) -> None:
        self.model = model
        self.opsets = {normalize_domain(d): v for d, v in model.opset_imports.items()}
        self.custom_ops = custom_ops
        self.pool = BufferPool()
        # float16 models run in float32, rounded at their outputs and Casts (lite.engines.numpy_float16);
        # users' kernels get the types the model declares.
        self.float16_in_float32 = custom_ops is None and numpy_float16.applies(model)
        # A function, not a bound method: _outer holding the engine would make a reference cycle,
        # and a deleted model's weights stayed in memory until the next full garbage collection.
        self._constant = functools.partial(_engine_constant, widen=self.float16_in_float32)
        self._outer = OuterConstants(model, self._constant)
        binder = KernelBinder(model, self.opsets, custom_ops, self.float16_in_float32)
        self.plans = [self._plan(graph, index, binder) for index, graph in enumerate(model.graphs)]
        if binder.problems:
            raise binder.error()

    # -- planning ------------------------------------------------------------------------------
    def _plan(self, graph: ir.Graph, graph_index: int, binder: KernelBinder) -> _GraphPlan:
        steps = []
        for node in graph.nodes:
            step = binder.bind(node, graph_index)
            if step is not None:
                steps.append(step)
        constants = {i: self._constant(tensor_value(t)) for i, t in enumerate(graph.tensors) if t.is_constant}
        if not binder.problems:  # every node has its kernel: fold what depends on weights alone
            steps = self._fold_constants(steps, constants, len(graph.tensors))
            # A body's weights are often the enclosing graph's (captured by name): prepared too.
            known = {**constants, **self._outer.captured(graph_index)} if graph_index else constants
            for step in steps:
                if step.prepare is not None:
                    step.prepared = prepare(step, known, graph)
                    step.finish()
            # A value a body reads by name is kept as a graph output is: no fusion computes it away.
            read_by_bodies = {i for i, t in enumerate(graph.tensors) if t.name in self._outer.captured_names}
            steps = numpy_fusions.fuse(steps, constants, set(graph.outputs) | read_by_bodies)
            for step in steps:
                bind_prepared(step)
        index_of = {t.name: i for i, t in enumerate(graph.tensors)}
        for step in steps:
            step.slots = [index if index >= 0 else len(graph.tensors) for index in step.inputs]
        if not binder.problems:
            _plan_shape_memos(steps, constants, set(graph.outputs))
        last_use: dict[int, int] = {}
        for position, step in enumerate(steps):
            for index in step.inputs:
                if index >= 0:
                    last_use[index] = position
            for index in step.memo_sources:  # read for the lookup key
                last_use[index] = position
            # A body reads the enclosing graph's tensors by name: those live until the node runs.
            for target in step.graph_attributes.values():
                for body in target if isinstance(target, list) else [target]:
                    body_graph = self.model.graphs[body]
                    for captured in body_graph.captures:
                        index = index_of.get(body_graph.tensors[captured].name)
                        if index is not None:
                            last_use[index] = position
            for index in step.outputs:
                # An output nobody reads is released right after it is produced.
                if index >= 0:
                    last_use.setdefault(index, position)
        keep = set(graph.outputs) | set(constants) | set(graph.inputs) | set(graph.captures)
        for index, position in last_use.items():
            if index not in keep:
                steps[position].release.append(index)
        return _GraphPlan(graph, steps, constants, index_of)

    def describe(self) -> dict[str, Any]:
        return {"engine": "numpy", "nodes": len(self.model.main.nodes)}

    # -- running -------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, np.ndarray], observer: Observer | None = None) -> dict[str, np.ndarray]:
        """Run the main graph; ``feeds`` maps each graph input name to its (validated) array.

        ``observer``, if given, is called after each node of the main graph with the node, the
        seconds it took and the values alive while it ran (for profiles and memory reports).
        """
        plan = self.plans[0]
        if self.float16_in_float32:
            feeds = numpy_float16.widen_feeds(feeds)
        inputs = [feeds[plan.graph.tensors[i].name] for i in plan.graph.inputs]
        self.pool.begin_run()
        outputs: list[np.ndarray] = []
        try:
            # BLAS on one thread: large products are split by lite.ops._parallel instead.
            with ONE_BLAS_THREAD:
                outputs = [_contiguous(value) for value in self._run_graph(0, inputs, None, observer)]
        finally:
            self.pool.end_run(outputs, completed=bool(outputs) or not plan.graph.outputs)
        outputs = [_not_an_input(value, inputs) for value in outputs]
        results = {plan.graph.tensors[i].name: value for i, value in zip(plan.graph.outputs, outputs)}
        return numpy_float16.narrow_outputs(plan.graph, results) if self.float16_in_float32 else results

    def _run_graph(self, graph_index: int, inputs: list[np.ndarray], scope: Scope | None,
                   observer: Observer | None = None) -> list[np.ndarray]:
        plan = self.plans[graph_index]
        graph = plan.graph
        values: list[Any] = [None] * (len(graph.tensors) + 1)  # the last slot: omitted inputs
        for index, value in plan.constants.items():
            values[index] = value
        for index, value in zip(graph.inputs, inputs):
            values[index] = value
        for index in graph.captures:
            if scope is None:
                raise ModelFormatError(f"graph {graph.name!r} captures {graph.tensors[index].name!r} but has no enclosing graph")
            values[index] = scope.lookup(graph.tensors[index].name)
        local = Scope(plan, values, scope)
        allocate = self.pool.allocate
        if observer is None:
            program = plan.program
            if program is None:
                program = plan.program = run_program(plan.steps, self.pool.allocate)
            self._run_steps(program, values, local, allocate)
            return [values[i] for i in graph.outputs]
        for step in plan.steps:
            started = time.perf_counter()
            bodies = ({name: self._body(target, local) for name, target in step.graph_attributes.items()}
                      if step.graph_attributes else _NO_BODIES)
            self._execute(step, values, bodies, allocate)
            # Called before releasing: `values` is the live set while the node ran.
            observer(step.node, time.perf_counter() - started, values)
            for index in step.release:
                values[index] = None
        return [values[i] for i in graph.outputs]

    def _run_steps(self, program: list[tuple[Any, ...]], values: list[Any], local: Scope,
                   allocate: Callable) -> None:
        """The run loop without an observer: most nodes' kernels are called inline (a small
        model's run is mostly this loop's overhead), the rest through _execute."""
        for fn, slots, keywords, output, release, step in program:
            if fn is not None:
                args = [values[i] for i in slots]
                try:
                    result = fn(*args, **keywords)
                except Exception as err:
                    raise _failure(step, args, err) from err
                # A tuple holds the outputs in order; the node declares only the first.
                values[output] = result[0] if type(result) is tuple else result
            elif type(step.fn) is _MemoGroup:  # it names a failing node itself
                for index, value in zip(step.outputs, step.fn(*[values[i] for i in slots])):
                    values[index] = value
            elif step.memo is not None:
                key = tuple([values[i].tobytes() for i in step.memo_sources])
                known = step.memo.get(key)
                if known is not None:
                    values[output] = known
                else:
                    args = [values[i] for i in slots]
                    try:
                        result = step.fn(*args, **keywords)
                    except Exception as err:
                        raise _failure(step, args, err) from err
                    result = result[0] if type(result) is tuple else result
                    values[output] = result
                    _remember(step, key, result)
            else:
                bodies = ({name: self._body(target, local) for name, target in step.graph_attributes.items()}
                          if step.graph_attributes else _NO_BODIES)
                self._execute(step, values, bodies, allocate)
            for index in release:
                values[index] = None

    @staticmethod
    def _execute(step: _Step, values: list[Any], bodies: dict[str, Any], allocate: Callable | None) -> None:
        """Run one node on ``values`` (tensor index -> value), storing its outputs there."""
        args = [values[i] if i >= 0 else None for i in step.inputs]
        kwargs = step.keywords
        if bodies:
            kwargs = {**kwargs, **bodies}
        try:
            if step.wants_allocate and allocate is not None:
                result = step.fn(*args, allocate=allocate, **kwargs)
            else:
                result = step.fn(*args, **kwargs)
        except Exception as err:
            if type(step.fn) is _MemoGroup or getattr(step.fn, "names_its_node", False):  # it named the node
                raise
            raise _failure(step, args, err) from err
        if not isinstance(result, tuple):
            result = (result,)  # one value; a list is one value too (a sequence)
        for index, value in zip(step.outputs, result):
            if index >= 0:
                values[index] = value
        if step.activation is not None and not step.kernel_applies_activation and step.outputs and step.outputs[0] >= 0:
            first = step.outputs[0]
            values[first] = fused_activation.apply(values[first], *step.activation)

    def _fold_constants(self, steps: list[_Step], constants: dict[int, Any], size: int) -> list[_Step]:
        """Run, once at load, the nodes whose inputs are all constants; their outputs become constants.

        This is where ``--quant int8-weight`` weights are dequantized and ``--fp16`` weights widened:
        once, not on every call. Random and custom ops, and nodes with subgraphs, always run.
        """
        values: list[Any] = [None] * size
        for index, value in constants.items():
            values[index] = value
        kept = []
        for step in steps:
            foldable = (not step.graph_attributes and not step.custom
                        and normalize_domain(step.node.domain) in _FOLDABLE_DOMAINS
                        and step.node.op_type not in _NOT_FOLDABLE
                        and all(i < 0 or i in constants for i in step.inputs))
            if not foldable:
                kept.append(step)
                continue
            try:
                self._execute(step, values, {}, None)
            except LiteError:
                # Folding only saves time: a node that fails here stays, and fails when run, as it would unfolded.
                kept.append(step)
                continue
            for index in step.outputs:
                if index >= 0:
                    constants[index] = values[index]
        return kept

    def _body(self, target, scope: Scope):
        if isinstance(target, list):
            return [self._body(t, scope) for t in target]

        def body(*inputs: np.ndarray) -> list[np.ndarray]:
            return self._run_graph(target, list(inputs), scope)

        return body


_NO_BODIES: dict[str, Any] = {}  # the subgraph bodies of a node without any (read only)


def _engine_constant(value: Any, widen: bool) -> Any:
    """A constant as the kernels get it: numpy's own dtype instance, float16 widened where the
    model runs in float32."""
    value = _canonical(value)
    return numpy_float16.widen(value) if widen else value


def _canonical(value: Any) -> Any:
    """``value`` typed with numpy's own instance of its dtype. The reader's explicitly
    little-endian dtypes compare equal to the native ones but are other objects, and numpy then
    answers ``np.asarray(w, dtype=np.float32)`` with a new view on every call: kernels that
    remember weights by identity (the depthwise convolution's layout) laid them out again on
    every run."""
    if isinstance(value, np.ndarray) and not value.dtype.isbuiltin and value.dtype.isnative and value.dtype.names is None:
        native = np.dtype(value.dtype.str)
        if native.isbuiltin and native == value.dtype:
            return value.view(native)
    return value


def _not_an_input(value: Any, inputs: list[Any]) -> Any:
    """A copy of an output that is (a view of) the caller's input (an Identity, a Reshape): the
    caller refilling its input buffer for the next call would change an answer it holds."""
    if isinstance(value, np.ndarray) and any(isinstance(given, np.ndarray) and np.may_share_memory(value, given)
                                             for given in inputs):
        return value.copy()
    return value


def _contiguous(value: Any) -> Any:
    """``value`` in C order: a kernel's channels-last view becomes an ordinary array, and the
    numpy scalar a ufunc gives for a rank-0 tensor a 0-d array."""
    if isinstance(value, np.ndarray) and not value.flags.c_contiguous:
        return np.ascontiguousarray(value)
    if isinstance(value, np.generic):
        return np.asarray(value)
    return value
