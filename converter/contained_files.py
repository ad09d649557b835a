"""Where a model's external-data location leads: a regular file inside the model's folder, or why not.

ONNX and MindSpore models both name weight files by a location relative to the model. Followed
blindly, a location can read any file the converter's user can (an absolute path, ``..``, a
symlink out of the folder) and copy its bytes into the written model, or block on a pipe. One rule
for both importers: the location is relative without ``..``; it resolves, symlinks followed, to a
path inside the model's folder (also resolved); and that is a regular file. Each importer words
the refusal for its own users (:func:`contained_file` says which rule failed).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Containment:
    """``real``: the file the location names; else ``problem``, one of "location" (absolute, a
    drive, ``..``), "missing", "unresolved" (a symlink loop, an unreadable folder; ``detail`` the
    OS error), "outside" (``real`` where it leads, ``detail`` the folder resolved), "special" (a
    folder, pipe or device)."""

    path: Path
    real: Path | None = None
    problem: str = ""
    detail: str = ""


def contained_file(folder: Path, location: str) -> Containment:
    parts = location.replace("\\", "/").split("/")
    path = folder / location
    if not location or os.path.isabs(location) or Path(location).drive or ".." in parts:
        return Containment(path, problem="location")
    try:
        real, real_folder = path.resolve(strict=True), folder.resolve(strict=True)
    except FileNotFoundError:
        return Containment(path, problem="missing")
    except (OSError, RuntimeError) as err:
        return Containment(path, problem="unresolved", detail=str(err))
    if not real.is_relative_to(real_folder):
        return Containment(path, real, "outside", str(real_folder))
    if not stat.S_ISREG(real.stat().st_mode):
        return Containment(path, real, "special")
    return Containment(path, real)
