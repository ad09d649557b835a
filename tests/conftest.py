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


@pytest.fixture()
def onnxruntime_extensions(monkeypatch):
    """onnxruntime-extensions, or a skip. Importing it sets PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python
    in the process's environment (its cvt module), so every later subprocess of the suite parsed
    protobuf in pure Python: undone after the test."""
    monkeypatch.delenv("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", raising=False)
    return pytest.importorskip("onnxruntime_extensions", reason="onnxruntime-extensions is not installed")
