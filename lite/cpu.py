"""What this machine's CPU can do, for choices that depend on its instructions.

Read once from ``/proc/cpuinfo`` (Linux); elsewhere the flags are unknown and every question
answers on the safe side.
"""

from __future__ import annotations

import functools
import hashlib
import platform

_X86 = {"x86_64", "amd64", "i386", "i686", "x86"}
# Integer dot-product instructions that accumulate u8 x s8 products straight into 32 bits.
_VNNI_FLAGS = {"avx512_vnni", "avx_vnni", "amx_int8"}


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[str, frozenset[str]]:
    name, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name") and not name:
                    name = line.split(":", 1)[1].strip()
                elif line.startswith(("flags", "Features")):
                    flags = frozenset(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return name or platform.processor(), flags


def name() -> str:
    """The CPU's model name (``platform.processor()`` where /proc/cpuinfo is not there)."""
    return _cpuinfo()[0]


def flags() -> frozenset[str]:
    """The instruction-set flags the kernel reports (empty where unknown)."""
    return _cpuinfo()[1]


def signature() -> str:
    """Architecture, model name and a digest of the flags: compiled code may use only this CPU's
    instructions, so caches of compiled code are keyed on it."""
    digest = hashlib.sha256(" ".join(sorted(flags())).encode()).hexdigest()[:16]
    return f"{platform.machine()}|{name()}|{digest}"


def is_x86() -> bool:
    return platform.machine().lower() in _X86


def int8_products_saturate() -> bool:
    """Whether ONNX Runtime's u8 x s8 integer kernels may saturate on this CPU.

    Without VNNI, x86 kernels multiply uint8 by int8 with ``vpmaddubsw``, which adds two
    products into a signed 16-bit lane and saturates: 2 x 255 x 127 does not fit. ONNX Runtime's
    quantization documentation names the effect and the remedies (7-bit weights, or U8U8). VNNI
    (``vpdpbusd``) accumulates in 32 bits and is exact; so are ARM's dot-product kernels. An x86
    CPU whose flags cannot be read counts as saturating.
    """
    return is_x86() and not (flags() & _VNNI_FLAGS)
