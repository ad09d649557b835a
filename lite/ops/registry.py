"""The kernel registry of the numpy engine.

A kernel is a plain function named after its ONNX op type, registered with the version of the
operator it implements::

    @kernel("Relu", since=14)
    def Relu(X):
        return np.maximum(X, 0)

The signature *is* the spec (https://onnx.ai/onnx/operators/):

- inputs are positional, in the operator's order. An omitted optional input is ``None``;
  variadic inputs (Concat, Sum, ...) arrive as ``*inputs``.
- attributes are keyword arguments with the spec's defaults. Values arrive as Python types:
  INT ``int``, FLOAT ``float``, STRING ``str``, INTS ``list[int]``, FLOATS ``list[float]``,
  STRINGS ``list[str]``, TENSOR ``np.ndarray``, GRAPH a callable ``body(*inputs) -> list`` that
  runs the subgraph (for If/Loop/Scan).
- a kernel that needs to know how many outputs its node declares (Split, LSTM, ...) takes a
  keyword-only ``output_count`` parameter; the engine fills it in.
- a kernel may take a keyword-only ``allocate`` parameter (default ``np.empty``), a callable
  ``allocate(shape, dtype) -> np.ndarray`` giving an uninitialised C-contiguous array. The
  engine passes one that recycles the memory of dead values, so large outputs and temporaries
  should come from it. Do not keep such arrays beyond the call except in the returned outputs.
- a Conv/Gemm-like kernel may take a keyword-only ``fused_activation`` parameter (default
  ``None``): the engine then passes ``(name, params)`` from the node's fused-activation
  attributes (see :mod:`lite.ops.fused_activation`) and the kernel applies it to its first
  output, bit-for-bit as ``fused_activation.apply`` would on the finished output (a float16
  output that the kernel computes in float32 gets it in float32, before the one rounding to
  float16, as ONNX Runtime does on CPUs). Kernels without it get the activation applied by the
  engine afterwards.
- a kernel may come with a ``prepare`` function (``kernel(..., prepare=fn)``) for work that
  depends only on constant inputs, such as re-laying out weights. The engine calls
  ``fn(constants, shapes, **attributes)`` once, when it loads the model: ``constants`` lists the
  node's inputs, each the constant's value or None (computed at run time, or omitted), and
  ``shapes`` their declared shapes (None where unknown). Whatever it returns other than None is
  passed to every call as the keyword-only ``prepared`` parameter (shared by all threads: treat
  it as read-only). A kernel must give the same results with and without it. A prepared value
  may also have a method ``bind(attributes, fused_activation)`` returning a callable
  ``call(*inputs, allocate=...)`` (or None): the engine then calls that instead of the kernel,
  without the keyword arguments, and it must give what the kernel gives with them.
- it returns one value, or a *tuple* of values for the outputs in order (trailing ones the node
  does not declare are dropped). A value is an array (dtypes exactly as the spec; scalars are
  0-d arrays), a list of arrays for an ONNX sequence, or None for an empty optional.
- inputs are read-only (weights may be views of a memory-mapped file): never write into them.

Selection follows ONNX versioning: for a model importing opset ``v`` of the domain, the kernel
with the largest ``since`` not above ``v`` runs. Registering the same (domain, op type, since)
twice is an error at import time. The table itself is :class:`lite.op_registry.OpRegistry`,
shared with the torch engine's lowerings.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field

from lite.op_registry import OpRegistry, keyword_parameters, normalize_domain

__all__ = ["KERNELS", "SMALL_ARRAY_BYTES", "Kernel", "KernelRegistry", "kernel", "normalize_domain"]

# Arrays below this size are not worth the engine's arena (lite/engines/arena.py): numpy's and
# the C allocator's own caches serve them as well, so kernels may skip ``allocate`` for them.
SMALL_ARRAY_BYTES = 64 * 1024


@dataclass(frozen=True)
class Kernel:
    op_type: str
    domain: str
    since_version: int
    fn: Callable
    # Names of the keyword parameters (attributes) the function accepts.
    attribute_names: frozenset[str] = field(default=frozenset())
    wants_output_count: bool = False
    # Engine-provided keyword-only parameters (see the module docstring).
    wants_allocate: bool = False
    wants_fused_activation: bool = False
    # True when the function takes **attributes (custom ops): every attribute is passed.
    accepts_any_attribute: bool = False
    wants_prepared: bool = False
    # Load-time work on constant inputs (see the module docstring), or None.
    prepare: Callable | None = None

    def accepts(self, attribute: str) -> bool:
        return self.accepts_any_attribute or attribute in self.attribute_names


class KernelRegistry(OpRegistry[Kernel]):
    """Kernels keyed by (domain, op type), each with the versions it implements (:mod:`lite.op_registry`),
    their modules imported on demand."""

    def __init__(self) -> None:
        super().__init__("kernel")
        self._pending: dict[tuple[str, str], str] = {}  # op -> module not imported yet
        self._package = ""

    def load_on_demand(self, modules: dict[tuple[str, str], str], package: str) -> None:
        """Import ``package.<module>`` the first time one of its ops is asked for."""
        self._pending.update({(normalize_domain(d), op): module for (d, op), module in modules.items()})
        self._package = package

    def _load(self, op_type: str, domain: str) -> None:
        module = self._pending.pop((normalize_domain(domain), op_type), None)
        if module is not None:
            importlib.import_module(f"{self._package}.{module}")

    def load_all(self) -> None:
        """Import every pending kernel module (for listings of what the registry supports)."""
        for module in sorted(set(self._pending.values())):
            importlib.import_module(f"{self._package}.{module}")
        self._pending.clear()

    def register(
        self, op_type: str, *, since: int = 1, domain: str = "", prepare: Callable | None = None
    ) -> Callable[[Callable], Callable]:
        """Decorator registering ``fn`` as the kernel of ``op_type`` from opset ``since`` on."""

        def decorate(fn: Callable) -> Callable:
            described = _describe(fn)
            if prepare is not None and not described["wants_prepared"]:
                raise ValueError(f"kernel {op_type} has a prepare function but no keyword-only 'prepared' parameter")
            self.add(Kernel(op_type, normalize_domain(domain), since, fn, prepare=prepare, **described))
            return fn

        return decorate

    def select(self, op_type: str, domain: str, opset_version: int) -> Kernel | None:
        """The newest kernel whose ``since`` is not above ``opset_version``, or None."""
        self._load(op_type, domain)
        return super().select(op_type, domain, opset_version)

    def versions(self, op_type: str, domain: str = "") -> list[int]:
        self._load(op_type, domain)
        return super().versions(op_type, domain)

    def op_types(self, domain: str = "") -> list[str]:
        self.load_all()
        return super().op_types(domain)

    def __contains__(self, key: tuple[str, str]) -> bool:
        domain, op_type = key
        self._load(op_type, domain)
        return super().__contains__(key)


# Keyword-only parameters the engine fills in; every other one is an ONNX attribute.
_ENGINE_PARAMETERS = {"output_count": "wants_output_count", "allocate": "wants_allocate",
                      "fused_activation": "wants_fused_activation", "prepared": "wants_prepared"}


def _describe(fn: Callable) -> dict:
    parameters = keyword_parameters(fn, _ENGINE_PARAMETERS)
    described = {flag: name in parameters.engine for name, flag in _ENGINE_PARAMETERS.items()}
    return {"attribute_names": parameters.attributes, "accepts_any_attribute": parameters.any_attribute, **described}


KERNELS = KernelRegistry()
kernel = KERNELS.register
