"""The torch engine's lowering table (:data:`LOWERINGS`), one module per family of ops.

The modules register their lowerings on import; they are imported here, explicitly.
"""

from lite.engines.torch.ops import elementwise, nn, resize, shape  # noqa: F401  (registration)
from lite.engines.torch.ops.elementwise import apply_activation
from lite.engines.torch.ops.registry import LOWERINGS, Lowering, lowering

__all__ = ["LOWERINGS", "Lowering", "apply_activation", "lowering"]
