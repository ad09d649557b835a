"""The model repository on disk: ``<root>/<model>/<version>/model.lite`` plus an optional
``<root>/<model>/config.json`` (see :mod:`serving.config`).

Versions are positive integers (directory names). Model names are validated before they touch
the filesystem, and every resolved path must stay inside the repository, so a name such as
``../etc`` or a symlink pointing elsewhere cannot reach files outside it.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .config import CONFIG_FILE, ModelConfig, read_config
from .engine_options import EngineOptionPolicy
from .errors import ConfigError, InvalidRequestError, ModelNotFoundError
from .versions import parse_version, shown

MODEL_FILE = "model.lite"
log = logging.getLogger("serving.repository")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")


def check_model_name(name: str) -> str:
    """The name itself if it is a safe repository entry; InvalidRequestError otherwise."""
    if not _NAME.fullmatch(name) or ".." in name:
        raise InvalidRequestError(
            f"invalid model name {name[:140]!r}: use 1-128 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit, without '..'"
        )
    return name


@dataclass(frozen=True)
class ModelSource:
    """What the repository holds for one model right now."""

    name: str
    config: ModelConfig
    versions: dict[int, Path]  # selected by the version policy -> model file
    fingerprint: tuple  # changes whenever a file that matters changes (for polling)


class ModelRepository:
    def __init__(self, root: Path, policy: EngineOptionPolicy = EngineOptionPolicy()) -> None:
        """``policy``: the engine options the server's operator allows the configs."""
        self.root = Path(root).resolve()
        self.policy = policy
        if not self.root.is_dir():
            raise ModelNotFoundError(f"model repository {root} is not a directory")
        self._skipped: set[str] = set()  # folders already logged as no model name

    def model_names(self) -> list[str]:
        """Every directory under the root whose name is a valid model name; the others are
        logged once each (a folder named ``my model`` was skipped without a word)."""
        names = []
        for entry in sorted(self.root.iterdir()):
            if not entry.is_dir():
                continue
            if _NAME.fullmatch(entry.name) and ".." not in entry.name:
                names.append(entry.name)
            elif entry.name not in self._skipped and not entry.name.startswith("."):
                self._skipped.add(entry.name)
                log.warning("repository: folder %s is not a model name (1-128 letters, digits, '_', '-' or '.', "
                            "starting with a letter or digit); it is not served", shown(entry.name))
        return names

    def model_dir(self, name: str) -> Path:
        check_model_name(name)
        path = (self.root / name).resolve()
        if path.parent != self.root or not path.is_dir():
            raise ModelNotFoundError(f"model {name!r} not found in model repository {self.root}")
        return path

    def source(self, name: str) -> ModelSource:
        """Config and the versions its policy selects; ModelNotFoundError when none exists."""
        directory = self.model_dir(name)
        config = read_config(directory, self.policy)
        available, passed_over = self._versions(directory)
        selected = config.version_policy.select(sorted(available))
        if not selected:
            skipped = f"; not versions: {'; '.join(passed_over)}" if passed_over else ""
            raise ModelNotFoundError(
                f"model {name!r}: no version directory with {MODEL_FILE} matches its version policy "
                f"(found versions {sorted(available) or 'none'} under {directory}{skipped})"
            )
        versions = {v: available[v] for v in selected}
        return ModelSource(name, config, versions, self._fingerprint(directory, versions))

    def _versions(self, directory: Path) -> tuple[dict[int, Path], list[str]]:
        """Version -> model file, and why each folder that looks like a version is not one."""
        found: dict[int, Path] = {}
        folders: dict[int, str] = {}
        passed_over: list[str] = []
        for entry in sorted(directory.iterdir()):
            version = parse_version(entry.name)
            if not entry.is_dir() or (version is None and not entry.name.isdigit()):
                continue
            model_file = (entry / MODEL_FILE).resolve()
            if not version:
                passed_over.append(f"{shown(entry.name)} (versions are 1 to 18 digits, from 1)")
            elif not model_file.is_file():
                passed_over.append(f"{shown(entry.name)} (no {MODEL_FILE} file in it)")
            elif self.root not in model_file.parents:
                passed_over.append(f"{shown(entry.name)} (its {MODEL_FILE} resolves outside the repository)")
            elif version in found:
                # "1" and "01": which one served would depend on the directory's order
                raise ConfigError(
                    f"model {directory.name!r}: the folders {folders[version]!r} and {entry.name!r} are both "
                    f"version {version}; rename or remove one"
                )
            else:
                found[version] = model_file
                folders[version] = entry.name
        return found, passed_over

    def _fingerprint(self, directory: Path, versions: dict[int, Path]) -> tuple:
        stamps = []
        for path in [directory / CONFIG_FILE, *versions.values()]:
            try:
                stat = path.stat()
                stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
            except FileNotFoundError:
                stamps.append((str(path), 0, 0))
        return tuple(stamps)
