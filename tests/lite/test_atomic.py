"""lite.atomic: whole files or nothing, through temporary files nobody else can plant."""

from __future__ import annotations

import os
import stat

import pytest

import lite.atomic
from lite.atomic import atomic_path, atomic_write


@pytest.fixture
def planted_name(monkeypatch):
    """Make the first temporary name predictable (``planted``), as a guessing attacker would hope."""
    names = iter(["planted"])
    real = lite.atomic.secrets.token_hex

    def token_hex(count: int) -> str:
        return next(names, None) or real(count)

    monkeypatch.setattr(lite.atomic.secrets, "token_hex", token_hex)
    return lambda target: target.with_name(f".{target.name}.planted.tmp")


@pytest.mark.parametrize("writer", ["atomic_write", "atomic_path"])
def test_a_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path, planted_name, writer):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    target = tmp_path / "out.bin"
    planted_name(target).symlink_to(victim)
    if writer == "atomic_write":
        with atomic_write(target) as handle:
            handle.write(b"new content")
    else:
        with atomic_path(target) as temporary:
            temporary.write_bytes(b"new content")
    assert victim.read_text() == "keep me"
    assert not target.is_symlink() and target.read_bytes() == b"new content"
    assert planted_name(target).is_symlink()  # the planted link is left alone, not renamed over the target


def test_temporary_names_are_unpredictable_and_hidden(tmp_path):
    seen = []
    for _ in range(2):
        with atomic_path(tmp_path / "m.lite") as temporary:
            seen.append(temporary.name)
            temporary.write_bytes(b"x")
    assert seen[0] != seen[1]
    assert all(name.startswith(".m.lite.") and name.endswith(".tmp") for name in seen)
    assert str(os.getpid()) not in seen[0].split(".")
    assert os.listdir(tmp_path) == ["m.lite"]


def test_output_permissions_follow_the_umask(tmp_path):
    previous = os.umask(0o022)
    try:
        with atomic_write(tmp_path / "a.bin") as handle:
            handle.write(b"a")
        with atomic_path(tmp_path / "b.bin") as temporary:
            temporary.write_bytes(b"b")
    finally:
        os.umask(previous)
    for name in ("a.bin", "b.bin"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644


def test_a_failed_block_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "m.lite"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_bytes(b"half")
        raise RuntimeError("disk full")
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["m.lite"]


@pytest.mark.parametrize("writer", [atomic_write, atomic_path])
def test_a_folder_that_cannot_be_written_is_named_with_the_file_asked_for(tmp_path, monkeypatch, writer):
    """A read-only output folder: the error named the hidden temporary file, not the output."""
    def refuse(path, *args):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(lite.atomic.os, "open", refuse)
    target = tmp_path / "out.lite"
    with pytest.raises(PermissionError) as info, writer(target):
        pass
    assert info.value.filename == str(target) and ".tmp" not in str(info.value)
