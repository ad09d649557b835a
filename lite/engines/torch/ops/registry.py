"""The lowering table of the torch engine: ONNX op type -> a function of torch operations.

A lowering is a plain function named after its ONNX op type, registered with the opset it
implements from, in the same kind of table as the numpy kernels (:mod:`lite.op_registry`)::

    @lowering("Relu")
    def Relu(X):
        return torch.relu(X)

The signature is the spec (https://onnx.ai/onnx/operators/), with exact ONNX semantics:

- inputs are positional in the operator's order; an omitted optional input is ``None``,
  variadic inputs arrive as ``*inputs``;
- attributes are keyword-only parameters with the spec's defaults (Python values as the numpy
  engine passes them: INT ``int``, FLOATS ``list[float]``, STRING ``str``, TENSOR ``np.ndarray``);
- keyword-only parameters the engine fills in: ``device`` (where new tensors go), ``float_type`` (the torch dtype that ONNX FLOAT
  computes in: float16 under half compute on GPUs), ``fused_activation`` (``(name, params)`` or
  None, for Conv/Gemm-like ops), ``output_count`` and ``opset``;
- a value is a ``torch.Tensor`` or a *host value*: a Python int/float (0-d) or a list of them
  (1-D), which is what ``Shape`` returns and what small integer constants become, so that shape
  arithmetic (Shape -> Gather -> Concat -> Reshape) stays in Python and traces into static or
  symbolic sizes instead of device tensors;
- it returns one value or a tuple of values (outputs in order).

The functions run eagerly and under ``torch.compile``; they must not write into their inputs
(weights may share memory with the mapped file).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lite.op_registry import OpRegistry, keyword_parameters

_ENGINE_PARAMETERS = ("float_type", "device", "fused_activation", "output_count", "opset")
# check(attributes) -> None when the lowering covers the node, else the reason it does not.
Check = Callable[[dict[str, Any]], "str | None"]


@dataclass(frozen=True)
class Lowering:
    op_type: str
    since_version: int
    fn: Callable
    attribute_names: frozenset[str] = field(default=frozenset())
    engine_parameters: frozenset[str] = field(default=frozenset())
    static_inputs: frozenset[int] = field(default=frozenset())
    check: Check | None = None
    domain: str = ""  # lowerings cover the default ONNX domain only

    def accepts(self, attribute: str) -> bool:
        return attribute in self.attribute_names


class LoweringTable:
    """Lowerings of the default ONNX domain keyed by op type, each with the versions it covers
    (the table is :class:`lite.op_registry.OpRegistry`, as for the numpy kernels)."""

    def __init__(self) -> None:
        self._lowerings: OpRegistry[Lowering] = OpRegistry("torch lowering")

    def register(self, op_type: str, *, since: int = 1, static: tuple[int, ...] = (),
                 check: Check | None = None) -> Callable[[Callable], Callable]:
        """Register ``fn`` for ``op_type`` from opset ``since`` on.

        ``static``: input positions read on the host (shapes, scales, pads): constants there are
        passed as Python values. ``check``: declines attribute combinations the lowering does
        not cover (those nodes run on the numpy engine).
        """

        def decorate(fn: Callable) -> Callable:
            parameters = keyword_parameters(fn, _ENGINE_PARAMETERS)
            self._lowerings.add(Lowering(op_type, since, fn, parameters.attributes, parameters.engine,
                                         frozenset(static), check))
            return fn

        return decorate

    def select(self, op_type: str, opset_version: int) -> Lowering | None:
        """The newest lowering whose ``since`` is not above ``opset_version``, or None."""
        return self._lowerings.select(op_type, "", opset_version)

    def op_types(self) -> list[str]:
        return self._lowerings.op_types()

    def __contains__(self, op_type: str) -> bool:
        return ("", op_type) in self._lowerings


LOWERINGS = LoweringTable()
lowering = LOWERINGS.register
