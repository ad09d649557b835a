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
- it returns one array, or a tuple of arrays for the outputs in order (trailing ones the node
  does not declare are dropped). Dtypes follow the spec exactly; scalars are 0-d arrays.
- inputs are read-only (weights may be views of a memory-mapped file): never write into them.

Selection follows ONNX versioning: for a model importing opset ``v`` of the domain, the kernel
with the largest ``since`` not above ``v`` runs. Registering the same (domain, op type, since)
twice is an error at import time.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

# The default ONNX domain has two spellings; both mean the same operator set.
_DEFAULT_DOMAINS = ("", "ai.onnx")


def normalize_domain(domain: str) -> str:
    return "" if domain in _DEFAULT_DOMAINS else domain


@dataclass(frozen=True)
class Kernel:
    op_type: str
    domain: str
    since_version: int
    fn: Callable
    # Names of the keyword parameters (attributes) the function accepts.
    attribute_names: frozenset[str] = field(default=frozenset())
    wants_output_count: bool = False
    # True when the function takes **attributes (custom ops): every attribute is passed.
    accepts_any_attribute: bool = False

    def accepts(self, attribute: str) -> bool:
        return self.accepts_any_attribute or attribute in self.attribute_names


class KernelRegistry:
    """Kernels keyed by (domain, op type), each with the versions it implements."""

    def __init__(self) -> None:
        self._kernels: dict[tuple[str, str], list[Kernel]] = {}

    def register(self, op_type: str, *, since: int = 1, domain: str = "") -> Callable[[Callable], Callable]:
        """Decorator registering ``fn`` as the kernel of ``op_type`` from opset ``since`` on."""

        def decorate(fn: Callable) -> Callable:
            self.add(Kernel(op_type, normalize_domain(domain), since, fn, *_describe(fn)))
            return fn

        return decorate

    def add(self, kernel: Kernel) -> None:
        versions = self._kernels.setdefault((kernel.domain, kernel.op_type), [])
        if any(k.since_version == kernel.since_version for k in versions):
            raise ValueError(
                f"kernel {kernel.domain or 'ai.onnx'}::{kernel.op_type} since opset "
                f"{kernel.since_version} is registered twice"
            )
        versions.append(kernel)
        versions.sort(key=lambda k: k.since_version)

    def select(self, op_type: str, domain: str, opset_version: int) -> Kernel | None:
        """The newest kernel whose ``since`` is not above ``opset_version``, or None."""
        versions = self._kernels.get((normalize_domain(domain), op_type), [])
        chosen = None
        for candidate in versions:
            if candidate.since_version <= opset_version:
                chosen = candidate
        return chosen

    def versions(self, op_type: str, domain: str = "") -> list[int]:
        return [k.since_version for k in self._kernels.get((normalize_domain(domain), op_type), [])]

    def op_types(self, domain: str = "") -> list[str]:
        domain = normalize_domain(domain)
        return sorted(op for (d, op) in self._kernels if d == domain)

    def __contains__(self, key: tuple[str, str]) -> bool:
        domain, op_type = key
        return (normalize_domain(domain), op_type) in self._kernels


def _describe(fn: Callable) -> tuple[frozenset[str], bool, bool]:
    attributes = set()
    wants_output_count = False
    any_attribute = False
    for parameter in inspect.signature(fn).parameters.values():
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
            if parameter.name == "output_count":
                wants_output_count = True
            else:
                attributes.add(parameter.name)
        elif parameter.kind is inspect.Parameter.VAR_KEYWORD:
            any_attribute = True
    return frozenset(attributes), wants_output_count, any_attribute


KERNELS = KernelRegistry()
kernel = KERNELS.register
