"""What an ONNX Runtime session is built with: :class:`SessionConfig` (device, threads,
optimization level, CUDA and TensorRT provider options, precision, the int8 form, custom op
libraries, the cache folder), checked when it is made, and the execution providers and
``SessionOptions`` it becomes (https://onnxruntime.ai/docs/execution-providers/).

The sessions themselves and their on-disk cache are :mod:`lite.engines.ort.sessions`, whose
cache key covers these settings.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lite.engines.base import default_cache_dir
from lite.engines.ort import thread_pools

OPTIMIZATION_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                        "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
              "tensorrt": "TensorrtExecutionProvider"}


@dataclass(frozen=True)
class SessionConfig:
    """Everything that decides how a session is built (and so which cache entry it uses)."""

    device: str = "cpu"  # cpu | cuda | tensorrt
    threads: int | None = None  # intra-op threads; None: ONNX Runtime's default (all cores)
    optimization: str = "all"  # disable | basic | extended | all
    device_id: int = 0
    gpu_mem_limit: int | None = None  # bytes
    cudnn_conv_algo_search: str = "EXHAUSTIVE"  # EXHAUSTIVE | HEURISTIC | DEFAULT
    prefer_nhwc: bool | None = None  # None: True on CUDA (faster convolutions with fp16 tensor cores)
    cuda_graph: bool | None = None  # None: True on CUDA (captured per input-shape bucket, replayed)
    # cuDNN runtime fusion of Conv + bias (+ activation) into one kernel: ResNet-50 fp16 1.47x
    # faster at batch 256 on an H200 (bench/gpu_ort_options.py). But its kernels failed whenever
    # they ran on a thread other than the process's main thread (ONNX Runtime 1.31.1, cuDNN 9.19:
    # "illegal instruction", "illegal memory access"; a server loading on a
    # worker thread, two calling threads). None: True on CUDA when the model is loaded on the
    # main thread, else False (lite.engines.ort.cuda.CudaRunner moves calls from other threads
    # to fresh sessions without it). ONNX Runtime before 1.20 does not know the option.
    fuse_conv_bias: bool | None = None
    # TF32 for float32 MatMul/Conv, which ONNX Runtime uses by default (a 10-bit mantissa: 3e-4
    # relative error on a 4-term dot product on an H200). None: ONNX Runtime's default; the engine
    # passes False when it computes in float32, so float32 models get float32 arithmetic as on every
    # other device (True trades that for speed). Not for float16 compute: there use_tf32=0 also
    # took cuDNN's tensor-core convolutions away (ResNet-50 fp16 batch 256: 17,580 -> 7,861 images/s).
    tf32: bool | None = None
    precision: str = "auto"  # auto | fp32 | fp16 (GPU): auto computes in fp16 on GPUs when weights are fp16
    # More CUDA provider options, passed through as given (e.g. {"fuse_conv_bias": "1"}); see
    # https://onnxruntime.ai/docs/execution-providers/CUDA-ExecutionProvider.html#configuration-options
    cuda_options: tuple[tuple[str, str], ...] | dict[str, Any] = ()
    # The CUDA stream (a cudaStream_t, as an int) the provider runs on; None: its own. Not part of
    # the cache key: it changes nothing in the optimized model.
    compute_stream: int | None = None
    # int8 (QDQ) models on the CPU: "int8" runs ONNX Runtime's int8 kernels, "float" the float form
    # (weights dequantized at load), "auto" measures both at load and keeps the faster (int8_choice.py;
    # lite.Model.load's default). Not part of the cache key: the form is part of the lowered model's.
    int8_compute: str = "int8"
    # What the intra-op threads do when they run out of work. "run" (the default): they spin while
    # a run is in progress and stop the moment it returns (ONNX Runtime's session.force_spinning_stop),
    # leaving the cores to the Python code between calls and to the other models of the process. With
    # ONNX Runtime's own behaviour, "always", they go on spinning after a run: two models called in
    # turns in one process (an OCR pipeline, a server with several models) took about 2.2x as long as
    # with "run"; one sub-millisecond model called back to back runs a few % slower with it (its next
    # run wakes the threads; bench/multi_model.py, docs/benchmarks.md). "never": they block whenever
    # idle, during runs too (slower runs, least CPU). Not part of the cache key. It only
    # applies to sessions with pools of their own (not after thread_pools.share_threads()).
    spinning: str = "run"
    # Shared libraries of custom ops (onnxruntime-extensions' get_library_path(), a library of one's
    # own), registered with every session (SessionOptions.register_custom_ops_library); nodes of any
    # domain are then tried on ONNX Runtime, and those it still has no kernel for run on numpy.
    custom_op_libraries: tuple[str, ...] = ()
    cache_dir: Path | None = field(default_factory=default_cache_dir)  # None: no cache
    weights_identity: str | None = None  # identity of the weights (file, size, mtime); None: hash them

    def __post_init__(self) -> None:
        if self.cache_dir is not None and not isinstance(self.cache_dir, Path):
            object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        object.__setattr__(self, "custom_op_libraries", custom_op_libraries(self.custom_op_libraries))
        if self.device not in PROVIDERS:
            raise ValueError(f"ONNX Runtime device must be one of {', '.join(PROVIDERS)}; got {self.device!r}")
        on_gpu = self.device != "cpu"
        if self.precision not in ("auto", "fp32", "fp16"):
            raise ValueError(f"precision must be 'auto', 'fp32' or 'fp16'; got {self.precision!r}")
        if self.precision == "fp16" and not on_gpu:
            raise ValueError("precision='fp16' needs a GPU device (cuda or tensorrt): ONNX Runtime's CPU provider "
                             "has few float16 kernels; convert with --fp16 to store weights in half precision")
        if isinstance(self.cuda_options, dict):
            object.__setattr__(self, "cuda_options", tuple(sorted((str(k), str(v)) for k, v in self.cuda_options.items())))
        for name in ("prefer_nhwc", "cuda_graph"):
            if getattr(self, name) is None:
                object.__setattr__(self, name, on_gpu)
        if self.fuse_conv_bias is None:
            object.__setattr__(self, "fuse_conv_bias", on_gpu and threading.current_thread() is threading.main_thread())
        if self.int8_compute not in ("auto", "int8", "float"):
            raise ValueError(f"int8_compute must be 'auto', 'int8' or 'float'; got {self.int8_compute!r}")
        if self.spinning not in thread_pools.SPINNING:
            raise ValueError(f"spinning must be one of {', '.join(thread_pools.SPINNING)}; got {self.spinning!r}")
        if self.optimization not in OPTIMIZATION_LEVELS:
            raise ValueError(f"optimization must be one of {', '.join(OPTIMIZATION_LEVELS)}; got {self.optimization!r}")
        if self.cudnn_conv_algo_search not in ("EXHAUSTIVE", "HEURISTIC", "DEFAULT"):
            raise ValueError(f"cudnn_conv_algo_search must be EXHAUSTIVE, HEURISTIC or DEFAULT; "
                             f"got {self.cudnn_conv_algo_search!r}")


def custom_op_libraries(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> tuple[str, ...]:
    """``paths`` as absolute paths of existing files (one path alone is taken as a list of one)."""
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
    resolved = []
    for path in paths:
        if not Path(path).is_file():
            raise ValueError(f"custom op library {str(path)!r} is not a file: give the path of the shared library "
                             "(e.g. onnxruntime_extensions.get_library_path())")
        resolved.append(str(Path(path).resolve()))
    return tuple(resolved)


def _ort_version() -> tuple[int, ...]:
    import onnxruntime

    return tuple(int(part) for part in re.findall(r"\d+", onnxruntime.__version__)[:2])


def providers(config: SessionConfig) -> list[Any]:
    if config.device == "cpu":
        return ["CPUExecutionProvider"]
    cuda = {"device_id": str(config.device_id), "cudnn_conv_algo_search": config.cudnn_conv_algo_search,
            "prefer_nhwc": "1" if config.prefer_nhwc else "0",
            "enable_cuda_graph": "1" if config.cuda_graph else "0"}
    if config.gpu_mem_limit:
        cuda["gpu_mem_limit"] = str(config.gpu_mem_limit)
    if _ort_version() >= (1, 20):  # older versions refuse options they do not know
        if config.fuse_conv_bias:
            cuda["fuse_conv_bias"] = "1"
        if config.tf32 is not None:
            cuda["use_tf32"] = "1" if config.tf32 else "0"
    cuda.update(config.cuda_options)
    if config.compute_stream is not None:
        cuda.update(has_user_compute_stream="1", user_compute_stream=str(config.compute_stream))
    chain: list[Any] = [("CUDAExecutionProvider", cuda), "CPUExecutionProvider"]
    if config.device == "tensorrt":
        trt: dict[str, str] = {"device_id": str(config.device_id)}
        if config.cache_dir is not None:
            trt.update(trt_engine_cache_enable="1", trt_engine_cache_path=str(config.cache_dir / "tensorrt"))
        chain.insert(0, ("TensorrtExecutionProvider", trt))
    return chain


def session_options(ort, config: SessionConfig, level: str | None = None):
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPTIMIZATION_LEVELS[level or config.optimization])
    thread_pools.configure(options, config.threads, config.spinning)
    # Fatal only: a failing run raises, and our KernelError carries ONNX Runtime's message (an error
    # line on stderr besides repeats it, and clutters tries that are expected to fail: lite bench's
    # random inputs are tried in rounds of sizes).
    options.log_severity_level = 4
    for library in config.custom_op_libraries:
        options.register_custom_ops_library(library)
    return options
