"""Where Inductor keeps its on-disk caches, so that a second process finds compiled kernels.

The FX graph cache, the AOTAutograd cache, autotuning results and Triton kernels all live under
``TORCHINDUCTOR_CACHE_DIR``; :func:`configure_cache` points it at lite's cache root
(``<cache_dir>/torch``) instead of recompiling in every process. Inductor reads that variable
process-wide: the first engine that names a folder sets it, and a variable the user set before
wins (torch's own default, which torch writes into the variable once Inductor has run, does not
count as set). Kept apart from compiling (:mod:`lite.engines.torch.compiler`): this is process
state, set once, where compilation is per model and input shape.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import torch

CACHE_VARIABLE = "TORCHINDUCTOR_CACHE_DIR"
_cache_lock = threading.Lock()


def configure_cache(cache_dir: Path | None) -> Path | None:
    """Point Inductor's caches at ``cache_dir / "torch"``; returns the folder in use (None: torch's default)."""
    with _cache_lock:
        current = os.environ.get(CACHE_VARIABLE)
        # torch writes its own default into the variable the first time Inductor looks up its
        # cache (any torch.compile before this engine): that is not a user's choice.
        if cache_dir is not None and (current is None or current == _torch_default_cache()):
            folder = Path(cache_dir) / "torch"
            folder.mkdir(parents=True, exist_ok=True)
            os.environ[CACHE_VARIABLE] = str(folder)
            current = str(folder)
        # On by default in torch ≥ 2.4; stated here because a restart without them recompiles everything.
        torch._inductor.config.fx_graph_cache = True
        torch._functorch.config.enable_autograd_cache = True
        return None if current is None else Path(current)


def _torch_default_cache() -> str:
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:  # older torch: the same rule
        import getpass

        return os.path.join(tempfile.gettempdir(), "torchinductor_" + getpass.getuser())
    return default_cache_dir()
