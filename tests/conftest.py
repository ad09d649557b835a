"""Suite-wide settings: caches go to a temporary folder, never the user's home."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _isolated_cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("xdg-cache")
    patcher = pytest.MonkeyPatch()
    patcher.setenv("XDG_CACHE_HOME", str(folder))
    yield folder
    patcher.undo()
