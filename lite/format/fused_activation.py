"""Activations fused into the layer before them: the two .lite attributes and their vocabulary.

The converter fuses an activation that follows a Conv/ConvTranspose/Gemm/MatMul into that node
(``converter.passes.fuse_activation``), Lite-style (cf. TFLite's ``fused_activation_function``):

- ``fused_activation`` (STRING): one of the names below;
- ``fused_activation_params`` (FLOATS), when the activation has parameters, in the order below.

Every engine applies the activation to the node's first output right after the layer: the numpy
engine (:mod:`lite.ops.fused_activation`), the torch engine
(:func:`lite.engines.torch.ops.apply_activation`), and the ONNX lowering
(:mod:`lite.format.onnx.lower`), which writes it back as its own ONNX node(s).

| name        | params         | formula                                   | ONNX form             |
|-------------|----------------|-------------------------------------------|-----------------------|
| Relu        | —              | max(x, 0)                                 | Relu                  |
| Clip        | min, max       | min(max(x, min), max)   (Relu6: 0, 6)     | Clip                  |
| LeakyRelu   | alpha          | x if x >= 0 else alpha * x                | LeakyRelu(alpha)      |
| Sigmoid     | —              | 1 / (1 + exp(-x))                         | Sigmoid               |
| HardSigmoid | alpha, beta    | clip(alpha * x + beta, 0, 1)              | HardSigmoid(alpha, beta) |
| HardSwish   | —              | x * clip(x / 6 + 1 / 2, 0, 1)             | HardSwish             |
| Silu        | —              | x * sigmoid(x)                            | Mul(x, Sigmoid(x))    |
| Tanh        | —              | tanh(x)                                   | Tanh                  |

Specs: https://onnx.ai/onnx/operators/ (each activation is the ONNX operator of the same name,
its parameters that operator's attributes; Silu has no single ONNX operator before opset 24).
Adding one: an entry in :data:`ACTIVATIONS`, then its numpy and torch implementations (tests
check that every engine implements exactly this vocabulary).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

ATTRIBUTE = "fused_activation"
PARAMS_ATTRIBUTE = "fused_activation_params"


@dataclass(frozen=True)
class FusedActivation:
    """One activation a layer can carry."""

    name: str
    # The ONNX operator's attributes that are the activation's params, in params order, with the
    # spec's defaults. Clip's bounds are inputs from opset 11 on; a missing bound is ±inf.
    attributes: tuple[tuple[str, float], ...] = ()
    # An integer layer reproduces it by clamping its output, so quantization keeps it fused.
    clamps: bool = False
    # False when no single ONNX operator computes it (Silu: written and matched as Mul(x, Sigmoid(x))).
    is_onnx_op: bool = True

    @property
    def arity(self) -> int:
        return len(self.attributes)

    def onnx_attributes(self, params: Sequence[float]) -> dict[str, float]:
        """The ONNX operator's attributes for ``params`` (Clip before opset 11: ``min``, ``max``)."""
        return {name: float(value) for (name, _), value in zip(self.attributes, params)}

    def params_from(self, attribute: Callable[[str, float], float]) -> list[float]:
        """The params of an ONNX node of this activation; ``attribute(name, default)`` reads one attribute."""
        return [float(attribute(name, default)) for name, default in self.attributes]


ACTIVATIONS: dict[str, FusedActivation] = {
    activation.name: activation
    for activation in (
        FusedActivation("Relu", clamps=True),
        FusedActivation("Clip", (("min", -math.inf), ("max", math.inf)), clamps=True),
        FusedActivation("LeakyRelu", (("alpha", 0.01),)),
        FusedActivation("Sigmoid"),
        FusedActivation("HardSigmoid", (("alpha", 0.2), ("beta", 0.5))),
        FusedActivation("HardSwish"),
        FusedActivation("Silu", is_onnx_op=False),
        FusedActivation("Tanh"),
    )
}

NAMES = frozenset(ACTIVATIONS)
# Those an integer layer applies by clamping (Relu, Clip); the others run in float after it.
CLAMPING = frozenset(name for name, activation in ACTIVATIONS.items() if activation.clamps)


def check(name: str, params: Sequence[float]) -> str | None:
    """None if ``name``/``params`` form a valid fused activation, else the reason."""
    if name not in ACTIVATIONS:
        return f"unknown fused activation {name!r} (known: {', '.join(sorted(ACTIVATIONS))})"
    arity = ACTIVATIONS[name].arity
    if len(params) != arity:
        return f"fused activation {name} takes {arity} parameters, got {len(params)}"
    return None
