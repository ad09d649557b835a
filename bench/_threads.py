"""BLAS thread counts for the kernel benchmarks, set from ``--threads`` before numpy is imported
(BLAS reads them once, when numpy first loads it)."""

from __future__ import annotations

import os


def configure_threads(argv: list[str], default: int) -> int:
    """The ``--threads`` value of ``argv`` (else ``default``), exported to the BLAS libraries'
    environment variables unless those are set already."""
    threads = default
    if "--threads" in argv:
        threads = int(argv[argv.index("--threads") + 1])
    for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, str(threads))
    return threads
