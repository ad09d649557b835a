"""What the kernel benchmarks share: BLAS thread counts set from ``--threads`` before numpy is
imported (BLAS reads them once, when numpy first loads it), and ONNX Runtime sessions on as many
threads, run sequentially."""

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


def ort_session(model, threads: int):
    """An ONNX Runtime CPU session of the ModelProto ``model`` on ``threads`` intra-op threads."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    return onnxruntime.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
