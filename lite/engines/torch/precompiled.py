"""Precompiled packages: the torch engine's ahead-of-time artifacts shipped beside a model.

``lite compile model.lite --device cuda --batch-sizes 1 8 64 256`` compiles the model for each
batch size on the deployment GPU and writes ``model.lite.compiled/``::

    model.lite.compiled/
      manifest.json        what the artifacts were built for (below), for which inputs and, in
                           mode auto, which mode each shape was timed fastest in
      compiled/<key>/      one Inductor artifact per input signature, the engine's cache layout

``lite.Model.load("model.lite", engine="torch", device="cuda")`` finds the package beside the
file (or takes ``precompiled=PATH``), checks the manifest against the running machine and, when it
matches, installs the artifacts into the engine's cache: the first call at each packaged batch
size loads code instead of compiling it (seconds, not minutes). When it does not match, the
engine says why (:attr:`Package.mismatch`) and compiles as its ``startup`` policy says.

The key of a package is what an artifact depends on beyond the model: the GPU architecture
(``sm_90`` serves an H100 and an H200 alike: Triton kernels are compiled per architecture), and
the versions of torch, CUDA, Triton and lite's torch lowering. Each artifact's own folder name is
the engine's cache key (:meth:`AotCompiled.key`), so a package built for another model, precision
or batch size simply has no artifact for a signature, and that signature compiles.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lite.engines.torch.compiler import lowering_digest
from lite.engines.torch.graphs import gpu_arch

MANIFEST = "manifest.json"
FORMAT = 1
SUFFIX = ".compiled"
# What must match between the machine that compiled and the one that runs, in the order a
# mismatch is reported.
KEYS = ("format", "gpu_arch", "torch", "cuda", "triton", "lowering")


def environment(device: torch.device) -> dict[str, Any]:
    """What this machine would stamp on a package (and what a package must match to be used)."""
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {"format": FORMAT, "gpu_arch": gpu_arch(device), "torch": torch.__version__, "cuda": torch.version.cuda,
            "triton": triton_version, "lowering": lowering_digest()[:16],
            "gpu_name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"}


def file_digest(path: str | os.PathLike) -> str:
    """The sha256 of a model file, which a manifest records to say which model it belongs to."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def default_location(model_path: str | os.PathLike) -> Path:
    """Where ``lite compile`` writes a model's package and where loading looks for it."""
    return Path(str(model_path) + SUFFIX)


@dataclass
class Package:
    """A package opened and checked against this machine; ``mismatch`` is None when it applies."""

    path: Path
    manifest: dict[str, Any]
    mismatch: str | None = None
    used: list[str] = field(default_factory=list)  # artifact keys installed from it

    @property
    def applies(self) -> bool:
        return self.mismatch is None

    def artifact(self, key: str) -> Path | None:
        """The packaged artifact of ``key``, when the package applies and holds it."""
        if not self.applies:
            return None
        folder = self.path / "compiled" / key
        return folder if folder.is_dir() else None

    def choice(self, key: str) -> dict[str, Any] | None:
        """The mode ``auto`` chose for a shape when the package was built (its ``auto`` key), when the package applies."""
        choices = self.manifest.get("choices") if self.applies else None
        return choices.get(key) if isinstance(choices, dict) else None

    def install(self, key: str, cache_folder: Path | None) -> Path | None:
        """The artifact of ``key``, copied into ``cache_folder`` (Inductor keeps the kernels'
        launch tuning beside their code, and a package may be read-only); None when absent."""
        source = self.artifact(key)
        if source is None:
            return None
        self.used.append(key)
        if cache_folder is None:
            return source
        target = cache_folder / key
        if not target.is_dir():
            staging = target.with_name(f".{key}.{os.getpid()}.install")
            shutil.rmtree(staging, ignore_errors=True)
            cache_folder.mkdir(parents=True, exist_ok=True)
            shutil.copytree(source, staging)
            try:
                os.replace(staging, target)
            except OSError:  # another process installed it first
                shutil.rmtree(staging, ignore_errors=True)
        return target

    def describe(self) -> dict[str, Any]:
        return {"path": str(self.path), "applies": self.applies, "mismatch": self.mismatch,
                "batch_sizes": self.manifest.get("batch_sizes"), "artifacts_used": len(self.used)}


def open_package(path: str | os.PathLike, device: torch.device, model_digest: str | None) -> Package:
    """Read ``path``'s manifest and check it against this machine (and, given its digest, the
    model file). A package that cannot be read is returned with the reason as its mismatch."""
    folder = Path(path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if not isinstance(manifest, dict):
            raise ValueError("the manifest is not a JSON object")
    except (OSError, ValueError) as err:
        return Package(folder, {}, f"{folder / MANIFEST} cannot be read ({type(err).__name__}: {err})")
    return Package(folder, manifest, mismatch(manifest, environment(device), model_digest))


def mismatch(manifest: dict[str, Any], here: dict[str, Any], model_digest: str | None) -> str | None:
    """Why a package stamped ``manifest`` does not apply where ``here`` describes the machine."""
    built = manifest.get("built_for", {})
    for key in KEYS:
        if built.get(key) != here.get(key):
            if key == "gpu_arch":
                return (f"built for GPU architecture {built.get(key)} ({built.get('gpu_name')}), this GPU is "
                        f"{here.get(key)} ({here.get('gpu_name')}); run lite compile on this machine")
            if key == "lowering":
                return "built by another version of lite's torch lowering; run lite compile again"
            return f"built with {key} {built.get(key)}, this machine has {here.get(key)}; run lite compile again"
    expected = manifest.get("model_sha256")
    if model_digest is not None and expected is not None and expected != model_digest:
        return f"built for another model file (sha256 {expected[:12]}…, this file is {model_digest[:12]}…)"
    return None


def write_manifest(folder: Path, device: torch.device, model_digest: str, batch_sizes: list[int],
                   settings: dict[str, Any], keys: list[str],
                   choices: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    manifest = {"built_for": environment(device), "model_sha256": model_digest, "batch_sizes": batch_sizes,
                "settings": settings, "artifacts": keys, "choices": choices or {}}
    (folder / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest
