"""Which engine options a model's ``config.json`` may set.

The repository is less trusted than the server's account (a config.json linked outside its
model's folder is refused, model names cannot leave the repository), yet ``engine_options``
reach ``lite.Model.load``, and some options name things the server then opens, runs or writes:
``custom_op_libraries`` (shared libraries ONNX Runtime loads into the server, running their code),
``cache_dir`` (a folder the server writes caches into), torch's ``precompiled`` (a folder of
compiled code it loads) and ``inductor_options`` (Inductor settings that name a compiler to run,
its flags, or folders), ONNX Runtime's ``compute_stream`` and some ``cuda_options`` (memory
addresses: a CUDA stream, allocator functions). Triton and MLServer load whatever a model's
configuration names, because there the repository is trusted; here a config may set the engines'
tuning options only, and the rest belongs to the operator:

- ``lite serve --custom-op-library PATH`` (repeatable) allows that library: configs may then name
  it in ``custom_op_libraries``;
- ``lite serve --trust-engine-options`` lets configs set any option, as Triton does, for
  repositories only those trusted with the server's account can write.

A refused option fails the model's config (a :class:`ConfigError`: the model is UNAVAILABLE with
the reason, the other models serve on) before anything is loaded.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

# Per engine: the options a config may set, every one a setting of how the engine computes.
TUNING_OPTIONS: dict[str, tuple[str, ...]] = {
    "numpy": (),
    "onnxruntime": ("optimization", "device_id", "gpu_mem_limit", "cudnn_conv_algo_search", "prefer_nhwc",
                    "cuda_graph", "fuse_conv_bias", "tf32", "precision", "int8_compute", "spinning", "cuda_options",
                    "custom_op_libraries"),
    "openvino": (),
    "torch": ("mode", "channels_last", "dynamic", "freezing", "fallback", "aot", "startup", "inductor_options",
              "precompiled"),
}
# Why each operator-only option is one: what the server would open, run or write.
OPERATOR_OPTIONS = {
    "cache_dir": "a folder the server would write its caches into",
    "compute_stream": "a CUDA stream's memory address",
}
# ONNX Runtime CUDA provider options that tune the provider; the others hold memory addresses
# (gpu_external_alloc, gpu_external_free, gpu_external_empty_cache, user_compute_stream).
CUDA_TUNING_OPTIONS = frozenset({
    "device_id", "gpu_mem_limit", "arena_extend_strategy", "cudnn_conv_algo_search", "cudnn_conv_use_max_workspace",
    "cudnn_conv1d_pad_to_nc1d", "do_copy_in_default_stream", "enable_cuda_graph", "enable_skip_layer_norm_strict_mode",
    "use_tf32", "prefer_nhwc", "fuse_conv_bias", "sdpa_kernel", "tunable_op_enable", "tunable_op_tuning_enable",
    "tunable_op_max_tuning_duration_ms", "use_ep_level_unified_stream",
})
# Inductor settings that take a word or a list of backends; every other one a config sets must be
# a boolean or a number (string settings name compilers, their flags and folders: cpp.cxx,
# cuda.compile_opt_level, global_cache_dir, ...).
INDUCTOR_WORD_SETTINGS = frozenset({
    "max_autotune_gemm_backends", "max_autotune_conv_backends", "max_autotune_gemm_search_space",
    "max_autotune_flex_search_space",
})
_WORD = re.compile(r"[A-Za-z0-9_,]{1,200}")
_OPERATOR_FLAGS = "lite serve --custom-op-library PATH allows one library; --trust-engine-options allows every option"


@dataclass(frozen=True)
class EngineOptionPolicy:
    """What the server's operator allows configs beyond the tuning options."""

    custom_op_libraries: tuple[str, ...] = ()  # resolved paths of the libraries configs may name
    trusted: bool = False  # configs may set any option


def check_engine_options(engine: str, options: Mapping[str, Any], policy: EngineOptionPolicy, where: str) -> None:
    """ConfigError naming the first option of ``options`` (engine ``engine``'s, from ``where``)
    that a config may not set under ``policy``."""
    if policy.trusted:
        return
    allowed = TUNING_OPTIONS.get(engine, ())
    for name, value in options.items():
        if name in OPERATOR_OPTIONS:
            raise ConfigError(f"{where}: engine_options {name!r} names {OPERATOR_OPTIONS[name]}, which only the "
                              "server's operator may set (the server's own applies); remove it from config.json, "
                              "or start the server with --trust-engine-options if only trusted users can write "
                              "the repository")
        if name not in allowed:
            raise ConfigError(f"{where}: engine_options {str(name)[:80]!r} is not an option config.json may set for "
                              f"engine {engine!r}; it may set: {', '.join(allowed) or 'none'} (options that name files, "
                              f"folders or memory are the operator's: {_OPERATOR_FLAGS})")
        _check_value(name, value, policy, f"{where}: engine_options {name}")


def _check_value(name: str, value: Any, policy: EngineOptionPolicy, where: str) -> None:
    if name == "custom_op_libraries":
        _check_libraries(value, policy, where)
    elif name == "precompiled" and value not in ("auto", None):
        raise ConfigError(f"{where}: {str(value)[:200]!r} names a folder of compiled code the server would load; a "
                          "config may say \"auto\" (the package lite compile wrote beside the model file) or null; "
                          "a package elsewhere needs --trust-engine-options")
    elif name == "cuda_options":
        _check_cuda_options(value, where)
    elif name == "inductor_options":
        _check_inductor_options(value, where)


def _check_libraries(value: Any, policy: EngineOptionPolicy, where: str) -> None:
    """Every library named is one the operator allowed (compared as resolved paths)."""
    paths = [value] if isinstance(value, str) else value
    if not isinstance(paths, list) or not all(isinstance(path, str) for path in paths):
        raise ConfigError(f"{where}: expected a path or a list of paths, got {str(value)[:200]}")
    allowed = set(policy.custom_op_libraries)
    for path in paths:
        if str(Path(path).resolve()) not in allowed:
            offered = ", ".join(policy.custom_op_libraries) or "none"
            raise ConfigError(f"{where}: {path[:200]!r} is not a library the server's operator allowed, and the "
                              f"server would load it, running its code (allowed: {offered}); {_OPERATOR_FLAGS}")


def _check_cuda_options(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object of CUDA provider option names and values")
    others = sorted(str(key)[:80] for key in value if key not in CUDA_TUNING_OPTIONS)
    if others:
        raise ConfigError(f"{where}: {others} are not CUDA provider options config.json may set (some hold memory "
                          f"addresses); it may set: {', '.join(sorted(CUDA_TUNING_OPTIONS))}; "
                          "--trust-engine-options allows every one")


def _check_inductor_options(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: expected an object of torch._inductor.config settings")
    for key, setting in value.items():
        if isinstance(setting, (bool, int, float)):
            continue
        if key in INDUCTOR_WORD_SETTINGS and isinstance(setting, str) and _WORD.fullmatch(setting):
            continue
        raise ConfigError(f"{where}: {str(key)[:80]!r} = {str(setting)[:80]!r}: config.json may give Inductor "
                          "settings booleans and numbers, and backend lists (letters, digits, '_' and ',') to "
                          f"{', '.join(sorted(INDUCTOR_WORD_SETTINGS))}; other values can name a compiler, its "
                          "flags or folders, which needs --trust-engine-options")
