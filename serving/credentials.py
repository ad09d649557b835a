"""The secrets and certificates a server's settings name (:mod:`serving.settings`), read and
checked at startup.

A bearer token comes inline or from a file; a TLS certificate, its key and a client CA come as
PEM files. Each is read as the server will use it, before it listens, so that a missing,
unreadable, blank or malformed one stops the server with an error naming the setting and the
file, instead of a server that runs open or fails later in gRPC with a message about something
else. The token is then compared on each call by :mod:`serving.bearer`.
"""

from __future__ import annotations

import os
import ssl
import stat
from pathlib import Path

from .errors import ConfigError

# A token is a line of text; a file much larger than this is the wrong file (or /dev/zero), which
# would otherwise be read whole into memory before the server could say so.
MAX_TOKEN_FILE_BYTES = 64 * 1024


def read_token_file(path: Path) -> str:
    """The bearer token in ``path`` (surrounding whitespace and the final newline removed).

    Only a regular file of at most ``MAX_TOKEN_FILE_BYTES`` is read: a device (/dev/zero) would be
    read until memory ran out, and a FIFO without a writer would block startup for good."""
    try:
        token = _read_small_regular_file(path, MAX_TOKEN_FILE_BYTES).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise ConfigError(
            f"auth_token_file {str(path)!r} cannot be read ({reason}); make it a UTF-8 text file this user "
            "can read, holding the token"
        ) from err
    return checked_token(token, f"auth_token_file {str(path)!r}")


def _read_small_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``; OSError when it is not a regular file or holds more than ``limit``."""
    # O_NONBLOCK: opening a FIFO for reading must not wait for a writer.
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(0, "not a regular file")
        data = file.read(limit + 1)
    if len(data) > limit:
        raise OSError(0, f"larger than {limit} bytes, more than a token")
    return data


def check_tls_files(cert: Path | None, key: Path | None, client_ca: Path | None) -> None:
    """Load the TLS files as the server will, so that a missing, unreadable, malformed or
    mismatched one stops the server at startup, naming the file. gRPC itself only logs "Invalid
    private key" and fails to add the port, which reads as a port already in use."""
    if cert is None or key is None:
        return
    for setting, path in (("tls_cert", cert), ("tls_key", key), ("tls_client_ca", client_ca)):
        if path is not None and not os.access(path, os.R_OK):
            reason = "no such file" if not path.exists() else "not readable by this user"
            raise ConfigError(f"{setting} {str(path)!r}: {reason}; give a PEM file this user can read")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # An encrypted key gets an empty password, and fails: gRPC cannot read one either.
        context.load_cert_chain(str(cert), str(key), password=lambda: b"")
    except (ssl.SSLError, OSError) as err:
        raise ConfigError(
            f"tls_cert {str(cert)!r} / tls_key {str(key)!r} cannot be used ({err.reason or err}): give the PEM "
            "certificate chain and its unencrypted PEM private key, the key that belongs to the certificate"
        ) from err
    if client_ca is not None:
        try:
            context.load_verify_locations(cafile=str(client_ca))
        except (ssl.SSLError, OSError) as err:
            raise ConfigError(
                f"tls_client_ca {str(client_ca)!r} cannot be used ({getattr(err, 'reason', None) or err}): give "
                "the PEM certificate(s) of the CA that signs the client certificates"
            ) from err


def checked_token(token: str, source: str) -> str:
    """``token``, if a client can send it: not blank, and printable ASCII (what gRPC metadata and
    HTTP headers carry)."""
    if not token.strip():
        raise ConfigError(
            f"{source} is empty or only whitespace, which would leave the server without authentication; "
            "give a real token, or set neither auth_token nor auth_token_file to serve without one"
        )
    if not all(" " <= c <= "~" for c in token):
        raise ConfigError(
            f"{source}: the token holds a character that is not printable ASCII (a line break, a control or "
            "non-ASCII character), which no client could send in an authorization header; use letters, "
            "digits and punctuation on one line"
        )
    return token
