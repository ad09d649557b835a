"""Models whose opset import or fused activation is damaged, and what refusing each one says.

Shared by the reader's tests (tests/lite/test_verifier.py) and the command line's
(tests/lite/test_cli.py): every way of loading such a file gives the same typed error.
"""

from __future__ import annotations

import numpy as np

from lite.format import GraphBuilder, ir, to_bytes


def damaged_cases() -> dict[str, tuple[dict, str]]:
    """Case name -> (options of :func:`damaged_model`, a part of the error message)."""
    string, integer = ir.AttributeType.STRING, ir.AttributeType.INT
    return {
        "opset 2**40": ({"opset": 1 << 40}, "opset version 1099511627776 of domain 'ai.onnx' is not a version number"),
        "opset 0": ({"opset": 0}, "opset version 0"),
        "activation is an INT": ({"fused_activation": ir.Attribute(integer, 3)}, "fused_activation is INT"),
        "activation not UTF-8": ({"fused_activation": b"\xff\xfe"}, "fused_activation is not UTF-8"),
        "unknown activation": ({"fused_activation": "Gelu9"}, "unknown fused activation 'Gelu9'"),
        "params of a STRING": ({"fused_activation": "Clip", "fused_activation_params": ir.Attribute(string, b"xx")},
                               "fused_activation_params is STRING"),
        "too few params": ({"fused_activation": "Clip", "fused_activation_params": [1.0]}, "takes 2 parameters, got 1"),
        "too many params": ({"fused_activation": "Relu", "fused_activation_params": [1.0]}, "takes 0 parameters, got 1"),
        "params alone": ({"fused_activation_params": [1.0]}, "without fused_activation"),
    }


def damaged_model(opset: int = 21, **attributes) -> bytes:
    """x [1, 4] @ w [4, 2] with ``attributes`` on the MatMul node (named "matmul") and ``opset``."""
    b = GraphBuilder("mm", opset=opset)
    x = b.input("x", np.float32, [1, 4])
    w = b.constant("w", np.arange(8, dtype=np.float32).reshape(4, 2))
    y = b.node("MatMul", [x, w], outputs=["y"], name="matmul", **attributes)
    b.output(y, np.float32, [1, 2])
    return to_bytes(b.build())
