"""If: run one of two subgraphs, chosen by a boolean scalar.

https://onnx.ai/onnx/operators/onnx__If.html (the module is ``if_`` because ``if`` is a keyword)

The engine passes each branch as a callable that runs the subgraph and returns its outputs.
"""

from __future__ import annotations

import numpy as np

from lite.errors import UnsupportedOpError
from lite.ops.registry import kernel


@kernel("If", since=1)
def If(cond, *, then_branch=None, else_branch=None):
    if then_branch is None or else_branch is None:
        raise UnsupportedOpError("If: both then_branch and else_branch graphs are required")
    flag = np.asarray(cond)
    if flag.size != 1:
        raise UnsupportedOpError(f"If: cond must hold one boolean, got shape {flag.shape}")
    outputs = then_branch() if bool(flag.reshape(())) else else_branch()
    # Sequence (list) and empty optional (None) values pass through as they are.
    return tuple(value if value is None or isinstance(value, list) else np.asarray(value) for value in outputs)
