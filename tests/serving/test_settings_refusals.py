"""Settings the server cannot honour stop ``python -m serving`` before it listens: one line naming
the setting and its flag, exit status 2, never a traceback, a hang or a silently different server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .conftest import identity_model, refusal_to_start


@pytest.fixture(scope="module")
def repository(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("settings-repository")
    identity_model(root / "identity" / "1" / "model.lite")
    return root


@pytest.mark.parametrize(("flag", "value", "says"), [
    # gRPC takes the message limit as a C int: OverflowError from its channel arguments.
    ("--max-message-bytes", "99999999999999", "max_message_bytes must be an integer from 1 to 2147483647"),
    # logging's "Unknown level" ValueError, after the settings had been accepted.
    ("--log-level", "foo", "log_level 'foo': expected one of debug, info, warning, error"),
    # inf: threading.Timer's OverflowError at SIGTERM; nan: no drain at all, exit at once.
    ("--grace-period-s", "inf", "grace_period_s must be a number of seconds from 0 to 86400"),
    ("--grace-period-s", "nan", "grace_period_s must be a number of seconds from 0 to 86400"),
    ("--grace-period-s", "-1", "grace_period_s must be a number of seconds from 0 to 86400"),
    ("--poll-interval-s", "nan", "poll_interval_s must be a number of seconds from 0 to 86400"),
    ("--poll-interval-s", "1e300", "poll_interval_s must be a number of seconds from 0 to 86400"),
])
def test_a_setting_out_of_range_refuses_to_start_naming_it(repository, flag, value, says):
    message = refusal_to_start(repository, flag, value)
    assert says in message
    assert flag in message


def test_a_device_as_token_file_is_refused_unread(repository):
    """/dev/zero was read until memory ran out (3.8 GB in 5 s)."""
    message = refusal_to_start(repository, "--auth-token-file", "/dev/zero")
    assert "auth_token_file '/dev/zero' cannot be read (not a regular file)" in message


def test_a_token_file_larger_than_a_token_is_refused(repository, tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("x" * (64 * 1024 + 1))
    message = refusal_to_start(repository, "--auth-token-file", str(token_file))
    assert "larger than 65536 bytes" in message


def test_a_fifo_as_token_file_is_refused_without_waiting_for_a_writer(repository, tmp_path):
    fifo = tmp_path / "token"
    os.mkfifo(fifo)
    message = refusal_to_start(repository, "--auth-token-file", str(fifo))  # waited for a writer for good
    assert "not a regular file" in message

